"""`python -m workbench report SOURCE --platform P --tp T`: every linear layer of a model
preset or checkpoint, what vLLM runs for it and its predicted time at a decode and a prefill M."""
from __future__ import annotations

import argparse
import json

from workbench.cli.inputs import int_in
from workbench.dispatch.versions import DEFAULT_VERSION, available
from workbench.limits import MAX_M
from workbench.text import printable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="whole-model report: each layer's kernel, runtime and predicted time")
    p.add_argument("source", help="a model preset (see workbench/models.py) or a checkpoint directory")
    p.add_argument("--platform", default="sm90-h200",
                   help="a preset name or alias, or 'host'; several, comma-separated, compare them")
    p.add_argument("--schemes", default=None,
                   help="compare the model under these schemes, comma-separated (w4a16, w4a8-int, w4a8-fp8; "
                        "for a checkpoint also 'checkpoint': its layers as saved, a scheme being its twin), "
                        "e.g. w4a8-int,w4a16")
    p.add_argument("--tp", type=int_in(1, 1024), default=1, help="tensor-parallel size (default 1)")
    p.add_argument("--decode-m", type=int_in(1, MAX_M), default=1, help="decode tokens per call (default 1)")
    p.add_argument("--prefill-m", type=int_in(1, MAX_M), default=2048, help="prefill tokens per call (default 2048)")
    p.add_argument("--vllm-version", choices=available(), default=DEFAULT_VERSION,
                   help=f"the vLLM rule set every layer is traced with (default: {DEFAULT_VERSION})")
    p.add_argument("--versions", metavar="OLD,NEW",
                   help="what changes on upgrade: each layer's kernel, what it computes, its error "
                        "and predicted times under both rule sets ('no change' where equal; "
                        "`trace --versions` gives each difference's vLLM file:line)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--csv", action="store_true", help="print the layer rows as CSV")
    p.add_argument("--total-loaded", action="store_true",
                   help="where vLLM refuses a layer, still print a total over the layers that load "
                        "(labelled so; the exit status stays 1)")
    p.set_defaults(func=run)


def _us(v, basis: str | None = None) -> str:
    from workbench.perf.wording import time_text

    return time_text(v, basis, unit=False)


def run(args: argparse.Namespace) -> int:
    from workbench.perf.report import model_report

    if args.versions is not None:
        return _run_versions(args)
    if args.schemes is not None or "," in args.platform:
        return _compare(args)

    rep = model_report(args.source, args.platform, args.tp, decode_m=args.decode_m, prefill_m=args.prefill_m,
                       version=args.vllm_version)
    refused = rep.refused()
    status = 1 if refused else 0  # a model with a layer vLLM refuses does not load
    if args.json:
        print(json.dumps(rep.to_json(), indent=1))
        return status
    if args.csv:
        print(rep.to_csv(), end="")
        return status
    print(f"{printable(rep.source)} on {rep.platform} (vLLM {rep.vllm_version} rules), TP {rep.tp}: decode M = {rep.decode_m}, prefill M = {rep.prefill_m} "
          "(per rank, µs per call)")
    for note in rep.notes:
        print(f"note: {printable(note)}")
    head = ["layer", "x", "K", "N", "g", "kernel", "computes", f"M={rep.decode_m}", f"M={rep.prefill_m}",
            "basis", "native W4A8"]
    rows = [[printable(r.layer), str(r.count), str(r.k), str(r.n), str(r.group_size), r.kernel or "refused", r.computes,
             _us(r.decode_us, r.basis), _us(r.prefill_us, r.basis), r.basis,
             f"{_us(r.native_decode_us)} / {_us(r.native_prefill_us)}"] for r in rep.layers]
    widths = [max(len(h), *(len(x[i]) for x in rows)) if rows else len(h) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for x in rows:
        print("  ".join(v.ljust(w) for v, w in zip(x, widths)))
    for r in rep.layers:
        if r.error:  # vLLM's reason list is multi-line: one line per layer here, all of it in --json
            text = " ".join(r.error.split())
            print(f"{printable(r.layer)}: {text[:300]}{'...' if len(text) > 300 else ''}")
    if refused:
        print(f"no total: vLLM refuses {len(refused)} of {len(rep.layers)} layers here "
              f"({', '.join(printable(r.layer) for r in refused)}), so the model does not load")
    t = rep.totals(loaded_only=args.total_loaded)
    if t is not None:
        bound = any(r.basis == "roofline" for r in rep.layers if r.kernel is not None)
        lead = "at least " if bound else ""
        print(f"total per forward (layers x count) over {t['over']}: decode {lead}{t['decode_us']:.1f} µs"
              + ("" if bound else f" [{t['decode_low_us']:.1f}-{t['decode_high_us']:.1f}]")
              + f", prefill {lead}{t['prefill_us']:.1f} µs"
              + ("" if bound else f" [{t['prefill_low_us']:.1f}-{t['prefill_high_us']:.1f}]")
              + (" (roofline bounds in the sum)" if bound else "")
              + f"; native W4A8 {t['native_decode_us']:.1f} / {t['native_prefill_us']:.1f} µs")
    return status


def _compare(args: argparse.Namespace) -> int:
    """`--schemes A,B` and / or `--platform P1,P2`: the model side by side."""
    from workbench.perf.compare import default_schemes, model_comparison
    from workbench.perf.wording import scaled

    schemes = args.schemes if args.schemes is not None else ",".join(default_schemes(args.source))
    cmp = model_comparison(args.source, schemes, args.platform, args.tp, decode_m=args.decode_m,
                           prefill_m=args.prefill_m, version=args.vllm_version)
    status = 0 if all(t["loads"] for t in cmp.totals()) else 1
    if args.json:
        print(json.dumps(cmp.to_json(), indent=1))
        return status
    if args.csv:
        print(cmp.to_csv(), end="")
        return status
    print(f"{printable(cmp.source)}: {', '.join(cmp.schemes)} on {', '.join(cmp.platforms)} "
          f"(vLLM {cmp.vllm_version} rules), TP {cmp.tp}, per rank: decode M = {cmp.decode_m}, "
          f"prefill M = {cmp.prefill_m}")
    head = ["layer", "x", "K", "N", "g", "scheme", "platform", "kernel", "activation", "fails",
            f"M={cmp.decode_m}", f"M={cmp.prefill_m}", "basis"]
    rows = [[printable(r["layer"]), str(r["count"]), str(r["k"]), str(r["n"]), str(r["group_size"]), r["scheme"],
             r["platform"], r["kernel"] or "refused", r["activation"] or "-", r["fails"] or "-",
             _us(r["decode_us"], r["basis"]), _us(r["prefill_us"], r["basis"]), r["basis"]] for r in cmp.rows()]
    widths = [max(len(h), *(len(x[i]) for x in rows)) if rows else len(h) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for x in rows:
        print("  ".join(v.ljust(w) for v, w in zip(x, widths)))
    print("totals per forward (layers x count), only where every layer loads:")
    for t in cmp.totals():
        if not t["loads"]:
            print(f"  {t['scheme']} on {t['platform']}: no total, vLLM refuses "
                  f"{', '.join(printable(x) for x in t['refused_layers'])}")
            continue
        lead = "at least " if t["bound"] else ""
        band = (lambda lo, hi: "" if t["bound"] else f" [{scaled(lo)} to {scaled(hi)}]")
        print(f"  {t['scheme']} on {t['platform']}: decode {lead}{scaled(t['decode_us'])}"
              f"{band(t['decode_low_us'], t['decode_high_us'])}, prefill {lead}{scaled(t['prefill_us'])}"
              f"{band(t['prefill_low_us'], t['prefill_high_us'])}")
    print("which wins:")
    for v in cmp.verdicts:
        print(f"  {printable(v.sentence())}")
    return status

def _run_versions(args: argparse.Namespace) -> int:
    """Both releases' reports, layer by layer: the fields that differ, or "no change"."""
    from workbench.cli.trace import version_pair
    from workbench.perf.report import model_report

    old, new = version_pair(args.versions)
    reps = [model_report(args.source, args.platform, args.tp, decode_m=args.decode_m,
                         prefill_m=args.prefill_m, version=v) for v in (old, new)]
    fields = ("kernel", "computes", "runtime", "error", "fails_at", "decode_us", "prefill_us")
    rows = []
    for a, b in zip(*(r.layers for r in reps)):
        changed = {f: [getattr(a, f), getattr(b, f)] for f in fields
                   if getattr(a, f) != getattr(b, f)}
        rows.append({"layer": a.layer, "changed": changed})
    if args.json:
        print(json.dumps({"source": reps[1].source, "platform": reps[1].platform,
                          "old_version": old, "new_version": new, "layers": rows}, indent=1))
        return 0
    print(f"{printable(reps[1].source)} on {reps[1].platform}, TP {args.tp}: vLLM {old} -> {new}")
    for row in rows:
        print(f"{printable(row['layer'])}:" + ("" if row["changed"] else " no change"))
        for f, (x, y) in row["changed"].items():
            print(f"  {f}: {printable(str(x))}  ->  {printable(str(y))}")
    return 0
