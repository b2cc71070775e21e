"""Kernel runs for the Kernels page: sweep records as plot rows, saved results.

The timing, the path protocol and the error work are the core's (`workbench.bench`); this
module only turns results-schema records (`workbench.results.ResultRecord`, µs) into the one
plot-row shape the plot builders take, and reads saved result files through the core's one
reader.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Sequence

from workbench.paths import RESULTS_DIR
from workbench.results import ResultRecord, Results, h200_label, rows_csv


def plot_row(r: ResultRecord, *, source: str, series: str, saved: bool) -> dict:
    """The one plot row: a results-schema record (µs) with the series it is drawn in."""
    d = r.detail
    return {"series": series, "source": source, "saved": saved, "path": r.path, "kernel": r.kernel,
            "m": r.m, "n": r.n, "k": r.k, "group_size": r.group_size, "median_us": r.median_us,
            "p20_us": r.p20_us, "p80_us": r.p80_us, "sqnr_db": d.get("sqnr_db"),
            "rel_error": d.get("rel_error"), "kernel_rel_error": d.get("kernel_rel_error"),
            "computes": d.get("computes", "")}


def record_rows(records: Sequence[dict]) -> list[dict]:
    """This machine's BenchRecord dicts (the sweep's, in the session) as plot rows, timed only."""
    from workbench.bench import BenchRecord, result_record

    return [plot_row(result_record(BenchRecord(**r)), source="this machine", series=r["path"],
                     saved=False) for r in records if r.get("median_ms") is not None]


def speedup_rows(rows: Sequence[dict], fast: str, slow: str, series: str) -> list[dict]:
    """slow latency / fast latency per M, where both series were timed."""
    a = {r["m"]: r for r in rows if r["series"] == fast}
    b = {r["m"]: r for r in rows if r["series"] == slow}
    return [{"m": m, "speedup": b[m]["median_us"] / a[m]["median_us"], "series": series}
            for m in sorted(set(a) & set(b)) if m > 0 and a[m]["median_us"] > 0]


def crossover_of(points: Sequence[dict]) -> int | None:
    """The smallest M from which the speedup stays above 1 (None: never in range)."""
    from workbench.sweeps import stays_ahead_from

    return stays_ahead_from([(p["m"], p["speedup"]) for p in points])


# --------------------------------------------------------------------------- saved results


def saved_files() -> list[Path]:
    if not RESULTS_DIR.is_dir():
        return []
    return sorted(p for p in RESULTS_DIR.iterdir() if p.suffix in (".json", ".csv") and "bench" in p.name)


def _saved_rows(res: Results) -> list[dict]:
    """Plot rows of a `workbench.results.Results`: bench files by path, the H200 bench's by
    its short kernel names (which the Kernels page pairs by) with the group."""
    prov = res.provenance
    if res.form == "bench-legacy" or prov.get("platform") == "host":
        src = str(prov.get("cuda") or prov.get("cpu") or prov.get("device") or _source(res.source))
        return [plot_row(r, source=src, series=f"{src}: {r.path}", saved=True) for r in res.records]
    source = _source(res.source)
    return [plot_row(r, source=source, series=f"{source}: {h200_label(r.path, r.group_size)}", saved=True)
            for r in res.records]


def _source(name: str) -> str:
    stem = Path(name).stem
    return stem.split("_")[0].upper() if "_" in stem else stem


def read_saved(name: str, data: bytes) -> tuple[dict, list[dict]]:
    """(provenance, plot rows) of a saved result file; raises InvalidInputError if unreadable.

    JSON is read by the core's one reader (`workbench.results`); an uploaded CSV export is
    turned back into its records first.
    """
    from workbench.errors import InvalidInputError
    from workbench.results import parse_results

    try:
        if name.endswith(".csv"):
            doc: Any = {"records": list(csv.DictReader(io.StringIO(data.decode("utf-8"))))}
        else:
            doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        raise InvalidInputError(f"saved results {name}: not JSON or CSV ({exc})") from None
    res = parse_results(doc, name)
    prov = {k: v for k, v in res.provenance.items()
            if not (k == "platform" and k not in (doc.get("provenance") or doc))}
    return prov, _saved_rows(res)


def shapes_of(rows: Sequence[dict]) -> list[tuple[int, int]]:
    """The (N, K) shapes present, largest first."""
    return sorted({(r["n"], r["k"]) for r in rows}, key=lambda s: -s[0] * s[1])


def records_csv(records: Sequence[dict]) -> str:
    return rows_csv(records)
