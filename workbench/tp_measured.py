"""Measured tensor-parallel shards: each rank's GEMM timed alone, beside the shard verdicts.

`benchmarks/tp_bench.py` and `benchmarks/gpu_bench.py` time every TP rank's gate_up_proj and
down_proj of a model's MLP, sharded as vLLM shards them (gate_up column-parallel: N / TP;
down row-parallel: K / TP), one rank at a time on one GPU. The collective (down_proj's
all-reduce) is not in these records: it needs several GPUs. This module reads the records
through the one results reader and derives the shard efficiency,
unsharded time / (TP x shard time): 1.0 when splitting the work costs nothing per rank.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import InvalidInputError
from workbench.paths import RESULTS_DIR
from workbench.results import Results, load_results

__all__ = ["TP_SHARDS", "TP_VALIDATION", "ShardTiming", "TpMeasurements", "load_tp_shards",
           "tp_measurements", "shards_at", "beside_verdicts", "load_validation", "with_predictions",
           "nvlink", "all_reduce_floor_us", "TP_PATHS"]

TP_SHARDS = RESULTS_DIR / "h200_tp_shards.json"
# The performance model's prediction of each measured shard (benchmarks/validate_tp.py).
TP_VALIDATION = RESULTS_DIR / "perf_tp_validation.json"
TP_PATHS = ("w4a8_native", "w4a16_fallback")


@dataclass(frozen=True)
class ShardTiming:
    """One rank's GEMM at one TP size and M: the time measured, and against TP 1."""

    model: str
    layer: str
    tp: int
    k: int
    n: int
    group_size: int  # -1 = per-channel
    m: int
    path: str
    shard_us: float
    p20_us: float
    p80_us: float
    unsharded_us: float | None  # the same layer, path, group and M at TP 1; None if not measured

    @property
    def efficiency(self) -> float | None:
        """unsharded / (TP x shard): the fraction of ideal TP scaling the shard's kernel keeps."""
        return None if self.unsharded_us is None else self.unsharded_us / (self.tp * self.shard_us)


@dataclass(frozen=True)
class TpMeasurements:
    timings: tuple[ShardTiming, ...]
    not_run: tuple[dict, ...]  # shards the bench refused, with its reason (e.g. K / TP not whole groups)
    provenance: dict
    source: str

    @property
    def tp_sizes(self) -> tuple[int, ...]:
        return tuple(sorted({t.tp for t in self.timings}))

    def not_run_at(self, tp: int) -> list[dict]:
        """The refused shards whose K x N is a layer's TP-1 shape split `tp` ways (along N or K)."""
        full = {(t.k, t.n) for t in self.timings if t.tp == 1}
        out = []
        for f in self.not_run:
            k, n = f.get("k"), f.get("n")
            if isinstance(k, int) and isinstance(n, int) and any(
                    (n == n1 and k * tp == k1) or (k == k1 and n * tp == n1) for k1, n1 in full):
                out.append(f)
        return out


def _field(detail: dict, key: str, i: int, source: str):
    if key not in detail:
        raise InvalidInputError(f"TP results {source}: record {i} has no detail.{key!r}; accepted: "
                                "records written by benchmarks/tp_bench.py or gpu_bench.py --phases tp "
                                "(detail: model, layer, tp)")
    return detail[key]


def tp_measurements(res: Results) -> TpMeasurements:
    """Parsed results -> the per-shard timings with their TP-1 counterparts."""
    rows = []
    for i, r in enumerate(res.records):
        if r.path not in TP_PATHS:
            continue
        tp = _field(r.detail, "tp", i, res.source)
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise InvalidInputError(f"TP results {res.source}: record {i} detail.tp = {tp!r}; "
                                    "accepted: a positive integer")
        rows.append((str(_field(r.detail, "model", i, res.source)),
                     str(_field(r.detail, "layer", i, res.source)), tp, r))
    if not rows:
        raise InvalidInputError(f"TP results {res.source}: no {' or '.join(TP_PATHS)} records")
    full = {(mo, la, r.path, r.group_size, r.m): r.median_us for mo, la, tp, r in rows if tp == 1}
    timings = tuple(ShardTiming(mo, la, tp, r.k, r.n, r.group_size, r.m, r.path, r.median_us,
                                r.p20_us, r.p80_us, full.get((mo, la, r.path, r.group_size, r.m)))
                    for mo, la, tp, r in rows)
    failed = tuple(res.provenance.get("failed") or ()) + tuple(res.not_run)
    return TpMeasurements(timings, failed, res.provenance, res.source)


def load_tp_shards(path: str | Path = TP_SHARDS) -> TpMeasurements:
    return tp_measurements(load_results(path))


def shards_at(meas: TpMeasurements, tp: int) -> list[dict]:
    """One row per (layer, group, M) at TP `tp`: both paths' shard time and efficiency."""
    by: dict[tuple, dict] = {}
    for t in meas.timings:
        if t.tp != tp:
            continue
        row = by.setdefault((t.model, t.layer, t.group_size, t.m), {
            "model": t.model, "layer": t.layer, "tp": t.tp, "K": t.k, "N": t.n,
            "group_size": t.group_size, "m": t.m})
        row[f"{t.path}_us"] = t.shard_us
        row[f"{t.path}_efficiency"] = t.efficiency
    return [by[key] for key in sorted(by)]


def beside_verdicts(shard_rows: list[dict], meas: TpMeasurements, tp: int, group_size: int) -> list[dict]:
    """The measured rows at TP `tp`, each with the verdict of the table's shard of the same
    K x N and group size (`workbench.alignment` rows, traced with `group_size`): what vLLM
    picks there, or the error it raises. A shape or group the table does not hold gets None."""
    by_shape = {(r["K"], r["N"]): r for r in shard_rows if r.get("K") and r.get("N")}
    out = []
    for row in shards_at(meas, tp):
        match = by_shape.get((row["K"], row["N"])) if row["group_size"] == group_size else None
        picks = None
        if match is not None:
            picks = match["selected"] or (match["error_type"] if match["error"] else None)
        out.append({**row, "table_layer": match["layer"] if match else None, "vllm_picks": picks})
    return out


def load_validation(path: str | Path = TP_VALIDATION) -> dict:
    """The committed check of the model against these shards: its summaries and, per
    (tp, layer, path, group, m), the predicted time and band."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
        points = {(p["tp"], p["layer"], p["path"], p["group_size"], p["m"]):
                  (float(p["predicted_us"]), float(p["low_us"]), float(p["high_us"])) for p in doc["points"]}
        return {"all": dict(doc["all"]), "shape_not_calibrated": dict(doc["shape_not_calibrated"]),
                "collective": dict(doc["collective"]), "points": points}
    except FileNotFoundError:
        raise InvalidInputError(f"TP validation {path}: no such file; accepted: the file "
                                "benchmarks/validate_tp.py writes") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInputError(f"TP validation {path}: not the file benchmarks/validate_tp.py writes "
                                f"({type(exc).__name__}: {exc})") from None


def with_predictions(rows: list[dict], validation: dict) -> list[dict]:
    """`shards_at` rows with the model's predicted time of each path (None where not predicted)."""
    pts = validation["points"]
    return [{**r, **{f"{path}_predicted_us": (pts.get((r["tp"], r["layer"], path, r["group_size"], r["m"]))
                                              or (None,))[0] for path in TP_PATHS}} for r in rows]


# --------------------------------------------------------------------------- the collective


def nvlink(preset: str = "sm90-h200") -> dict:
    """The part's NVLink figure and its source, from the hardware data (`interconnect`)."""
    from workbench.perf.hardware import HARDWARE_FILE

    part = json.loads(HARDWARE_FILE.read_text())["parts"].get(preset) or {}
    link = part.get("interconnect")
    if not link:
        have = [k for k, v in json.loads(HARDWARE_FILE.read_text())["parts"].items() if v.get("interconnect")]
        raise InvalidInputError(f"platform {preset!r}: no interconnect figure in the hardware data; "
                                f"accepted: {', '.join(have)}")
    return dict(link)


def all_reduce_floor_us(m: int, n: int, tp: int, bidirectional_gbs: float) -> float:
    """Roofline only, not measured: the least time an all-reduce of an M x N bf16 output over
    `tp` ranks can take on links of that bandwidth. Without in-switch reduction (NVLink SHARP,
    kept off here) every algorithm must send, and receive, 2 (TP - 1) / TP of the buffer per
    rank (ring's bound); each direction gets half the bidirectional figure. NCCL's per-call
    latency and the bandwidth it achieves (neither measured) come on top: a floor, no upper edge."""
    if tp <= 1:
        return 0.0
    return 2 * (tp - 1) / tp * (m * n * 2) / (bidirectional_gbs / 2 * 1e3)
