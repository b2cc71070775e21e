"""`python -m workbench moe-run`: a W4A8 MoE layer run on this CPU beside the W4A16 fallback."""
from __future__ import annotations

import argparse
import json

from workbench.cli.inputs import int_in


def _ints(text: str, what: str) -> tuple[int, ...]:
    from workbench.errors import InvalidInputError
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise InvalidInputError(f"{what}: expected comma-separated positive integers, got "
                                f"{text[:40]!r}") from None
    if not values or any(v < 1 or v > 4096 for v in values):
        raise InvalidInputError(f"{what}: each value from 1 to 4096, got {text[:40]!r}")
    return values


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("moe-run", help="run a synthetic W4A8 MoE layer here against float64",
                       description="Route tokens, run each expert's int8 x int4 GEMM pair and "
                                   "the gated activation on this CPU (vLLM's _dyn_quant path, "
                                   "the project's W4A8 kernels, the W4A16 fallback), each held "
                                   "to float64; per-expert token counts shown.")
    p.add_argument("--experts", type=int_in(1, 512), default=8)
    p.add_argument("--hidden", type=int_in(2, 16384), default=512)
    p.add_argument("--intermediate", type=int_in(2, 16384), default=256)
    p.add_argument("--group", type=int, default=128, help="group size, -1 channelwise")
    p.add_argument("--tokens", default="1,4,16,64", help="comma-separated token counts")
    p.add_argument("--top-k", default="1,2,4", help="comma-separated top-k values")
    p.add_argument("--activation", default="silu", choices=("silu", "gelu_tanh"))
    p.add_argument("--time", action="store_true",
                   help="also time the paths, interleaved in this process: each one's median "
                        "and its ratio to the W4A16 fallback (20-80%% spread), load flagged")
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workbench.moe_run import OWN_REFERENCE, sweep, synthetic_moe
    mw = synthetic_moe(args.experts, args.hidden, args.intermediate, args.group)
    rows = sweep(mw, _ints(args.tokens, "--tokens"), _ints(args.top_k, "--top-k"),
                 args.activation)
    if not rows:
        return 0
    paths = list(rows[0].errors)
    if not args.json:
        print(f"{args.experts} experts, hidden {args.hidden}, intermediate {args.intermediate}, "
              f"group {args.group}, {args.activation}; relative Frobenius error vs float64 "
              "(own reference / vs the W4A16 float result)")
    for r in rows:
        if args.json:
            print(json.dumps({"tokens": r.tokens, "top_k": r.top_k,
                              "tokens_per_expert": list(r.tokens_per_expert),
                              "errors": r.errors, "own_reference": OWN_REFERENCE}))
            continue
        cells = "  ".join(f"{p} {r.errors[p][OWN_REFERENCE[p]]['rel_frobenius']:.1e}/"
                          f"{r.errors[p]['w4a16']['rel_frobenius']:.2e}" for p in paths)
        print(f"T={r.tokens:<4d} k={r.top_k}  per-expert {list(r.tokens_per_expert)}  {cells}")
    if args.time:
        from workbench.moe_run import time_paths
        for r in rows:
            t = time_paths(mw, r.tokens, r.top_k, args.activation)
            if args.json:
                print(json.dumps({"tokens": t.tokens, "top_k": t.top_k, "median_ms": t.median_ms,
                                  "ratio_to_w4a16": t.ratio_to_w4a16, "rounds": t.rounds,
                                  "loaded": t.loaded, "load": t.load}))
                continue
            cells = "  ".join(f"{p} {t.median_ms[p]:.2f} ms x{t.ratio_to_w4a16[p][0]:.2f} "
                              f"({t.ratio_to_w4a16[p][1]:.2f}-{t.ratio_to_w4a16[p][2]:.2f})"
                              for p in t.median_ms)
            flag = "  [loaded: other processes took the cores]" if t.loaded else ""
            print(f"time T={t.tokens:<4d} k={t.top_k}  {cells}{flag}")
    return 0
