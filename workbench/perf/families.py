"""Kernels this project cannot run (Marlin, Machete, Humming, CUTLASS W4A8, QQQ, ...):
calibrated on published figures (`published.json`, each with its link).

A family streams its packed weight at a fraction eta of the part's bandwidth and, when
compute-bound, runs at the rate of the dense GEMM of its activation type (Machete matches
FP16 when compute-bound; vLLM maintainers: W4A8 cannot beat W8A8 in throughput):

    t = max(t0 + bytes / (eta * BW),  t_dense(activation type))

eta per family is the median over that family's published points; t0 and t_dense come
from the calibrated dense models of the part (measured, or scaled from a measured part).
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["FAMILIES", "Family", "family_of", "published_points", "family_eta", "PUBLISHED_FILE"]

PUBLISHED_FILE = Path(__file__).with_name("published.json")


@dataclass(frozen=True)
class Family:
    name: str
    weight_bits: int  # bits per weight element streamed
    act: str  # the dense path its compute-bound rate follows: "bf16_dense" | "int8_mm" | "fp8_mm"
    borrows: str | None = None  # family whose eta it takes when it has no published point


FAMILIES = {
    "w4a16": Family("w4a16", 4, "bf16_dense"),
    "w4a8_int8": Family("w4a8_int8", 4, "int8_mm"),
    "w4a8_fp8": Family("w4a8_fp8", 4, "fp8_mm"),
    "w4a16_conch": Family("w4a16_conch", 4, "bf16_dense", borrows="w4a16"),
    "dense_fp16": Family("dense_fp16", 16, "bf16_dense"),
    "dense_fp8": Family("dense_fp8", 8, "fp8_mm"),
}

# vLLM kernel class (Runtime.method) and activation -> family.
_METHODS = {
    "MarlinLinearKernel": "w4a16", "MacheteLinearKernel": "w4a16", "HummingLinearKernel": "w4a16",
    "HummingLinearMethod": "w4a16", "ExllamaLinearKernel": "w4a16", "TritonW4A16LinearKernel": "w4a16",
    "AllSparkLinearKernel": "w4a16", "BitBLASLinearKernel": "w4a16", "ConchLinearKernel": "w4a16_conch",
    "CutlassW4A8LinearKernel": "w4a8_fp8",
}


def family_of(method: str, activation: str) -> str | None:
    """The GPU family of a selected kernel, by what runs (activation precision first)."""
    fam = _METHODS.get(method)
    if fam is None and "W4A16" in method:
        fam = "w4a16"
    if fam is None:
        return None
    if activation == "int8":
        return "w4a8_int8"
    if activation == "fp8":
        return "w4a8_fp8"
    return fam


@lru_cache(maxsize=1)
def published_points() -> tuple[dict, ...]:
    return tuple(json.loads(PUBLISHED_FILE.read_text())["points"])


def point_us(p: dict, dense_us) -> float:
    """A published point as microseconds; dense_us(part, n, k, m) for speedup points."""
    flops = 2 * p["m"] * p["n"] * p["k"]
    if p["unit"] == "us":
        return float(p["value"])
    if p["unit"] == "tflops":
        return flops / (p["value"] * 1e12) * 1e6
    if p["unit"] == "speedup_vs_fp16":
        return dense_us(p["part"], p["n"], p["k"], p["m"]) / p["value"]
    raise ValueError(f"published point: unit {p['unit']!r}")


def family_eta(family: str, eta_of_point, exclude: dict | None = None) -> float | None:
    """Median eta over a family's published points (leaving `exclude` out: validation)."""
    fam = FAMILIES[family]
    pts = [p for p in published_points() if p["family"] == family and p is not exclude]
    etas = [e for e in (eta_of_point(p) for p in pts) if e is not None and e > 0]
    if not etas and fam.borrows:
        return family_eta(fam.borrows, eta_of_point, exclude)
    return statistics.median(etas) if etas else None
