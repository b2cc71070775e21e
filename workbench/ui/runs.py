"""Kernel runs for the Kernels page: sweep records as plot rows, saved results, per-token error.

The timing and error work is the core's (`workbench.bench`, `workbench.metrics`,
`kernels.registry`); this module only turns records into the rows the plot builders take
and reads saved result files (this workbench's `write_json`, or the H200 bench's
`h200_bench.json` / `.csv`, whose records are `kernel, group_size, N, K, M, time_us`).
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Sequence

from workbench.ui.state import REPO_ROOT

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"


def record_rows(records: Sequence[dict], *, source: str = "this machine", saved: bool = False) -> list[dict]:
    """BenchRecord dicts as plot rows (timed records only)."""
    rows = []
    for r in records:
        if r.get("median_ms") is None:
            continue
        rows.append({"source": source, "path": r["path"] if not saved else f"{source}: {r['path']}",
                     "kernel": r["path"], "m": r["m"], "n": r["n"], "k": r["k"],
                     "group_size": r["group_size"], "latency_us": r["median_ms"] * 1e3,
                     "p20_us": (r.get("p20_ms") or r["median_ms"]) * 1e3,
                     "p80_us": (r.get("p80_ms") or r["median_ms"]) * 1e3,
                     "sqnr_db": r.get("sqnr_db"), "rel_error": r.get("rel_error"),
                     "kernel_rel_error": r.get("kernel_rel_error"), "computes": r.get("computes", ""),
                     "saved": saved})
    return rows


def speedup_rows(rows: Sequence[dict], fast: str, slow: str, series: str) -> list[dict]:
    """slow latency / fast latency per M, where both paths were timed."""
    a = {r["m"]: r for r in rows if r["path"] == fast}
    b = {r["m"]: r for r in rows if r["path"] == slow}
    return [{"m": m, "speedup": b[m]["latency_us"] / a[m]["latency_us"], "series": series}
            for m in sorted(set(a) & set(b)) if m > 0 and a[m]["latency_us"] > 0]


def crossover_of(points: Sequence[dict]) -> int | None:
    """The smallest M from which the speedup stays above 1 (None: never in range)."""
    from workbench.sweeps import stays_ahead_from

    return stays_ahead_from([(p["m"], p["speedup"]) for p in points])


# --------------------------------------------------------------------------- saved results


def saved_files() -> list[Path]:
    if not RESULTS_DIR.is_dir():
        return []
    return sorted(p for p in RESULTS_DIR.iterdir() if p.suffix in (".json", ".csv") and "bench" in p.name)


def _h200_rows(recs: Sequence[dict], source: str) -> list[dict]:
    rows = []
    for r in recs:
        if r.get("error") or r.get("time_us") in (None, ""):
            continue
        g = r.get("group_size")
        g = None if g in (None, "") else int(g)
        name = r["kernel"] + (f" g{g}" if g not in (None, -1) else (" channel" if g == -1 else ""))
        t = float(r["time_us"])
        rows.append({"source": source, "path": f"{source}: {name}", "kernel": r["kernel"],
                     "m": int(r["M"]), "n": int(r["N"]), "k": int(r["K"]),
                     "group_size": g, "latency_us": t,
                     "p20_us": float(r.get("p20_us") or t), "p80_us": float(r.get("p80_us") or t),
                     "sqnr_db": None, "rel_error": None, "kernel_rel_error": None,
                     "computes": "", "saved": True})
    return rows


def read_saved(name: str, data: bytes) -> tuple[dict, list[dict]]:
    """(provenance, plot rows) of a saved result file; raises InvalidInputError if unreadable."""
    from workbench.errors import InvalidInputError

    source = Path(name).stem.split("_")[0].upper() if "_" in Path(name).stem else Path(name).stem
    try:
        if name.endswith(".csv"):
            recs = list(csv.DictReader(io.StringIO(data.decode("utf-8"))))
            doc: dict[str, Any] = {"records": recs}
        else:
            doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        raise InvalidInputError(f"saved results {name}: not JSON or CSV ({exc})") from None
    recs = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(recs, list) or not recs:
        raise InvalidInputError(f"saved results {name}: no 'records' list; accepted: a file written "
                                "by `python -m workbench bench` or benchmarks/gpu_bench.py")
    first = recs[0]
    if "path" in first and "median_ms" in first:  # this workbench's BenchRecord
        prov = doc.get("provenance", {})
        src = prov.get("cuda") or prov.get("cpu") or source
        norm = [{**r, "m": int(r["m"]), "n": int(r["n"]), "k": int(r["k"]),
                 "group_size": int(r["group_size"]),
                 "median_ms": None if r["median_ms"] in (None, "") else float(r["median_ms"])}
                for r in recs]
        return prov, record_rows(norm, source=str(src), saved=True)
    if "kernel" in first and "time_us" in first:
        prov = doc.get("provenance") or {k: v for k, v in doc.items() if k != "records"}
        return prov, _h200_rows(recs, source)
    raise InvalidInputError(f"saved results {name}: records have neither (path, median_ms) nor "
                            "(kernel, time_us) fields")


def shapes_of(rows: Sequence[dict]) -> list[tuple[int, int]]:
    """The (N, K) shapes present, largest first."""
    return sorted({(r["n"], r["k"]) for r in rows}, key=lambda s: -s[0] * s[1])


# --------------------------------------------------------------------------- per-token error


def per_token_errors(layer, paths: Sequence[str], x) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Each path's relative error per token against the float reference (x @ W_float^T).

    Returns (errors by path, why a path did not run).
    """
    import torch

    from w4a8_kernels.registry import get_path
    from workbench.bench import int4_weight_of
    from workbench.errors import KernelError
    from workbench.metrics import per_token_rel_error

    weight = int4_weight_of(layer)
    w_float = layer.source_weight if layer.source_weight is not None else layer.dequantize(torch.float64)
    # Bias is left out on both sides, as the bench does: it adds no quantization error.
    ref = x.to(torch.float64) @ w_float.to(torch.float64).t()
    out, skipped = {}, {}
    for name in paths:
        path = get_path(name)
        ok, why = path.availability(weight)
        if not ok:
            skipped[name] = why
            continue
        try:
            state = path.prepare(weight)
            xin = x.to(path.activation_dtype) if path.activation_dtype else x
            inputs = path.make_input(xin, state)
            y = path.finish(path.run(inputs, state), inputs, state)
        except KernelError as exc:
            skipped[name] = str(exc)
            continue
        out[name] = per_token_rel_error(y, ref).tolist()
    return out, skipped


def activations(layer, m: int, kind: str, seed: int = 0):
    """[m, K] activations: seeded normal bf16 (as the bench uses), or MiniLM's real inputs."""
    import torch

    if kind == "real":
        from workbench.trained import capture_activations

        x = capture_activations(layer.name)
        return x[:m].to(torch.bfloat16)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + m)
    return torch.randn(m, layer.in_features, generator=gen).to(torch.bfloat16)


def records_csv(records: Sequence[dict]) -> str:
    if not records:
        return ""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(records[0]))
    w.writeheader()
    w.writerows(records)
    return buf.getvalue()
