"""`python -m workbench inspect PATH`: list a checkpoint's quantized layers, no tensor data read."""
from __future__ import annotations

import argparse
import json
import textwrap

from workbench.cli.inputs import checkpoint_path, int_in, platform_arg
from workbench.dispatch.versions import DEFAULT_VERSION, available
from workbench.text import printable

ERROR_WIDTH = 100  # the footnotes under the table wrap vLLM's messages at this width


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="list a checkpoint's quantized layers and their resolved scheme",
                       description="Read a checkpoint's config and safetensors headers (never its "
                                   "weights) and list every quantized layer with its shapes, format, "
                                   "quantization args and the scheme/kernel vLLM resolves "
                                   "(--vllm-version).")
    p.add_argument("path", help="checkpoint directory (config.json + *.safetensors)")
    p.add_argument("--platform", default="sm90-h200",
                   help="platform preset for the resolved-scheme column (default: sm90-h200)")
    p.add_argument("--tp", type=int_in(1, 1024), default=1,
                   help="tensor-parallel size for the resolution; K and N are then each shard's")
    p.add_argument("--no-scheme", action="store_true", help="skip the resolved-scheme column")
    p.add_argument("--vllm-version", choices=available(), default=DEFAULT_VERSION,
                   help=f"the vLLM rule set resolving the scheme column (default: {DEFAULT_VERSION})")
    p.add_argument("--json", action="store_true", help="print the listing as JSON")
    p.set_defaults(func=run)


def _table(rows: list[dict], columns: list[str], headers: dict[str, str]) -> str:
    cells = [[printable(r.get(c, "")) if r.get(c) is not None else "-" for c in columns] for r in rows]
    names = [headers.get(c, c) for c in columns]
    widths = [max([len(n)] + [len(row[i]) for row in cells]) for i, n in enumerate(names)]
    lines = ["  ".join(n.ljust(w) for n, w in zip(names, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def _shard(layer, tp: int) -> dict:
    """The shard vLLM builds at this TP: K and N per partition, or None where TP cannot split."""
    from workbench.errors import InvalidInputError

    parallel = layer.default_parallel
    try:
        k, n = layer.partition_shape(tp, parallel)
    except InvalidInputError:
        k = n = None
    return {"parallel": parallel, "in_features": k, "out_features": n}


def _footnotes(rows: list[dict]) -> list[str]:
    """Replace each row's error by a note number; one wrapped note per distinct message."""
    notes: dict[str, int] = {}
    for row in rows:
        error = row.get("error")
        if error:
            number = notes.setdefault(error, len(notes) + 1)
            row["error"] = f"{error.split(':', 1)[0]} [{number}]"
    return [textwrap.fill(error, ERROR_WIDTH, initial_indent=f"[{i}] ", subsequent_indent="    ")
            for error, i in notes.items()]


def run(args: argparse.Namespace) -> int:
    from workbench.checkpoints import listing_rows, open_checkpoint
    from workbench.platforms import resolve_platform

    # Resolved once, up front: a bad platform is one error, not the same error in every row.
    platform = None if args.no_scheme else resolve_platform(platform_arg(args.platform))
    ck = open_checkpoint(checkpoint_path(args.path, "path"))
    rows = listing_rows(ck.layers, platform, tp_size=args.tp, with_scheme=not args.no_scheme,
                        version=args.vllm_version)
    shards = [_shard(layer, args.tp) for layer in ck.layers]
    if args.json:
        out = ck.to_dict()
        out["platform"] = None if args.no_scheme else args.platform
        out["tp_size"] = args.tp
        for layer, row, shard in zip(out["layers"], rows, shards):
            layer["shard"] = shard
            layer["resolved"] = {k: row.get(k) for k in ("scheme", "kernel", "error")}
        print(json.dumps(out, indent=2))
        return 0
    files = ", ".join(printable(f.name) for f in ck.files.weight_files)
    print(f"{printable(ck.path)}: {ck.format.value} ({ck.quant_config.get('quant_method')}), model dtype "
          f"{ck.params_dtype}, {len(ck.layers)} quantized layer(s) in {files}")
    for note in ck.notes:
        print(f"note: {printable(note)}")
    columns = ["layer", "K", "N", "weights", "group_size", "input", "ct_format", "scale_dtype"]
    headers = {}
    if args.tp > 1:
        for row, shard in zip(rows, shards):
            row.update(parallel=shard["parallel"], K=shard["in_features"], N=shard["out_features"])
        columns.insert(1, "parallel")
        headers = {"K": f"K/TP{args.tp}", "N": f"N/TP{args.tp}"}
    notes: list[str] = []
    if not args.no_scheme:
        print(f"resolved on {args.platform}" + (f" at TP {args.tp}" if args.tp > 1 else "") + ":")
        columns += ["scheme", "kernel", "error"]
        notes = _footnotes(rows)
    print(_table(rows, columns, headers))
    if args.tp > 1:
        print(f"K and N are each shard's at TP {args.tp} (row-parallel layers split K, column-"
              "parallel layers split N); '-' where TP does not divide the layer.")
    if notes:
        print("\nerrors (vLLM's messages; --json holds them too):")
        print("\n".join(notes))
    _print_moe(ck)
    return 0


def _print_moe(ck) -> None:
    """The checkpoint's MoE layers: vLLM loads each experts prefix as one fused-MoE layer."""
    from workbench.checkpoints.moe import MoELayoutError, moe_groups
    try:
        groups = moe_groups(ck.layers, ck.files.tensors, ck.format, ck.params_dtype)
    except MoELayoutError as exc:  # the listing stands; the MoE grouping says what is wrong
        print(f"MoE layers: {printable(exc)}")
        return
    for g in groups:
        print(f"MoE layer {printable(g.name)}: {g.layout}, {g.num_experts} experts, hidden "
              f"{g.hidden_size}, intermediate {g.intermediate_size}; vLLM loads these "
              "projections as one fused-MoE layer: trace it with --layer "
              f"{printable(g.name)}")
