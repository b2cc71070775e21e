"""Kernel runs for the Kernels page: sweep records as plot rows, saved results, per-token error.

The timing and error work is the core's (`workbench.bench`, `workbench.metrics`,
`kernels.registry`); this module only turns records into the rows the plot builders take
and reads saved result files through the core's one reader (`workbench.results`).
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Sequence

from workbench.paths import RESULTS_DIR
from workbench.results import rows_csv


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


# Saved rows keep the H200 bench's short kernel names, which the Kernels page pairs by.
_SHORT = {"w4a8_native": "w4a8", "w4a16_fallback": "w4a16", "w4a8_prequant": "w4a8_gemm",
          "bf16_dense": "cublas_bf16", "int8_mm": "cublas_int8", "quantizer": "quant",
          "triton_int8_mm": "triton_int8", "tinygemm_w4a16": "tinygemm_g128"}


def _saved_rows(res) -> list[dict]:
    """Rows of a `workbench.results.Results`: bench files by path, GPU files by kernel."""
    prov = res.provenance
    if res.form == "bench-legacy" or prov.get("platform") == "host":
        src = str(prov.get("cuda") or prov.get("cpu") or prov.get("device") or _source(res.source))
        recs = [{**r.detail, "path": r.path, "m": r.m, "n": r.n, "k": r.k,
                 "group_size": r.group_size, "median_ms": r.median_us / 1e3,
                 "p20_ms": r.p20_us / 1e3, "p80_ms": r.p80_us / 1e3} for r in res.records]
        return record_rows(recs, source=src, saved=True)
    source = _source(res.source)
    rows = []
    for r in res.records:
        short = _SHORT.get(r.path, r.path)
        g = r.group_size
        name = short + (f" g{g}" if g != -1 else (" channel" if r.path in _SHORT and "w4" in r.path else ""))
        rows.append({"source": source, "path": f"{source}: {name}", "kernel": short,
                     "m": r.m, "n": r.n, "k": r.k, "group_size": g, "latency_us": r.median_us,
                     "p20_us": r.p20_us, "p80_us": r.p80_us,
                     "sqnr_db": None, "rel_error": None, "kernel_rel_error": None,
                     "computes": "", "saved": True})
    return rows


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


# --------------------------------------------------------------------------- per-token error


def per_token_errors(layer, paths: Sequence[str], x) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Each path's relative error per token against the float reference (x @ W_float^T).

    Returns (errors by path, why a path did not run).
    """
    import torch

    from workbench.bench import int4_weight_of
    from workbench.errors import KernelError
    from workbench.execution import execution_path
    from workbench.metrics import per_token_rel_error

    weight = int4_weight_of(layer)
    w_float = layer.source_weight if layer.source_weight is not None else layer.dequantize(torch.float64)
    # Bias is left out on both sides, as the bench does (it adds no quantization error); a
    # path whose op adds it is judged against the reference plus it.
    ref = x.to(torch.float64) @ w_float.to(torch.float64).t()
    out, skipped = {}, {}
    for name in paths:
        path = execution_path(name)
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
        biased = path.adds_bias and weight.bias is not None
        out[name] = per_token_rel_error(y, ref + weight.bias.double() if biased else ref).tolist()
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
    return rows_csv(records)
