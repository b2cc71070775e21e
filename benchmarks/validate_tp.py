"""Check the performance model's per-shard prediction against the measured TP shards.

    python benchmarks/validate_tp.py [--results benchmarks/results/h200_tp_shards.json]

For every measured (TP, layer, group, M, path) point of the per-shard H200 timings
(`workbench.tp_measured`), `predict("sm90-h200", path, m, n, k, group)` at the shard's N and K;
|predicted / measured - 1| and whether the band holds the measurement, overall, per path, per TP
and split by whether the shard's N x K is one the model was calibrated on (h200_bench.json holds
two Qwen2-72B shards). Also the shard efficiency the model implies, predicted(TP 1) /
(TP x predicted(TP)), against the measured one. Writes benchmarks/results/perf_tp_validation.json.

The model has no collective term and the collective was not measured (one GPU lent): the
all-reduce after down_proj is in neither. The file gives its floor from the NVLink figure of the
hardware data, roofline only, not measured.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.perf.fit import error_stats  # noqa: E402
from workbench.perf.calibrate import H200_RESULTS  # noqa: E402
from workbench.perf.predict import predict  # noqa: E402
from workbench.results import load_results  # noqa: E402
from workbench.tp_measured import TP_SHARDS, all_reduce_floor_us, load_tp_shards, nvlink  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "perf_tp_validation.json"
PLATFORM = "sm90-h200"


def _summary(points: list[dict]) -> dict:
    s = error_stats([p["rel_err"] for p in points])
    if points:
        s["band_coverage"] = round(sum(p["in_band"] for p in points) / len(points), 4)
    return s


def validate(results: Path = TP_SHARDS) -> dict:
    meas = load_tp_shards(results)
    calibrated = {(r.n, r.k) for r in load_results(H200_RESULTS).records}
    points, pred_of = [], {}
    for t in meas.timings:
        p = predict(PLATFORM, t.path, t.m, t.n, t.k, t.group_size)
        pred_of[(t.model, t.layer, t.path, t.group_size, t.m, t.tp)] = p.predicted_us
        points.append({"tp": t.tp, "layer": t.layer, "path": t.path, "group_size": t.group_size, "m": t.m,
                       "n": t.n, "k": t.k, "measured_us": t.shard_us, "predicted_us": round(p.predicted_us, 3),
                       "low_us": round(p.low_us, 3), "high_us": round(p.high_us, 3), "basis": p.basis,
                       "rel_err": round(p.predicted_us / t.shard_us - 1, 4),
                       "in_band": p.low_us <= t.shard_us <= p.high_us,
                       "shape_calibrated": (t.n, t.k) in calibrated,
                       "measured_efficiency": None if t.efficiency is None else round(t.efficiency, 4)})
    eff_errs = []
    for pt, t in zip(points, meas.timings):
        full = pred_of.get((t.model, t.layer, t.path, t.group_size, t.m, 1))
        if t.tp > 1 and full is not None and t.efficiency is not None:
            pt["predicted_efficiency"] = round(full / (t.tp * pred_of[(t.model, t.layer, t.path, t.group_size,
                                                                        t.m, t.tp)]), 4)
            eff_errs.append(pt["predicted_efficiency"] / t.efficiency - 1)
    link = nvlink(PLATFORM)
    full_n = {t.layer: t.n for t in meas.timings if t.tp == 1}
    floors = sorted({(t.tp, t.m, t.n) for t in meas.timings if t.tp > 1 and t.n == full_n[t.layer]})
    by = {}
    for key in ("path", "tp"):
        for v in sorted({p[key] for p in points}):
            by[f"{key}={v}"] = _summary([p for p in points if p[key] == v])
    return {
        "provenance": {
            "script": "benchmarks/validate_tp.py", "platform": PLATFORM,
            "measured": f"benchmarks/results/{Path(results).name}",
            "measured_provenance": {k: meas.provenance.get(k) for k in ("device", "date_utc", "commit",
                                                                          "script", "timing")},
            "calibration": f"benchmarks/results/{H200_RESULTS.name}",
            "commit": _commit(), "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        },
        "what": "per-shard GEMM time of each TP rank (one rank timed alone on one H200) against "
                "predict(sm90-h200, path, m, n, k, group) at the shard's N and K",
        "all": _summary(points),
        "shape_not_calibrated": _summary([p for p in points if not p["shape_calibrated"]]),
        "shape_calibrated": _summary([p for p in points if p["shape_calibrated"]]),
        "by": by,
        "efficiency": {"what": "predicted(TP 1) / (TP x predicted(TP)) against the measured "
                               "unsharded / (TP x shard), TP > 1", **error_stats(eff_errs)},
        "collective": {"modelled": False, "measured": False,
                       "note": "the performance model has no collective term, and the all-reduce after "
                               "down_proj was not measured (no machine with several GPUs was lent)",
                       "all_reduce_floor": {
                           "basis": "roofline only, not measured: 2 (TP - 1) / TP of the M x N bf16 output "
                                    "sent and received per rank (the bound of any all-reduce without "
                                    "in-switch reduction, which is kept off) at half the bidirectional "
                                    "NVLink figure each way",
                           "band": "a floor: NCCL's per-call latency and achieved bandwidth come on top "
                                   "(no upper edge stated)",
                           "nvlink": link,
                           "points": [{"tp": tp, "m": m, "n": n, "floor_us": round(all_reduce_floor_us(
                               m, n, tp, link["nvlink_gbs_bidirectional"]), 3)} for tp, m, n in floors]}},
        "points": points,
    }


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=TP_SHARDS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    doc = validate(args.results)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for key in ("all", "shape_not_calibrated", "shape_calibrated"):
        print(key, doc[key])
    for key, v in doc["by"].items():
        print(key, v)
    print("efficiency", {k: v for k, v in doc["efficiency"].items() if k != "what"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
