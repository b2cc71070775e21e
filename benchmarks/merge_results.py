"""Add one lent-GPU run's records to a part's committed results file.

    python benchmarks/merge_results.py benchmarks/results/h200_bench.json RUN/h200_bench.json [--paths P,Q | --not-paths P,Q]

Both files must name the same part (provenance `platform`): a part's file is fitted as that
part, so another part's records are refused. A record whose (path, group, N, K, M) the file
already holds is left out and counted: the committed figure stands. The run's provenance is
appended to the file's `calls`, with the shapes and the number of records it added; the CSV
beside the file is written again from the merged records.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench import write_csv  # noqa: E402

CALL_FIELDS = ("date_utc", "commit", "ceilings", "loadavg_1m", "nvidia_smi", "driver", "torch", "triton",
               "humming", "engines")


def key(r: dict) -> tuple:
    return r["path"], r["group_size"], r["n"], r["k"], r["m"]


def merge(base: dict, run: dict, keep=lambda path: True) -> tuple[dict, int, int]:
    """(merged document, records added, records left out as already held); only the run's
    records whose path `keep` accepts are taken."""
    bp, rp = base["provenance"], run["provenance"]
    if bp.get("platform") != rp.get("platform"):
        raise SystemExit(f"merge_results: the run is {rp.get('platform')!r}, the file {bp.get('platform')!r}: "
                         "a part's file takes only its own part's records")
    held = {key(r) for r in base["records"]}
    taken = [r for r in run["records"] if keep(r["path"])]
    new = [r for r in taken if key(r) not in held]
    call = {f: rp[f] for f in CALL_FIELDS if f in rp}
    call["shapes"] = sorted({f"{r['n']}x{r['k']}" for r in new})
    call["records_added"] = len(new)
    call["failed"] = len(rp.get("failed", []))
    prov = {**bp, "calls": [*bp.get("calls", []), call]}
    return {**base, "provenance": prov, "records": base["records"] + new}, len(new), len(taken) - len(new)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("run", type=Path)
    ap.add_argument("--paths", default="", help="take only these paths, e.g. vllm_machete")
    ap.add_argument("--not-paths", default="", help="take every path but these")
    args = ap.parse_args()
    only, skip = ({p for p in v.split(",") if p} for v in (args.paths, args.not_paths))
    doc, added, dup = merge(json.loads(args.base.read_text()), json.loads(args.run.read_text()),
                            lambda path: (not only or path in only) and path not in skip)
    args.base.write_text(json.dumps(doc, indent=1))
    if args.base.with_suffix(".csv").exists():
        write_csv(args.base.with_suffix(".csv"), doc["records"])
    print(f"{args.base}: {added} records added, {dup} already held")


if __name__ == "__main__":
    main()
