"""The one results schema: what every benchmark writes and every reader reads.

    {"schema": "w4a8-workbench-results/1",
     "provenance": {"platform": ..., "device": ..., "torch": ..., "date_utc": ..., ...},
     "records": [{"path", "kernel", "n", "k", "group_size", "m", "median_us", "p20_us",
                  "p80_us", "repeats", "config", "detail"}]}

`load_results(path)` / `parse_results(doc, name)` read it, and the two forms committed
before it existed, in one place: this workbench's bench records (`path, m, median_ms`) and
the H200 bench's (`kernel, group_size, N, K, M, time_us`, with the config tables beside
them). CSV files are exports, derived from JSON, never read back.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from workbench.errors import InvalidInputError
from workbench.text import csv_cell

__all__ = ["SCHEMA", "ResultRecord", "Results", "load_results", "parse_results", "results_document",
           "write_results", "LEGACY_H200_PATHS", "H200_NAMES", "h200_label"]

SCHEMA = "w4a8-workbench-results/1"

# The H200 bench's kernel names before the schema, as path names (what each one times is in
# benchmarks/results/h200_NOTES.md).
LEGACY_H200_PATHS: dict[str, str] = {
    "w4a8": "w4a8_native", "w4a16": "w4a16_fallback", "cublas_bf16": "bf16_dense",
    "cublas_int8": "int8_mm", "w4a8_gemm": "w4a8_prequant", "quant": "quantizer",
    "triton_int8": "triton_int8_mm", "tinygemm_g128": "tinygemm_w4a16",
}
# A path's name in the H200 bench (the map above, read the other way).
H200_NAMES: dict[str, str] = {path: short for short, path in LEGACY_H200_PATHS.items()}


def h200_label(path: str, group_size: int) -> str:
    """How the H200 bench named a (path, group) series: "w4a8 g128", "w4a16 channel"."""
    short = H200_NAMES.get(path, path)
    if group_size != -1:
        return f"{short} g{group_size}"
    return short + (" channel" if path in H200_NAMES and "w4" in path else "")


_LEGACY_H200_KERNELS = {"w4a8": "triton_w4a8", "w4a16": "triton_w4a16", "cublas_bf16": "cublas_bf16",
                        "cublas_int8": "cublas_int8", "w4a8_gemm": "triton_w4a8",
                        "quant": "triton_quant", "triton_int8": "triton_int8",
                        "tinygemm_g128": "tinygemm"}


@dataclass(frozen=True)
class ResultRecord:
    """One timed (path, shape, M) point. group_size -1 = per-channel (or no groups)."""

    path: str
    kernel: str
    n: int
    k: int
    group_size: int
    m: int
    median_us: float
    p20_us: float
    p80_us: float
    repeats: int = 0
    config: dict | None = None
    detail: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Results:
    provenance: dict
    records: tuple[ResultRecord, ...]
    source: str  # the file (or upload) name it came from
    form: str  # "schema/1", "bench-legacy" or "h200-legacy"
    not_run: tuple[dict, ...] = ()  # paths asked for but unavailable there, with the reason

    @property
    def platform(self) -> str:
        return str(self.provenance.get("platform") or "")


def _num(v: Any, what: str, name: str, kind=float):
    if v is None or v == "":
        raise InvalidInputError(f"results {name}: {what} is missing; accepted: a number")
    try:
        x = kind(v)
    except (TypeError, ValueError):
        raise InvalidInputError(f"results {name}: {what} = {v!r}; accepted: a number") from None
    if kind is float and not math.isfinite(x):
        raise InvalidInputError(f"results {name}: {what} = {v!r}; accepted: a finite number")
    return x


def _group(v: Any) -> int:
    return -1 if v in (None, "", 0) else int(v)


def _schema_record(r: Mapping, name: str, i: int) -> ResultRecord:
    where = f"record {i}"
    for key in ("path", "n", "k", "m", "median_us"):
        if key not in r:
            raise InvalidInputError(f"results {name}: {where} has no {key!r}; accepted fields: "
                                    "path, kernel, n, k, group_size, m, median_us, p20_us, p80_us, "
                                    "repeats, config, detail")
    med = _num(r["median_us"], f"{where} median_us", name)
    return ResultRecord(
        path=str(r["path"]), kernel=str(r.get("kernel") or r["path"]),
        n=_num(r["n"], f"{where} n", name, int), k=_num(r["k"], f"{where} k", name, int),
        group_size=_group(r.get("group_size")), m=_num(r["m"], f"{where} m", name, int),
        median_us=med, p20_us=float(r.get("p20_us") or med), p80_us=float(r.get("p80_us") or med),
        repeats=int(r.get("repeats") or 0), config=r.get("config"), detail=dict(r.get("detail") or {}))


_BENCH_MAIN = {"path", "m", "n", "k", "group_size", "median_ms", "p20_ms", "p80_ms", "repeats"}


def _bench_record(r: Mapping, name: str, i: int) -> ResultRecord | None:
    if r.get("median_ms") in (None, ""):
        return None  # not run here (unavailable path): nothing timed
    med = _num(r["median_ms"], f"record {i} median_ms", name) * 1e3
    detail = {k: v for k, v in r.items() if k not in _BENCH_MAIN}
    kernel = str(r.get("detail") or r["path"]) if r.get("detail") else str(r["path"])
    return ResultRecord(
        path=str(r["path"]), kernel=kernel, n=int(r["n"]), k=int(r["k"]),
        group_size=_group(r.get("group_size")), m=int(r["m"]), median_us=med,
        p20_us=float(r.get("p20_ms") or r["median_ms"]) * 1e3,
        p80_us=float(r.get("p80_ms") or r["median_ms"]) * 1e3,
        repeats=int(r.get("repeats") or 0), config=None, detail=detail)


def _h200_record(r: Mapping, name: str, i: int) -> ResultRecord | None:
    if r.get("error") or r.get("time_us") in (None, ""):
        return None
    kern = str(r["kernel"])
    g = _group(r.get("group_size"))
    m = int(r["M"])
    t = _num(r["time_us"], f"record {i} time_us", name)
    detail = {k: v for k, v in r.items()
              if k not in ("kernel", "group_size", "N", "K", "M", "time_us", "p20_us", "p80_us")}
    return ResultRecord(
        path=LEGACY_H200_PATHS.get(kern, kern), kernel=_LEGACY_H200_KERNELS.get(kern, kern),
        n=int(r["N"]), k=int(r["K"]), group_size=g, m=m, median_us=t,
        p20_us=float(r.get("p20_us") or t), p80_us=float(r.get("p80_us") or t),
        # The table entry of the record's bucket is not what launched (grouped W4A8 takes
        # block_k = g, block_k is fitted to K): the legacy form carries no config.
        repeats=int(r.get("samples") or 0), config=None, detail=detail)


def parse_results(doc: Any, name: str = "results") -> Results:
    """A parsed JSON document in any committed form -> Results; InvalidInputError if not one."""
    recs = doc.get("records") if isinstance(doc, dict) else None
    if isinstance(recs, list) and not recs and doc.get("schema") == SCHEMA and doc.get("not_run"):
        return Results(dict(doc.get("provenance") or {}), (), name, "schema/1", tuple(doc["not_run"]))
    if not isinstance(recs, list) or not recs:
        raise InvalidInputError(f"saved results {name}: no 'records' list; accepted: a file written "
                                "by `python -m workbench bench` or benchmarks/gpu_bench.py")
    first = recs[0] if isinstance(recs[0], dict) else {}
    if doc.get("schema") == SCHEMA:
        # A record with an "error" (a call that failed or was refused) holds no time.
        failed = tuple(dict(r) for r in recs if isinstance(r, dict) and r.get("error"))
        out = [_schema_record(r, name, i) for i, r in enumerate(recs)
               if not (isinstance(r, dict) and r.get("error"))]
        return Results(dict(doc.get("provenance") or {}), tuple(out), name, "schema/1",
                       tuple(doc.get("not_run") or ()) + failed)
    if "schema" in doc:
        raise InvalidInputError(f"saved results {name}: schema {doc['schema']!r}; accepted: {SCHEMA!r}")
    if "path" in first and "median_ms" in first:
        out = [_bench_record(r, name, i) for i, r in enumerate(recs)]
        prov = dict(doc.get("provenance") or {})
        prov.setdefault("platform", "host")
        skipped = tuple(dict(r) for r in recs if r.get("median_ms") in (None, ""))
        return Results(prov, tuple(r for r in out if r), name, "bench-legacy", skipped)
    if "kernel" in first and "time_us" in first:
        prov = doc.get("provenance") or {k: v for k, v in doc.items()
                                         if k not in ("records", "tables", "ceilings")}
        prov = dict(prov)
        if "H200" in str(prov.get("gpu", "")):
            prov.setdefault("platform", "sm90-h200")
        out = [_h200_record(r, name, i) for i, r in enumerate(recs)]
        return Results(prov, tuple(r for r in out if r), name, "h200-legacy")
    raise InvalidInputError(f"saved results {name}: records have neither (path, median_us) with "
                            f"schema {SCHEMA!r}, (path, median_ms) nor (kernel, time_us) fields")


def load_results(path: str | Path) -> Results:
    """Read one results file (JSON only: CSV files are derived exports)."""
    path = Path(path)
    if path.suffix != ".json":
        raise InvalidInputError(f"results {path}: a {path.suffix or 'suffix-less'} file; accepted: "
                                ".json (CSV files are exports, never read back)")
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise InvalidInputError(f"results {path}: no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"results {path}: not JSON ({exc})") from None
    return parse_results(doc, path.name)


def results_document(provenance: Mapping, records: Iterable[ResultRecord | Mapping]) -> dict:
    recs = [r.to_dict() if isinstance(r, ResultRecord) else dict(r) for r in records]
    return {"schema": SCHEMA, "provenance": dict(provenance), "records": recs}


def write_results(path: str | Path, provenance: Mapping, records: Iterable[ResultRecord | Mapping]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results_document(provenance, records), indent=1, default=_finite) + "\n")
    return path


def _finite(obj):
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return str(obj)


def rows_csv(rows: Iterable[Mapping]) -> str:
    """CSV text of flat records (the columns of the first), for download buttons and `--csv`;
    derived output, never read back."""
    rows = list(rows)
    if not rows:
        return ""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[csv_cell(c) for c in rows[0]], lineterminator="\n")
    w.writeheader()
    # Names come from checkpoints: no cell may start a formula or break a row.
    w.writerows({csv_cell(c): csv_cell(v) for c, v in r.items()} for r in rows)
    return buf.getvalue()
