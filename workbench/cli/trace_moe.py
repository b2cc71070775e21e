"""`python -m workbench trace --moe-scheme JSON`: one fused-MoE layer's dispatch trace."""
from __future__ import annotations

import argparse
import json

from workbench.cli.inputs import json_arg, json_object
from workbench.text import printable

MOE_SCHEME_HELP = ("a compressed-tensors MoE layer as JSON (or @file): \"weights\" and "
                   "\"input_activations\" (QuantizationArgs, as --scheme takes them), "
                   "\"num_experts\", \"top_k\", \"hidden_size\", \"intermediate_size\", "
                   "optional \"activation\" (default silu), \"params_dtype\" (bfloat16), "
                   "\"format\" (pack-quantized), \"layer_name\"; or \"quantization\": "
                   "\"w4afp8\" (vLLM releases that have it) with \"group_size\" instead of the args")


def register_options(p: argparse.ArgumentParser, src: argparse._MutuallyExclusiveGroup) -> None:
    src.add_argument("--moe-scheme", metavar="JSON", help=MOE_SCHEME_HELP)
    p.add_argument("--moe-backend", default=None, metavar="NAME",
                   help="vLLM's --moe-backend for --moe-scheme (default: auto)")


def is_moe_layer_name(name: str | None) -> bool:
    """`--layer` names a checkpoint's experts (vLLM's RoutedExperts prefix)."""
    return bool(name) and name.endswith(".experts")


def run_moe(args: argparse.Namespace, platform) -> int:
    """Trace the --moe-scheme layer, or --checkpoint's --layer ...experts, and print it."""
    from workbench.dispatch.moe import trace_moe

    if args.moe_scheme:
        data = json_object(json_arg(args.moe_scheme, "--moe-scheme"), "--moe-scheme")
    else:
        from workbench.checkpoints.moe import MoELayoutError, checkpoint_moe_layers, moe_layer_of
        from workbench.cli.inputs import checkpoint_path
        groups, config = checkpoint_moe_layers(checkpoint_path(args.checkpoint, "--checkpoint"))
        found = [g for g in groups if g.name == args.layer]
        if not found:
            raise MoELayoutError(f"--layer {args.layer!r}: no MoE layer of that name; MoE layers: "
                                 f"{', '.join(g.name for g in groups) or '(none)'}")
        data = moe_layer_of(found[0], config)
    trace = trace_moe(data, platform, args.moe_backend or "auto", args.vllm_version)
    if args.json:
        print(json.dumps(trace.to_json()))
    elif args.markdown:
        print(printable(trace.to_markdown(), keep_newlines=True))
    else:
        print(printable(format_moe_text(trace), keep_newlines=True))
    return 0


def format_moe_text(trace) -> str:
    """The plain-text face of an MoE trace: resolution, the oracle's loop, the outcome."""
    lines = []
    for p in trace.predicates:
        mark = "MATCH" if p.matched else "no   "
        lines.append(f"  {mark} {p.name}" + (f" -> {p.result}" if p.matched else f"  ({p.detail})"))
    if trace.method:
        lines.append(f"method: {trace.method}")
    if trace.oracle:
        lines.append(f"oracle: {trace.oracle}  backends: {', '.join(trace.candidates) or '(none)'}")
    for b in trace.backends:
        if b.skipped is not None:
            lines.append(f"  {b.backend:18s} skipped    {b.skipped}")
        for s in b.probes:
            lines.append(f"  {b.backend:18s} {s.kernel:32s} {s.outcome:9s} {s.reason or ''}")
    if trace.experts:
        lines.append(f"selected: {trace.backend} -> {trace.experts}")
    if trace.runs:
        lines.append(f"runs: {trace.runs}")
    if trace.error:
        lines.append(f"{trace.error_type}: {trace.error}")
    lines.append(f"(vLLM {trace.vllm_version}, platform {trace.platform}, "
                 f"moe_backend {trace.moe_backend})")
    return "\n".join(lines)
