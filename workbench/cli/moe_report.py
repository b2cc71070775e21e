"""`python -m workbench moe-report`: an MoE model's MoE layers, traced and costed per platform."""
from __future__ import annotations

import argparse
import json

from workbench.cli.inputs import int_in


def register(sub: argparse._SubParsersAction) -> None:
    from workbench.dispatch.moe import MOE_VERSIONS
    from workbench.moe_models import MOE_MODELS, SCHEMES
    from workbench.perf.moe_cost import LOADS
    p = sub.add_parser("moe-report", help="an MoE model's expert layers: what vLLM runs, its cost",
                       description="Trace one MoE layer of a preset model per platform and cost "
                                   "it from the per-expert GEMMs its routing implies (uniform "
                                   "or skewed loads), times the model's MoE layers; a platform "
                                   "where vLLM refuses the layer shows the refusal, no total.")
    p.add_argument("--model", required=True, choices=sorted(MOE_MODELS))
    p.add_argument("--scheme", default="w4a8-int8", choices=sorted(SCHEMES))
    p.add_argument("--platform", action="append", default=None,
                   help="preset (repeatable; default: every preset)")
    p.add_argument("--tokens", type=int_in(1, 16384), default=16)
    p.add_argument("--load", default="uniform", choices=LOADS)
    p.add_argument("--tp", type=int_in(1, 64), default=1)
    p.add_argument("--vllm-version", default=MOE_VERSIONS[0], choices=MOE_VERSIONS)
    p.add_argument("--json", action="store_true", help="one JSON object per platform")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workbench.perf.moe_cost import moe_model_report
    from workbench.platforms import PRESETS, get_preset
    platforms = [get_preset(p).name for p in args.platform] if args.platform else list(PRESETS)
    for plat in platforms:
        r = moe_model_report(args.model, plat, args.scheme, args.tokens, args.load, args.tp,
                             args.vllm_version)
        if args.json:
            print(json.dumps(r))
            continue
        if r["total_us"] is not None:
            lo, hi = r["total_band_us"]
            print(f"{plat:18s} {r['moe_layers']} MoE layers x {r['per_layer']['us']:.0f} us = "
                  f"{r['total_us'] / 1000:.2f} ms (band {lo / 1000:.2f}-{hi / 1000:.2f} ms, "
                  f"{r['basis']}; {r['per_layer']['path']})")
        else:
            print(f"{plat:18s} no total: {r['refused'] or r['not_modelled']}")
    return 0
