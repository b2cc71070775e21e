"""This machine, measured: a short calibration (memory streaming, int8 and float GEMM
throughput, and the CPU kernel paths at a few shapes), cached per machine and torch build.

Each CPU path is a sum of what it does, fitted (non-negative least squares on relative
error) on the paths' own timings from `workbench.bench`:

    t = c0 + c_w * N*K (weight read / unpack) + c_mac * M*N*K (multiply-adds)
           + c_x * M*K (activation quantization / conversion) + c_y * M*N (output)

The W4A16 fallback runs tinygemm or dequantize + GEMM, whichever is faster for the M
(kernels/cpu_w4a16.py w4a16_fallback): it is predicted as the faster of the two fits.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform as _platform
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["LinearFit", "HostCalibration", "host_calibration", "fit_linear", "features",
           "CALIBRATION_SHAPES", "CALIBRATION_MS", "CPU_PATHS"]

# Shapes and token counts the host calibration times (small: seconds in all). Predictions
# elsewhere are extrapolations of the fitted terms, checked by benchmarks/validate_perf.py.
CALIBRATION_SHAPES = ((2048, 4096), (4096, 2048), (3072, 3072))
CALIBRATION_MS = (1, 4, 16, 64, 128)
CALIBRATION_GROUP = 128
# Path -> the bench paths whose fits predict it (the fastest of them wins).
CPU_PATHS = {"w4a8_native": ("w4a8_native",), "w4a16_fallback": ("w4a16_tinygemm", "w4a16_dequant"),
             "bf16_dense": ("bf16_dense",), "int8_mm": ("int8_mm",),
             "vllm_dynamic4bit": ("vllm_dynamic4bit",)}
# vLLM's x86 Dynamic4bit reference loop is slow (tens of ms per token at 4096 x 4096):
# timed at small M only, where its per-token cost is already clear.
_SLOW_PATHS = {"vllm_dynamic4bit": (1, 2, 4)}
_FIT_VERSION = "2"


def features(m: int, n: int, k: int) -> np.ndarray:
    return np.array([1.0, n * k, m * n * k, m * k, m * n], dtype=float)


@dataclass(frozen=True)
class LinearFit:
    coef: tuple[float, ...]  # us per feature (see module docstring)
    n_points: int
    rms_log: float
    err_lo: float  # 5th / 95th percentiles of log(measured / fitted)
    err_hi: float

    def predict(self, m: int, n: int, k: int) -> float:
        return float(features(m, n, k) @ np.array(self.coef))


def fit_linear(points: Sequence[tuple[int, int, int, float]]) -> LinearFit:
    """points: (m, n, k, us)."""
    from workbench.perf.fit import _nnls

    x = np.stack([features(m, n, k) for m, n, k, _ in points])
    t = np.array([p[3] for p in points])
    norm = np.maximum(np.abs(x).max(axis=0), 1e-12)
    coef = _nnls(x / t[:, None] / norm, np.ones_like(t)) / norm
    resid = np.log(t / np.maximum(x @ coef, 1e-9))
    lo, hi = np.percentile(resid, [5, 95])
    return LinearFit(tuple(float(c) for c in coef), len(points), float(np.sqrt(np.mean(resid ** 2))),
                     float(lo), float(hi))


@dataclass(frozen=True)
class HostCalibration:
    """This machine's measured figures and fitted path models."""

    key: str
    stream_gbs: float
    fp32_tflops: float
    bf16_tflops: float
    int8_tops: float
    threads: int
    seconds: float
    fits: dict = field(default_factory=dict)  # bench path -> LinearFit
    provenance: dict = field(default_factory=dict)

    def predict(self, path: str, m: int, n: int, k: int) -> tuple[float, LinearFit] | None:
        """(us, the fit that gave it) for a path, or None if it was not calibrated here."""
        cands = [(self.fits[p].predict(m, n, k), self.fits[p]) for p in CPU_PATHS.get(path, (path,))
                 if p in self.fits]
        return min(cands, key=lambda c: c[0]) if cands else None

    def to_json(self) -> dict:
        d = asdict(self)
        d["fits"] = {p: asdict(f) for p, f in self.fits.items()}
        return d


def _time(fn, repeats: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _throughputs() -> dict:
    import torch

    a = torch.ones(64 * 2 ** 20 // 4)  # 64 MB of float32: well past the caches of most parts
    b = torch.empty_like(a)
    stream = 2 * a.numel() * 4 / _time(lambda: b.copy_(a)) / 1e9
    n = 1024
    f = torch.randn(n, n)
    fp32 = 2 * n ** 3 / _time(lambda: f @ f) / 1e12
    h = f.to(torch.bfloat16)
    bf16 = 2 * n ** 3 / _time(lambda: h @ h) / 1e12
    try:
        q = torch.randint(-8, 8, (n, n), dtype=torch.int8)
        int8 = 2 * n ** 3 / _time(lambda: torch._int_mm(q, q.t())) / 1e12
    except RuntimeError:
        int8 = 0.0  # no CPU _int_mm in this build
    return {"stream_gbs": stream, "fp32_tflops": fp32, "bf16_tflops": bf16, "int8_tops": int8}


def _host_key() -> str:
    """This machine and torch build, read without importing torch (the app's landing page
    asks whether a calibration is cached, and must not pay torch's import)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = ""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                cpu += line
            if line.startswith("flags"):
                break
    except OSError:
        cpu = _platform.processor()
    threads = os.environ.get("OMP_NUM_THREADS") or str(os.cpu_count())
    ident = json.dumps([cpu, _platform.machine(), torch_version, threads, _FIT_VERSION,
                        CALIBRATION_SHAPES, CALIBRATION_MS])
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _bench_fits() -> tuple[dict, dict]:
    from w4a8_kernels.registry import get_path

    from workbench.bench import bench_weight, host_provenance, synthetic_bench_layer

    paths = sorted({p for ps in CPU_PATHS.values() for p in ps})
    pts: dict[str, list] = {}
    for n, k in CALIBRATION_SHAPES:
        layer = synthetic_bench_layer(n, k, CALIBRATION_GROUP)
        from workbench.bench import int4_weight_of

        w = int4_weight_of(layer)
        live = [p for p in paths if get_path(p).availability(w)[0]]
        runs = [([p for p in live if p not in _SLOW_PATHS], CALIBRATION_MS)]
        runs += [([p], ms) for p, ms in _SLOW_PATHS.items() if p in live]
        for names, ms in runs:
            if not names:
                continue
            for r in bench_weight(w, None, names, ms, repeats=3, error_rows=1):
                if r.median_ms is not None:
                    pts.setdefault(r.path, []).append((r.m, r.n, r.k, r.median_ms * 1e3))
    fits = {p: fit_linear(v) for p, v in pts.items() if len(v) >= 5}
    return fits, host_provenance()


def _cache_file(key: str) -> Path | None:
    from workbench.perf.calibrate import _cache_dir

    d = _cache_dir()
    return None if d is None else d / f"host-{key}.json"


def _from_json(d: dict) -> HostCalibration:
    fits = {p: LinearFit(tuple(f["coef"]), f["n_points"], f["rms_log"], f["err_lo"], f["err_hi"])
            for p, f in d["fits"].items()}
    return HostCalibration(**{**d, "fits": fits})


@lru_cache(maxsize=1)
def host_calibration(refresh: bool = False) -> HostCalibration:
    """This machine's calibration: read from the cache, or measured now (seconds).
    WORKBENCH_RECALIBRATE=1 measures again (a cache made on a loaded machine is noise)."""
    key = _host_key()
    path = _cache_file(key)
    refresh = refresh or os.environ.get("WORKBENCH_RECALIBRATE", "") not in ("", "0")
    if path is not None and path.is_file() and not refresh:
        try:
            return _from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError):
            pass
    import torch  # only to measure: a cached calibration is read without it (the app's landing page)

    t0 = time.perf_counter()
    thr = _throughputs()
    fits, prov = _bench_fits()
    cal = HostCalibration(key, thr["stream_gbs"], thr["fp32_tflops"], thr["bf16_tflops"],
                          thr["int8_tops"], torch.get_num_threads(), time.perf_counter() - t0,
                          fits, {**prov, "machine": _platform.machine(), "pid": os.getpid()})
    if path is not None:
        try:
            path.write_text(json.dumps(cal.to_json()))
        except OSError:
            pass
    return cal


_COMMITTED = ("cpu_sweep_m.json", "cpu_sweep_group.json", "cpu_sweep_tp.json", "cpu_sweep_alignment.json")


@lru_cache(maxsize=1)
def committed_calibration() -> HostCalibration:
    """Fits of the committed CPU results (benchmarks/results/cpu_sweep_*.json, one machine):
    what CPU presets are scaled from, so no live run is needed for them.

    That machine's figures are the x86-avx2 part's per core times the cores its provenance
    records (the same ISA class; its results carry no throughput measurement of their own).
    """
    from workbench.perf.calibrate import H200_RESULTS
    from workbench.perf.hardware import hardware_for
    from workbench.results import load_results

    pts: dict[str, list] = {}
    prov: dict = {}
    for name in _COMMITTED:
        res = load_results(H200_RESULTS.with_name(name))
        prov = prov or res.provenance
        for r in res.records:
            if r.group_size in (-1, 128):  # the group sweep's other sizes are another kernel branch
                pts.setdefault(r.path, []).append((r.m, r.n, r.k, r.median_us))
    fits = {p: fit_linear(v) for p, v in pts.items() if len(v) >= 5}
    ref = hardware_for("x86-avx2")
    cores = int(prov.get("threads") or prov.get("cores") or 1)
    share = cores / ref.units
    return HostCalibration("committed", ref.mem_gbs * share, ref.peak("fp32") * share,
                           ref.peak("bf16") * share, ref.peak("int8") * share, cores, 0.0, fits,
                           {"cpu": prov.get("cpu"), "isa": prov.get("isa"), "files": list(_COMMITTED)})


def cached_host_calibration() -> HostCalibration | None:
    """This machine's calibration if one is cached (the app never starts one unasked)."""
    path = _cache_file(_host_key())
    if path is None or not path.is_file():
        return None
    try:
        return _from_json(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError):
        return None
