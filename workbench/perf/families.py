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

__all__ = ["FAMILIES", "Family", "Eta", "family_of", "arch_of", "published_points", "measured_points",
           "family_eta", "PUBLISHED_FILE", "MEASURED_PATHS", "RateEstimate", "dense_rate", "DENSE_DTYPES"]

PUBLISHED_FILE = Path(__file__).with_name("published.json")


@dataclass(frozen=True)
class Family:
    name: str
    weight_bits: int  # bits per weight element streamed
    act: str  # the dense path its compute-bound rate follows: "bf16_dense" | "int8_mm" | "fp8_mm"
    borrows: str | None = None  # family whose eta it takes when it has no point of its own
    # Its streaming efficiency is below what its arithmetic allows: a kernel known slow where
    # it runs (ExLlama; Triton W4A16 before Hopper), as a factor on eta (1: none).
    slow: float = 1.0


FAMILIES = {
    "w4a16": Family("w4a16", 4, "bf16_dense"),  # Marlin
    "humming": Family("humming", 4, "bf16_dense", borrows="w4a16"),
    "machete": Family("machete", 4, "bf16_dense", borrows="humming"),
    "w4a16_exllama": Family("w4a16_exllama", 4, "bf16_dense", borrows="w4a16", slow=0.54),
    "w4a16_triton": Family("w4a16_triton", 4, "bf16_dense", borrows="w4a16"),
    "w4a8_int8": Family("w4a8_int8", 4, "int8_mm"),
    "humming_int8": Family("humming_int8", 4, "int8_mm", borrows="w4a8_int8"),
    "w4a8_fp8": Family("w4a8_fp8", 4, "fp8_mm"),
    "w4a16_conch": Family("w4a16_conch", 4, "bf16_dense", borrows="w4a16"),
    "dense_fp16": Family("dense_fp16", 16, "bf16_dense"),
    "dense_fp8": Family("dense_fp8", 8, "fp8_mm"),
    "dense_int8": Family("dense_int8", 8, "int8_mm"),
}

# vLLM kernel class (Runtime.method) and activation -> family.
_METHODS = {
    "MarlinLinearKernel": "w4a16", "MacheteLinearKernel": "machete", "HummingLinearKernel": "humming",
    "HummingLinearMethod": "humming", "ExllamaLinearKernel": "w4a16_exllama",
    "TritonW4A16LinearKernel": "w4a16_triton", "AllSparkLinearKernel": "w4a16",
    "BitBLASLinearKernel": "w4a16", "ConchLinearKernel": "w4a16_conch",
    "CutlassW4A8LinearKernel": "w4a8_fp8",
}
# Execution paths of vLLM's kernels in a results file -> family (measured, not published).
MEASURED_PATHS = {"vllm_humming": "humming", "vllm_machete": "machete"}

# Architecture class of a preset: efficiencies are kept per class (a Marlin build streams at
# about 0.8 of bandwidth on Ampere, about 0.5 on Hopper).
ARCHES = ("ampere", "ada", "hopper", "blackwell", "cdna", "rdna", "other")


def arch_of(part: str) -> str:
    """The architecture class of a preset name (sm80-a100 -> ampere, ...)."""
    if part.startswith("rocm-mi"):
        return "cdna"
    if part.startswith("rocm-rdna"):
        return "rdna"
    if part.startswith("sm"):
        cap = part[2:].split("-")[0]
        if cap.isdigit():
            c = int(cap)
            return ("ampere" if c in (80, 86, 87) else "ada" if c == 89 else "hopper" if c == 90
                    else "blackwell" if 100 <= c < 130 else "other")
    return "other"


def family_of(rt) -> str | None:
    """The GPU family of what a selected kernel runs (a `workbench.dispatch.Runtime`): its
    class (`method`, a key of `_METHODS`), then its activation precision."""
    fam = _METHODS.get(rt.method)
    if fam is None:
        return None
    if rt.activation == "int8":
        return "humming_int8" if fam == "humming" else "w4a8_int8"
    if rt.activation == "fp8":
        return "w4a8_fp8"
    return fam


@lru_cache(maxsize=1)
def published_points() -> tuple[dict, ...]:
    return tuple(json.loads(PUBLISHED_FILE.read_text())["points"])


def point_us(p: dict, dense_us) -> float:
    """A published point as microseconds; dense_us(part, n, k, m) for speedup points."""
    flops = 2 * p["m"] * p["n"] * p["k"]
    if p["unit"] == "us":  # the source's timed statement covers `copies` GEMMs
        return float(p["value"]) / p.get("copies", 1)
    if p["unit"] == "tflops":
        return flops / (p["value"] * 1e12) * 1e6
    if p["unit"] == "speedup_vs_fp16":
        return dense_us(p["part"], p["n"], p["k"], p["m"]) / p["value"]
    raise ValueError(f"published point: unit {p['unit']!r}")


def measured_points(path=None) -> tuple[dict, ...]:
    """Records of vLLM's kernels run here (`MEASURED_PATHS` in a GPU results file, the
    committed H200 one by default), as points of their family: they replace the published
    points of that family on that part once a run has written them."""
    if path is None:
        from workbench.perf.calibrate import H200_RESULTS as path
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return ()
    return _measured(str(p), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=8)
def _measured(path: str, mtime_ns: int, size: int) -> tuple[dict, ...]:
    from workbench.errors import InvalidInputError
    from workbench.results import load_results

    try:
        res = load_results(path)
    except InvalidInputError:
        return ()
    part = res.platform or "sm90-h200"
    out = []
    for r in res.records:
        fam = MEASURED_PATHS.get(r.path)
        if fam is None or r.median_us <= 0:
            continue
        act = (r.detail or {}).get("activation") or (r.config or {}).get("activation")
        if fam == "humming" and act == "int8":
            fam = "humming_int8"
        out.append({"source": path, "part": part, "kernel": r.kernel, "family": fam, "n": r.n,
                    "k": r.k, "m": r.m, "group_size": r.group_size, "value": r.median_us, "unit": "us",
                    "copies": 1, "measured": True})
    return tuple(out)


@dataclass(frozen=True)
class Eta:
    """A family's streaming efficiency on a part: the median over the points of its
    architecture class where there are any, else over every class (`cross_arch`); spread:
    the log-range of the per-class medians, which widens the band when crossing classes."""

    value: float
    arch: str  # the class it was taken from, or "all"
    n_points: int
    spread: float
    measured: bool  # from this project's own records of the kernel


def family_eta(family: str, eta_of_point, exclude: dict | None = None, part: str | None = None,
               measured_from=None, use_measured: bool = True) -> Eta | None:
    """The family's eta for a part (leaving `exclude` out: validation). Measured records of
    the family on that part win over published points; a family without points borrows."""
    import math

    fam = FAMILIES[family]
    if part is not None and use_measured:
        mine = [p for p in measured_points(measured_from) if p["family"] == family
                and p["part"] == part and p is not exclude]
        etas = [e for e in (eta_of_point(p) for p in mine) if e is not None and e > 0]
        if etas:
            return Eta(statistics.median(etas) * fam.slow, arch_of(part), len(etas), 0.0, True)
    pts = [p for p in published_points() if p["family"] == family and p is not exclude]
    by_arch: dict = {}
    for p in pts:
        e = eta_of_point(p)
        if e is not None and e > 0:
            by_arch.setdefault(arch_of(p["part"]), []).append(e)
    if not by_arch:
        if fam.borrows:
            # Another kernel's published points, never its measured records.
            got = family_eta(fam.borrows, eta_of_point, exclude, part, measured_from, False)
            if got is None:
                return None
            return Eta(got.value * fam.slow, got.arch, got.n_points, got.spread, got.measured)
        return None
    meds = {a: statistics.median(v) for a, v in by_arch.items()}
    spread = math.log(max(meds.values()) / min(meds.values())) if len(meds) > 1 else 0.0
    # The part's own points first: two parts of one class can stream their L2 very
    # differently (a B200 against an RTX 5090).
    own = [e for e in (eta_of_point(p) for p in pts if p["part"] == part) if e is not None and e > 0]
    if own:
        return Eta(statistics.median(own) * fam.slow, arch_of(part), len(own), spread, False)
    want = arch_of(part) if part is not None else None
    if want in by_arch:
        return Eta(meds[want] * fam.slow, want, len(by_arch[want]), spread, False)
    alle = [e for v in by_arch.values() for e in v]
    # Another class: the median over all, its band at least the spread seen across classes,
    # the family's own or that of every 4-bit family's per-class medians (Ampere's W4A8 int8
    # streams at 0.77, Hopper's Marlin at 0.52: 0.39), and no less than 0.3.
    return Eta(statistics.median(alle) * fam.slow, "all", len(alle),
               max(spread, _pooled_spread(eta_of_point, exclude), 0.3), False)


def _pooled_spread(eta_of_point, exclude) -> float:
    """log(max / min) of the per-(family, class) median etas of the 4-bit families."""
    import math

    groups: dict = {}
    for p in published_points():
        if p is exclude or FAMILIES[p["family"]].weight_bits != 4:
            continue
        e = eta_of_point(p)
        if e is not None and e > 0:
            groups.setdefault((p["family"], arch_of(p["part"])), []).append(e)
    meds = [statistics.median(v) for v in groups.values()]
    return math.log(max(meds) / min(meds)) if len(meds) > 1 else 0.0


# The datatype each dense family's GEMM computes in.
DENSE_DTYPES = {"dense_fp16": "bf16", "dense_int8": "int8", "dense_fp8": "fp8"}


@dataclass(frozen=True)
class RateEstimate:
    """A part's dense rate at one datatype as a fraction of its peak, read from what other
    GEMMs reached: the part's own published points (scope "part"), else the other parts of
    its architecture class (scope: the class), else every class ("all", `spread`: the
    log-range of the per-part figures, which widens the band)."""

    eff: float
    scope: str
    n: int
    spread: float


def dense_rate(hw, dtype: str, implied: tuple, exclude: dict | None = None) -> RateEstimate | None:
    """The rate `hw` reaches at `dtype`, from evidence other than `exclude`: the rates its
    published dense points imply (`implied`, aligned with `published_points()`, TOP/s or
    None), and the sustained figures hardware.json gives other parts (those read from
    `exclude`'s own source left out). Per part the median fraction of peak; across parts the
    median of those."""
    import math

    from workbench.perf.hardware import hardware_for, hardware_table

    def peak(h):
        return h.peak(dtype) or h.peak("bf16") or 1.0

    per_part: dict = {}
    for p, r in zip(published_points(), implied):
        if r is None or p is exclude or DENSE_DTYPES.get(p["family"]) != dtype:
            continue
        per_part.setdefault(p["part"], []).append(r / peak(hardware_for(p["part"])))
    if hw.preset in per_part:
        own = per_part[hw.preset]
        return RateEstimate(statistics.median(own), "part", len(own), 0.0)
    effs = {part: statistics.median(v) for part, v in per_part.items()}
    counts = {part: len(v) for part, v in per_part.items()}
    src = exclude.get("source") if exclude else None
    for row in hardware_table():
        part = row["preset"]
        other = hardware_for(part)
        s = other.sustained_rate(dtype)
        if part == hw.preset or other.kind != "gpu" or not s or (src and other.sustained_link(dtype) == src):
            continue
        effs[part], counts[part] = s / peak(other), 1  # a part's own best figure wins over its points
    if not effs:
        return None
    mine = [part for part in effs if arch_of(part) == arch_of(hw.preset)]
    if mine:
        return RateEstimate(statistics.median(effs[q] for q in mine), arch_of(hw.preset),
                            sum(counts[q] for q in mine), 0.0)
    v = list(effs.values())
    return RateEstimate(statistics.median(v), "all", sum(counts.values()),
                        math.log(max(v) / min(v)) if len(v) > 1 else 0.0)
