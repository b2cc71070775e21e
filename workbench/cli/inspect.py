"""`python -m workbench inspect PATH`: list a checkpoint's quantized layers, no tensor data read."""
from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="list a checkpoint's quantized layers and their resolved scheme",
                       description="Read a checkpoint's config and safetensors headers (never its "
                                   "weights) and list every quantized layer with its shapes, format, "
                                   "quantization args and the scheme/kernel vLLM 0.33.0 resolves.")
    p.add_argument("path", help="checkpoint directory (config.json + *.safetensors)")
    p.add_argument("--platform", default="sm90-h200",
                   help="platform preset for the resolved-scheme column (default: sm90-h200)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size for the resolution")
    p.add_argument("--no-scheme", action="store_true", help="skip the resolved-scheme column")
    p.add_argument("--json", action="store_true", help="print the listing as JSON")
    p.set_defaults(func=run)


def _table(rows: list[dict], columns: list[str]) -> str:
    cells = [[str(r.get(c, "")) if r.get(c) is not None else "-" for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from workbench.checkpoints import listing_rows, open_checkpoint

    ck = open_checkpoint(args.path)
    rows = listing_rows(ck.layers, args.platform, tp_size=args.tp, with_scheme=not args.no_scheme)
    if args.json:
        out = ck.to_dict()
        out["platform"] = None if args.no_scheme else args.platform
        out["tp_size"] = args.tp
        for layer, row in zip(out["layers"], rows):
            layer["resolved"] = {k: row.get(k) for k in ("scheme", "kernel", "error")}
        print(json.dumps(out, indent=2))
        return 0
    files = ", ".join(f.name for f in ck.files.weight_files)
    print(f"{ck.path}: {ck.format.value} ({ck.quant_config.get('quant_method')}), model dtype "
          f"{ck.params_dtype}, {len(ck.layers)} quantized layer(s) in {files}")
    for note in ck.notes:
        print(f"note: {note}")
    columns = ["layer", "K", "N", "weights", "group_size", "input", "ct_format", "scale_dtype"]
    if not args.no_scheme:
        print(f"resolved on {args.platform}" + (f" at TP {args.tp}" if args.tp > 1 else "") + ":")
        columns += ["scheme", "kernel", "error"]
    print(_table(rows, columns))
    return 0
