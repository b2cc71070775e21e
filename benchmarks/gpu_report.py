"""Headline figures from benchmarks/results/h200_bench.json, without a GPU.

    python benchmarks/gpu_report.py [path/to/h200_bench.json]

Prints the issue's targets against the measured records and the W4A8 / W4A16 crossover
per shape. `load_records` and `crossover_m` are reusable by notebooks and the app.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "results" / "h200_bench.json"
ALIGNED = [(4096, 4096), (8192, 8192), (28672, 8192)]


_UNGROUPED = ("cublas_bf16", "cublas_int8")


def load_records(path: Path = DEFAULT) -> tuple[dict, dict]:
    """(metadata, {(kernel, group_size, N, K, M): record}) for the timed records, read by the
    core's one reader (`workbench.results`, any committed form); kernels by their short names."""
    from workbench.results import LEGACY_H200_PATHS, load_results

    res = load_results(path)
    short = {v: k for k, v in LEGACY_H200_PATHS.items()}
    recs = {}
    for r in res.records:
        kern = short.get(r.path, r.path)
        g = None if kern in _UNGROUPED else r.group_size
        ops = 2 * r.m * r.n * r.k
        recs[(kern, g, r.n, r.k, r.m)] = {
            **r.detail, "time_us": r.median_us, "tops": ops / r.median_us / 1e6,
            "weight_stream_bound_us": r.n * r.k / 2 / 4.8e6}  # 4-bit weights at 4.8 TB/s
    return {"provenance": res.provenance}, recs


def t(recs: dict, kernel: str, g, n: int, k: int, m: int) -> float | None:
    r = recs.get((kernel, g, n, k, m))
    return r["time_us"] if r else None


def crossover_m(recs: dict, n: int, k: int, g: int, fast: str = "w4a8", slow: str = "w4a16"):
    """Smallest M from which `fast` beats `slow` at every larger measured M (None if never)."""
    ms = sorted({key[4] for key in recs if key[2:4] == (n, k) and key[0] == fast and key[1] == g})
    cross = None
    for m in reversed(ms):
        a, b = t(recs, fast, g, n, k, m), t(recs, slow, g, n, k, m)
        if a is None or b is None or a >= b:
            break
        cross = m
    return cross


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def report(path: Path = DEFAULT) -> str:
    meta, recs = load_records(path)
    p = meta["provenance"]
    out = [f"{p['gpu']} driver {p['driver']} torch {p['torch']} triton {p['triton']} "
           f"{p['date_utc']} commit {p['commit'][:10]}", ""]
    big = [1024, 2048, 4096, 8192, 16384]
    out.append("M >= 1024, aligned shapes: ratio = baseline time / Triton time (>1: Triton faster)")
    for kern, g, base, label in [
        ("w4a8_gemm", -1, "cublas_int8", "W4A8 per-channel vs cuBLAS int8 _int_mm (target >= 1.0)"),
        ("w4a8_gemm", -1, "triton_int8", "W4A8 per-channel vs plain Triton int8 (target >= 0.85)"),
        ("w4a8_gemm", 128, "cublas_int8", "W4A8 g128 vs cuBLAS int8 _int_mm"),
        ("w4a8_gemm", 128, "triton_int8", "W4A8 g128 vs plain Triton int8"),
        ("w4a16", -1, "cublas_bf16", "W4A16 per-channel vs cuBLAS bf16 (target >= 0.8)"),
        ("w4a16", 128, "cublas_bf16", "W4A16 g128 vs cuBLAS bf16 (target >= 0.8)"),
    ]:
        ratios = []
        for n, k in ALIGNED:
            for m in big:
                a = t(recs, kern, g, n, k, m)
                bg = -1 if base == "triton_int8" else None
                b = t(recs, base, bg, n, k, m)
                if a and b:
                    ratios.append(b / a)
        if ratios:
            gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
            out.append(f"  {label}: min {min(ratios):.2f} geomean {gm:.2f} max {max(ratios):.2f}")
    best = max(r["tops"] for key, r in recs.items() if key[0] == "w4a8_gemm")
    out.append(f"  best W4A8 throughput: {best:.0f} TOP/s")
    out.append("")
    out.append("M <= 16: time / (1.5 x 4-bit weight-streaming bound) (target <= 1), and speedup "
               "over tinygemm at M = 1 (target >= 1.8)")
    for n, k in [(28672, 8192), (8192, 8192), (4096, 4096), (4096, 14336), (8192, 14784)]:
        g = 128 if k % 128 == 0 else 64
        for kern, gg in (("w4a8_gemm", -1), ("w4a8", -1), ("w4a8_gemm", g), ("w4a16", -1),
                         ("w4a16", g)):
            worst = max((recs[(kern, gg, n, k, m)]["time_us"] /
                         (1.5 * recs[(kern, gg, n, k, m)]["weight_stream_bound_us"]))
                        for m in (1, 2, 4, 8, 16) if (kern, gg, n, k, m) in recs)
            tiny = t(recs, "tinygemm_g128", 128, n, k, 1)
            mine = t(recs, kern, gg, n, k, 1)
            sp = tiny / mine if tiny and mine else None
            out.append(f"  {n}x{k} {kern:9s} g={gg:4d}: worst {worst:.2f} x (1.5 x bound), "
                       f"M=1 {_fmt(mine, '.1f')} us, vs tinygemm {_fmt(sp)}")
    out.append("")
    out.append("Crossover: smallest M from which W4A8 (with its activation quantization) stays "
               "faster than W4A16")
    for n, k in [(4096, 4096), (8192, 8192), (28672, 8192), (4096, 14336), (8192, 14784)]:
        g = 128 if k % 128 == 0 else 64
        out.append(f"  {n}x{k}: per-channel M >= {crossover_m(recs, n, k, -1)}, "
                   f"g{g} M >= {crossover_m(recs, n, k, g)}")
    return "\n".join(out)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT))
