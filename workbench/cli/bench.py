"""`python -m workbench bench`: time kernel paths on one layer, print or save the records.

    python -m workbench bench --m 1,32,128 --n 4096 --k 4096 --group 128 \
        --paths w4a8_native,w4a16_fallback,int8_mm,bf16_dense,vllm_dynamic4bit --json

prints one JSON record per (path, M) with at least path, m, n, k, group_size,
median_ms, rel_error (against the float reference) and available (false, with why,
where a path cannot run here). `--out results.json` (or .csv) also writes the records
with their provenance; `--list` shows every path and whether it can run here.
"""
from __future__ import annotations

import argparse
import json
import sys


from workbench.errors import InvalidInputError

_DEFAULT_PATHS = "w4a8_native,w4a16_fallback"


def _ints(text: str, field: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InvalidInputError(f"{field}: {text!r}; accepted: comma-separated integers") from None
    if not values:
        raise InvalidInputError(f"{field}: empty; accepted: comma-separated integers")
    return values


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="time W4A8 and W4A16 kernel paths on this machine",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", default="1,32,128", help="token counts, comma-separated (default 1,32,128)")
    p.add_argument("--n", type=int, default=4096, help="out_features N (default 4096)")
    p.add_argument("--k", type=int, default=4096, help="in_features K (default 4096)")
    p.add_argument("--group", type=int, default=128, help="group size; -1 per-channel (default 128)")
    p.add_argument("--asym", action="store_true", help="asymmetric weights (zero points)")
    p.add_argument("--paths", default=_DEFAULT_PATHS, help=f"kernel paths (default {_DEFAULT_PATHS})")
    p.add_argument("--model", help="bench a real model's shard instead (see workbench.models)")
    p.add_argument("--layer", help="with --model: qkv_proj, o_proj, gate_up_proj, down_proj, ...")
    p.add_argument("--tp", type=int, default=1, help="with --model: tensor parallel size")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-call-s", type=float, default=10.0,
                   help="stop timing a path at larger M once one call exceeds this (default 10)")
    p.add_argument("--json", action="store_true", help="one JSON record per line")
    p.add_argument("--out", help="also write the records with provenance (.json or .csv)")
    p.add_argument("--list", action="store_true", help="list the paths and whether they run here")
    p.set_defaults(func=run)


def _layer(args):
    from workbench.bench import synthetic_bench_layer
    if args.model:
        from workbench.models import partitions
        parts = partitions(args.model, args.tp)
        names = [q.layer for q in parts]
        if args.layer not in names:
            raise InvalidInputError(f"--layer: {args.layer!r}; {args.model} at TP {args.tp} has "
                                    f"{', '.join(names)}")
        part = parts[names.index(args.layer)]
        n, k = part.n, part.k
    else:
        n, k = args.n, args.k
    if n <= 0 or k <= 0:
        raise InvalidInputError(f"--n and --k must be positive, got N = {n}, K = {k}")
    g = args.group
    if g != -1 and (g <= 0 or k % g):
        raise InvalidInputError(f"--group: {g} does not divide K = {k}; accepted: -1 or a divisor of K")
    layer = synthetic_bench_layer(n, k, g, seed=args.seed, symmetric=not args.asym)
    return layer


def run(args) -> int:
    from w4a8_kernels.registry import PATHS
    from workbench.bench import bench_layer_weight, host_provenance, write_csv, write_json

    if args.list:
        for name, path in PATHS.items():
            ok, why = path.probe()
            print(f"{name:22s} {'yes' if ok else 'no ':3s} {path.summary}" + (f"  [{why}]" if why else ""))
        return 0
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown or not paths:
        raise InvalidInputError(f"--paths: unknown {', '.join(unknown) or '(none given)'}; known: "
                                f"{', '.join(PATHS)}")
    ms = _ints(args.m, "--m")
    if any(m < 0 for m in ms):
        raise InvalidInputError(f"--m: token counts must be >= 0, got {ms}")
    if args.repeats < 1 or args.warmup < 0:
        raise InvalidInputError("--repeats must be >= 1 and --warmup >= 0")
    if args.threads is not None:
        if args.threads < 1:
            raise InvalidInputError(f"--threads: {args.threads}; accepted: >= 1")
        import torch  # imported here: the CLI starts fast for every other command

        torch.set_num_threads(args.threads)
    layer = _layer(args)
    prov = host_provenance()
    records = bench_layer_weight(layer, paths, ms, warmup=args.warmup, repeats=args.repeats,
                                 max_call_s=args.max_call_s, seed=args.seed)
    if args.json:
        for r in records:
            print(json.dumps(r.to_dict()))
    else:
        print(f"{layer.name}  threads={prov['threads']}  torch {prov['torch']}  {prov['cpu']}")
        print(f"{'path':22s} {'M':>6s} {'median ms':>10s} {'p20-p80':>17s} {'rel err':>9s}  note")
        for r in records:
            if r.median_ms is None:
                print(f"{r.path:22s} {r.m:6d} {'-':>10s} {'':17s} {'':9s}  {r.why}")
                continue
            spread = f"{r.p20_ms:.3g}-{r.p80_ms:.3g}"
            err = f"{r.rel_error:.2e}" if r.rel_error is not None else "-"
            print(f"{r.path:22s} {r.m:6d} {r.median_ms:10.3f} {spread:>17s} {err:>9s}  {r.detail or r.why}")
    if args.out:
        write = write_csv if args.out.endswith(".csv") else write_json
        out = write(records, args.out, prov)
        print(f"wrote {out}", file=sys.stderr)
    return 0
