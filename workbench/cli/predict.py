"""`python -m workbench predict`: predicted time per (path, M) on a platform, with its band.

    python -m workbench predict --platform sm90-h200 --n 4096 --k 4096 --group 128 \\
        --m 1,16,256 --paths w4a8_native,w4a16_fallback,bf16_dense,int8_mm,selected --json

`--platform host` predicts this machine: its GPU where it has one (as the matching preset),
else its CPU (calibrated once, in seconds, and cached); `--platform host-cpu` is the CPU always.
"""
from __future__ import annotations

import argparse
import json

from workbench.cli.inputs import int_in, m_list, name_list
from workbench.dispatch.versions import DEFAULT_VERSION, available

_DEFAULT_PATHS = "w4a8_native,w4a16_fallback,bf16_dense,int8_mm,selected"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="predicted GEMM time per path and M on a platform")
    p.add_argument("--platform", default="sm90-h200", help="a preset name or alias, 'host' (this machine: its GPU where it has one) "
                   "or 'host-cpu' (this machine's CPU)")
    p.add_argument("--n", type=int_in(1, 2**31 - 1), required=True, help="output features (N)")
    p.add_argument("--k", type=int_in(1, 2**31 - 1), required=True, help="input features (K)")
    p.add_argument("--group", type=int_in(1, 2**31 - 1, also=(-1,)), default=128,
                   help="group size, -1 per-channel (default 128)")
    p.add_argument("--m", default="1,16,256", help="token counts, comma-separated")
    p.add_argument("--paths", default=_DEFAULT_PATHS,
                   help=f"comma-separated, from: {', '.join(__import__('workbench.perf.predict', fromlist=['PREDICTED_PATHS']).PREDICTED_PATHS)}, selected")
    p.add_argument("--vllm-version", choices=available(), default=DEFAULT_VERSION,
                   help=f"the vLLM rule set 'selected' is traced with (default: {DEFAULT_VERSION})")
    p.add_argument("--scheme", choices=("w4a16", "w4a8-int", "w4a8-fp8"), default="w4a8-int",
                   help="the layer's scheme 'selected' traces: int4 weights with bf16, int8 or fp8 "
                        "dynamic per-token activations (default w4a8-int)")
    p.add_argument("--json", action="store_true", help="one JSON record per line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workbench.perf.predict import CPU_ONLY_PATHS, PREDICTED_PATHS, SELECTED
    from workbench.perf.selected import predict_paths

    ms = m_list(args.m)
    # predict refuses dense on GPUs
    paths = name_list(args.paths, "--paths", PREDICTED_PATHS + (SELECTED,) + CPU_ONLY_PATHS)
    preds = predict_paths(args.platform, paths, ms, args.n, args.k, args.group, version=args.vllm_version,
                          scheme=args.scheme)
    if args.json:
        for pr in preds:
            print(json.dumps(pr.to_json()))
        return 0
    from workbench.perf.wording import band_text, time_text

    print(f"{'path':15s} {'M':>6s} {'predicted µs':>28s} {'band µs':>21s}  basis     kernel")
    for pr in preds:
        if pr.predicted_us is None:
            print(f"{pr.path:15s} {pr.m:6d} {'-':>28s} {'-':>21s}  {pr.basis:9s} {pr.kernel}: {pr.note}")
            continue
        shown = time_text(pr.predicted_us, pr.basis, unit=False)
        print(f"{pr.path:15s} {pr.m:6d} {shown:>28s} {band_text(pr.low_us, pr.high_us, pr.basis):>21s}  "
              f"{pr.basis:9s} {pr.kernel}")
    return 0
