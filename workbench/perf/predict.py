"""Predicted time of one GEMM call, per platform and execution path, with a band and its basis.

Paths (as `python -m workbench predict --paths` names them):

- `w4a8_native`: this project's native W4A8 (int8 x int4), its activation quantizer included;
  on GPUs the Triton kernel (`kernels/w4a8_kernels/triton_w4a8.py`), on CPUs the int8 engine.
- `w4a16_fallback`: this project's W4A16 (Triton on GPUs; on CPUs the fastest for M of tinygemm,
  dequantize + fp32 GEMM and dequantize + bf16 GEMM where bf16 is native).
- `dense` (CPUs only): the fastest dense float GEMM per M (`kernels/w4a8_kernels/cpu_dense.py`).
- `bf16_dense`: the dense bf16 GEMM (cuBLAS `x @ w.t()` on NVIDIA GPUs).
- `int8_mm`: int8 x int8 on pre-quantized inputs (cuBLAS `torch._int_mm`).
- `quantizer`, `w4a8_prequant`: the per-token int8 quantizer alone, W4A8 on quantized input.
- `selected` (`workbench/perf/selected.py`): what vLLM selects for the layer, decided by its
  trace and costed here by what that kernel runs (`cost_of_runtime`).

Basis: "measured" (calibrated on this part's own results, or this machine's live bench),
"scaled" (calibrated on a similar part, scaled by the two parts' datasheet figures),
"published" (a family calibrated on published kernel timings), "roofline" (bytes and
operations against the datasheet peaks only).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Sequence

from workbench.errors import InvalidInputError
from workbench.limits import MAX_DIM, MAX_M
from workbench.perf.calibrate import calibrate_gpu, copy_gbs, key_for, point_for, bytes_moved, results_for
from workbench.perf.hardware import Hardware, hardware_for
from workbench.perf.regime import Regime, regime_for, stream_gbs

__all__ = ["Prediction", "predict", "UNDER_LOAD", "cost_of_runtime", "check_shape", "hardware_of",
           "predicted_crossover", "sweep_ms", "PREDICTED_PATHS", "CPU_ONLY_PATHS", "SELECTED", "BASES",
           "roofline_us", "prediction_band", "predict_cpu", "predict_gpu", "predict_family", "predict_dense",
           "eta_of_point", "regime_of_point"]

# The execution paths the model predicts: kernel paths and the H200 bench's own.
PREDICTED_PATHS = ("w4a8_native", "w4a16_fallback", "bf16_dense", "int8_mm", "quantizer", "w4a8_prequant")
# What vLLM selects: a path of the faces, costed from its trace (workbench/perf/selected.py).
SELECTED = "selected"
# The fastest dense float GEMM per M (kernels/w4a8_kernels/cpu_dense.py): a CPU path only.
CPU_ONLY_PATHS = ("dense",)
# "measured under load": this machine's calibration ran beside other processes' work (a
# figure of the machine as it was then, never labelled measured).
UNDER_LOAD = "measured under load"
BASES = ("measured", UNDER_LOAD, "scaled", "scaled across CPU classes", "published", "roofline")
_DTYPE = {"w4a8_native": "int8", "w4a8_prequant": "int8", "int8_mm": "int8", "fp8_mm": "fp8",
          "w4a16_fallback": "bf16", "bf16_dense": "bf16", "quantizer": "bf16",
          "vllm_humming": "bf16", "vllm_humming_int8": "int8", "vllm_machete": "bf16"}
# Extra log-width of a band per basis: a scaled or published model carries more than its
# fit's own held-out error (another part, another kernel build).
_WIDEN = {"measured": 0.05, UNDER_LOAD: 0.35, "scaled": 0.35, "scaled across CPU classes": 0.35, "published": 0.35,
          "roofline": 0.0}


@dataclass(frozen=True)
class Prediction:
    platform: str
    path: str
    m: int
    n: int
    k: int
    group_size: int
    predicted_us: float | None
    low_us: float | None
    high_us: float | None
    basis: str
    kernel: str  # what runs, e.g. "triton_w4a8", "cublas_bf16", "MarlinLinearKernel (w4a16)"
    roofline_us: float | None = None
    note: str = ""

    def to_json(self) -> dict:
        d = asdict(self)
        for key in ("predicted_us", "low_us", "high_us", "roofline_us"):
            if d[key] is not None:
                d[key] = round(d[key], 3)
        return d


def _is_cuda_sm80(hw: Hardware) -> bool:
    pre = hw.preset
    return pre.startswith("sm") and pre[2:].split("-")[0].isdigit() and int(pre[2:].split("-")[0]) >= 80


def roofline_us(hw: Hardware, path: str, m: int, n: int, k: int, g: int) -> float:
    """max(bytes / bandwidth, operations / peak of the path's datatype)."""
    peak = _peak_of(hw, _DTYPE.get(path, "bf16"))
    base = "int8_mm" if path == "fp8_mm" else path
    nbytes = bytes_moved(base if base in _DTYPE else "bf16_dense", m, n, k, g)
    return max(nbytes / (hw.mem_gbs * 1e3), 2 * m * n * k / (peak * 1e6))


def prediction_band(us: float, lo: float, hi: float, basis: str) -> tuple[float, float]:
    """(low, high) around `us` from a fit's log-error range, widened for the basis."""
    w = _WIDEN[basis]
    return us * math.exp(min(lo, 0.0) - w), us * math.exp(max(hi, 0.0) + w)


def _nearest_fit(cal, key: tuple):
    """A re-tuned table can pick a config no record was timed with: take the fit of the
    same path and weight kind whose tile is closest in block_m, block_n."""
    if key in cal.fits or len(key) < 3:
        return cal.fits.get(key), False
    want = dict(key[2])
    same = [(k2, f) for k2, f in cal.fits.items() if k2[:2] == key[:2]]
    if not same:
        return None, True

    def dist(k2):
        c = dict(k2[2])
        return (abs(math.log2(c["block_m"] / want["block_m"])) + abs(math.log2(c["block_n"] / want["block_n"]))
                + (c.get("split_k") != want.get("split_k")))

    return min(same, key=lambda kf: dist(kf[0]))[1], True


_GPU_KERNELS = {"w4a8_native": "triton_w4a8 + triton quantizer", "w4a8_prequant": "triton_w4a8",
                "w4a16_fallback": "triton_w4a16", "bf16_dense": "cublas_bf16", "int8_mm": "cublas_int8",
                "fp8_mm": "cublas_fp8", "quantizer": "triton_quant", "vllm_humming": "humming",
                "vllm_humming_int8": "humming (int8 activations)", "vllm_machete": "machete"}
# A selected kernel's family -> the path of its own measured records (calibrate.ENGINE_PATHS).
_ENGINE_OF_FAMILY = {"humming": "vllm_humming", "humming_int8": "vllm_humming_int8", "machete": "vllm_machete"}


def _peak_of(hw: Hardware, dtype: str) -> float:
    return hw.peak(dtype) or hw.peak("bf16") or hw.peak("fp32") or 1.0


def _rate(hw: Hardware, dtype: str, src: Hardware, fitted: str, exclude: dict | None) -> tuple[float, str, float]:
    """(TOP/s, where it comes from, extra band log-width): the dense rate `hw` reaches at
    `dtype`. Its sustained figure where hardware.json has one; else the rate published dense
    GEMMs imply on this part, its architecture class, or (band widened by their spread) any
    class, `exclude` left out; else the fitted part's own efficiency at that datatype (or at
    its fitted kernel's) applied to this part's peak."""
    if exclude is not None:
        return _rate_uncached(hw, dtype, src, fitted, exclude)
    key = (repr(hw), repr(src), dtype, fitted)  # a part's rate does not depend on M: read once
    if key not in _RATES:
        if len(_RATES) > 1024:
            _RATES.clear()
        _RATES[key] = _rate_uncached(hw, dtype, src, fitted, None)
    return _RATES[key]


_RATES: dict = {}


def _rate_uncached(hw: Hardware, dtype: str, src: Hardware, fitted: str, exclude: dict | None):
    from workbench.perf.families import dense_rate

    s = hw.sustained_rate(dtype)
    if s:
        return s, "", 0.0
    est = dense_rate(hw, dtype, _implied_rates(), exclude)
    if est is not None:
        where = ("this part's" if est.scope == "part" else f"{est.scope} parts'" if est.scope != "all"
                 else "every architecture's")
        return (est.eff * _peak_of(hw, dtype), f"{dtype} at {est.eff:.0%} of peak, the rate {where} published "
                f"dense GEMMs and sustained figures show ({est.n} of them)", est.spread)
    own = src.sustained_rate(dtype) or 0.0
    eff = own / _peak_of(src, dtype) if own else (src.sustained_rate(fitted) or _peak_of(src, fitted)) / _peak_of(src, fitted)
    return eff * _peak_of(hw, dtype), "", 0.0


def _gpu_fit(hw: Hardware, path: str, m: int, n: int, k: int, g: int, src: Hardware | None = None,
             regime: Regime = Regime.DRAM, exclude: dict | None = None, rate: float | None = None):
    """(fit, point, basis, note) of a GPU path on a part, or (None, None, "roofline", why).
    src: the fitted part's figures to use instead of its preset's (validation holds rates out);
    regime: where the weight streams from; exclude: a published point to leave out of the
    rates read from published points; rate: this part's rate at the path's datatype (TOP/s),
    given instead of looked up."""
    base = "int8_mm" if path == "fp8_mm" else path
    own = results_for(path, hw.preset)  # a part is fitted from its own timings where it has them
    cal = calibrate_gpu(own or results_for(path))
    fit, approx = _nearest_fit(cal, key_for(base, m, n, k, g))
    if fit is None and own is not None:
        # the part's own file holds no record of this M bucket (the H100's int8_mm below M = 65):
        # scaled from the reference part's, as a part with no file at all
        cal = calibrate_gpu(results_for(path))
        fit, approx = _nearest_fit(cal, key_for(base, m, n, k, g))
    src = src or hardware_for(cal.platform)
    scaled = hw.preset != src.preset
    if scaled and not _is_cuda_sm80(hw):
        return None, None, "roofline", "no measured part of this kind: bytes and operations against the datasheet"
    if scaled and path in ("w4a8_native", "w4a8_prequant", "w4a16_fallback") and hw.peak("bf16") is None:
        return None, None, "roofline", "this project's Triton kernels need bf16 tensor cores (SM 8.0+)"
    if fit is None:
        return None, None, "roofline", f"no calibrated record of {base} on {src.preset}"
    notes = []
    dtype, fitted = _DTYPE.get(path, "bf16"), _DTYPE.get(base, "bf16")
    if scaled or dtype != fitted:
        # The fitted kernel's rate on the fitted part against this part's rate at the path's
        # datatype, per SM: datasheet ratios miss per-architecture efficiency (A100 CUTLASS
        # int8 about 78% of its peak, the H200's torch._int_mm about 45%), and an fp8 GEMM on
        # the H200 runs at its own rate (about 1450 against _int_mm's 895).
        r_src = src.sustained_rate(fitted) or _peak_of(src, fitted)
        r_dst, how, widen = (rate, "", 0.0) if rate else _rate(hw, dtype, src, fitted, exclude)
        r = (r_src / src.units) / (r_dst / hw.units)
        fit = replace(fit, sms=hw.units, a=fit.a * r, b=fit.b * r, d=fit.d * r, e=fit.e * r,
                      err_lo=fit.err_lo - widen, err_hi=fit.err_hi + widen)
        if scaled:
            notes.append(f"fitted on {src.preset}, scaled by {dtype} rate per SM and bandwidth")
        if how:
            notes.append(how)
    if scaled or regime is Regime.L2:
        ratio = stream_gbs(hw, regime) / src.mem_gbs
        measured = (copy_gbs(hw.preset), copy_gbs(src.preset))
        if scaled and regime is Regime.DRAM and all(measured):
            # both parts' copy rates were measured: they differ far less than their datasheets
            # (H100 2448 against H200 2715 GB/s read + write; 3.35 against 4.8 TB/s)
            ratio = measured[0] / measured[1]
            notes.append("bandwidth scaled by the measured copy rates")
        fit = replace(fit, bw=fit.bw * ratio)
    if approx:
        fit = replace(fit, err_lo=fit.err_lo - 0.1, err_hi=fit.err_hi + 0.1)
        notes.append("config not in the results: nearest calibrated tile")
    point = point_for(base, m, n, k, g, fit.sms, tile=cal.tiles.get(key_for(base, m, n, k, g)), l2_mb=hw.llc_mb)
    return fit, point, "scaled" if scaled else "measured", "; ".join(notes)


def predict_gpu(hw: Hardware, path: str, m: int, n: int, k: int, g: int, src: Hardware | None = None,
                regime: Regime = Regime.DRAM, exclude: dict | None = None) -> Prediction:
    """This project's Triton kernels and the cuBLAS baselines on a GPU part; regime: where
    the weight streams from (DRAM unless a benchmark re-reads one weight copy that fits the L2)."""
    roof = roofline_us(hw, path, m, n, k, g)
    kernel = _GPU_KERNELS[path]
    fit, point, basis, note = _gpu_fit(hw, path, m, n, k, g, src, regime, exclude)
    if fit is None:
        return Prediction(hw.preset, path, m, n, k, g, roof, roof, 3 * roof, "roofline", kernel, roof, note)
    us = fit.predict(point)
    lo, hi = prediction_band(us, fit.err_lo, fit.err_hi, basis)
    note = "; ".join(x for x in (note, regime.sentence) if x)
    return Prediction(hw.preset, path, m, n, k, g, us, lo, hi, basis, kernel, roof, note)


def _comp_us(fit, point) -> float:
    """The per-tile (compute) branch of a fit at a point."""
    return fit.compute(point)


@lru_cache(maxsize=1)
def _implied_rates() -> tuple:
    """Per published point (aligned with `published_points()`): the rate (TOP/s) at which
    the model `predict_dense` uses for it meets it, where it is a dense GEMM past M = 128
    that is compute-bound (the fitted per-tile branch binds for cuBLAS bf16; the family's
    compute term for the int8 / fp8 GEMMs); else None. Up to M = 128 the fitted per-tile
    branch is the H200 library's small-M latency, not a datapath rate."""
    from workbench.perf.families import FAMILIES, point_us, published_points

    out = []
    for p in published_points():
        if not p["family"].startswith("dense") or p["m"] <= _STREAM_M or p["unit"] not in ("us", "tflops"):
            out.append(None)
            continue
        hw = hardware_for(p["part"])
        path = FAMILIES[p["family"]].act
        r0 = _peak_of(hw, _DTYPE[path])
        regime = regime_of_point(p, hw)
        t = point_us(p, None)
        if p["family"] == "dense_fp16":
            fit, point, _, _ = _gpu_fit(hw, path, p["m"], p["n"], p["k"], -1, regime=regime, rate=r0)
            ok = fit is not None and t - fit.t0 > point.nbytes / fit.bw
            out.append(r0 * _comp_us(fit, point) / (t - fit.t0) if ok else None)
            continue
        got = _family_compute(hw, p["family"], p["m"], p["n"], p["k"], rate=r0)
        stream = _family_bytes(p["family"], p["m"], p["n"], p["k"], -1) / (stream_gbs(hw, regime) * 1e3)
        ok = got is not None and got[1] > stream and t - got[0] > stream  # compute-bound
        out.append(r0 * got[1] / (t - got[0]) if ok else None)
    return tuple(out)


# --------------------------------------------------------------------------- CPU parts


def _err_envelope(cal, base: str, m: int, fit) -> tuple[float, float]:
    """The fit error band of every variant the path may run at M, not only the fastest's:
    where the fastest changes with M (the W4A16 fallback's tinygemm against dequantize +
    GEMM), the chosen fit's own band made the band's edges fall as M grew (an AMX host's
    calibration: 193.6 -> 193.3 us from M = 257 to 384 at 256 x 1024)."""
    cands = cal.candidates(base, m) or [fit]
    return min(c.err_lo for c in cands), max(c.err_hi for c in cands)


def predict_cpu(hw: Hardware | None, path: str, m: int, n: int, k: int, g: int, platform: str,
         cal=None) -> Prediction:
    """This machine's fitted CPU paths; on a CPU preset, scaled by its datasheet figures.
    cal: a HostCalibration to use instead of the cached one (a validation run's own)."""
    from workbench.perf.cpu import class_calibration, committed_calibration, host_calibration

    base = {"w4a8_prequant": "int8_mm", "quantizer": "w4a8_native"}.get(path, path)
    if cal is None and hw is not None:  # a preset: its class's own committed calibration first
        from workbench.perf.cpu_classes import class_of_preset

        own = class_calibration(class_of_preset(hw.preset).value)
        cal = own if own is not None and own.predict(base, m, n, k) is not None else None
    if cal is None:
        cal = host_calibration() if hw is None else committed_calibration()
    got = cal.predict(base, m, n, k)
    if got is None and hw is not None:  # a path the committed results lack: this machine's, if cached
        from workbench.perf.cpu import cached_host_calibration

        cal = cached_host_calibration() or cal
        got = cal.predict(base, m, n, k)
    engine = cal.engine_for(m) if base == "w4a8_native" else None
    kernel = {"w4a8_native": f"cpu int8 engine {engine}" if engine else "cpu int8 engine",
              "w4a16_fallback": "fastest of tinygemm, dequant+fp32 GEMM, dequant+bf16 GEMM",
              "bf16_dense": "torch bf16 matmul", "dense": "fastest of fp32 and bf16 GEMM",
              "int8_mm": "torch._int_mm",
              "vllm_dynamic4bit": "aten._dyn_quant_matmul_4bit (reference loop)"}.get(base, base)
    roof = roofline_us(hw, path, m, n, k, g) if hw is not None else None
    if got is None:
        if roof is None:
            return Prediction(platform, path, m, n, k, g, None, None, None, "roofline", kernel, None,
                              f"{base} did not run on this machine")
        return Prediction(platform, path, m, n, k, g, roof, roof, 3 * roof, "roofline", kernel, roof,
                          f"{base} did not run on this machine")
    us, fit = got
    if hw is None:  # this machine
        # where the int8 engine changes, the time reached just below the switch carries on
        for first, _ in cal.engine_steps:
            below = cal.predict(base, first - 1, n, k) if 1 < first <= m else None
            us = max(us, below[0]) if below else us
        from workbench.perf.cpu import load_sentence, loaded_calibration

        loaded = loaded_calibration(cal)
        basis = UNDER_LOAD if loaded else "measured"
        err_lo, err_hi = _err_envelope(cal, base, m, fit)
        lo, hi = prediction_band(us, err_lo - 0.12, err_hi + 0.12, basis)
        return Prediction(platform, path, m, n, k, g, us, lo, hi, basis, kernel, None,
                          f"fitted on this machine's bench ({cal.threads} threads)"
                          + (f"; {load_sentence(loaded)}" if loaded else ""))
    return _cpu_preset(hw, cal, base, path, m, n, k, g, platform, kernel, roof)


def _cpu_preset(hw: Hardware, cal, base: str, path: str, m: int, n: int, k: int, g: int, platform: str,
                kernel: str, roof: float) -> Prediction:
    """A calibration's fits carried to a CPU preset: traffic terms by bandwidth, the
    multiply-add term by the rate the preset's ISA gives the path at M
    (workbench/perf/cpu_classes.py), the per-call term as fitted (the floor); never below the
    roofline, and never less at more tokens where the ISA's engine switches."""
    import numpy as np

    from workbench.perf import cpu_classes as cc
    from workbench.perf.cpu import features

    src_hw = hardware_for("x86-avx2")  # the committed results' class (a live host: its own flags)
    if cal.key == "committed":
        src = cc.CpuClass.AVX2
    elif cal.key.startswith("committed-"):  # a class's own: its part per core as the preset's
        src, src_hw = cc.CpuClass(cal.provenance["class"]), hardware_for(cal.provenance["scaled_as"])
    else:
        from w4a8_kernels.native import cpu_flags, isa_cap

        src = cc.host_class(cpu_flags(), isa_cap())
    dst = cc.class_of_preset(hw.preset)
    rm = cal.stream_gbs / hw.mem_gbs
    src_cycles = src_hw.clock_mhz * max(cal.threads, 1)

    def raw(mm: int) -> tuple[float, object]:
        rc = src_cycles / (cc.speedup(base, src, dst, mm) * hw.clock_mhz * hw.units)
        x = features(mm, n, k)
        # the fastest variant on the preset (scaled before choosing: the host's fastest may not be)
        return min(((float(x @ np.array((c[0], c[1] * rm, c[2] * rc, c[3] * rm, c[4] * rm))), f)
                    for f in cal.candidates(base, mm) for c in (f.coef,)), key=lambda t: t[0])

    us, fit = raw(m)
    # the pieces are each non-decreasing in M; where the engine changes, the time reached
    # just below the switch carries on (a larger batch is never cheaper than a smaller one)
    switches = {cc.AMX_FROM_M} | {first for first, _ in cal.engine_steps}
    for s in switches:
        if 1 < s <= m:
            us = max(us, raw(s - 1)[0])
    us = max(us, roof)
    across = src != dst
    basis = "scaled across CPU classes" if across else "scaled"
    lo_e, hi_e = _err_envelope(cal, base, m, fit)
    if across:
        w = max(cc.cross_class_spread(base), cc.CROSS_CLASS_WIDEN)
        lo_e, hi_e = lo_e - w, hi_e + w
    lo, hi = prediction_band(us, lo_e, hi_e, basis)
    lo = max(lo, roof)
    where = ("the committed CPU results" if cal.key == "committed" else
             f"the committed {src.value} results ({cal.provenance.get('cpu') or cal.provenance['file']})"
             if cal.key.startswith("committed-") else "this machine's bench")
    how = (f"{src.value} to {dst.value}, by the ISA's rate for this path and bandwidth" if across else
           "by the part's clock, cores and bandwidth")
    return Prediction(platform, path, m, n, k, g, us, lo, hi, basis, kernel, roof,
                      f"fitted on {where} ({src.value}), scaled {how}")


# --------------------------------------------------------------------------- what vLLM selects


def _family_bytes(family: str, m: int, n: int, k: int, g: int) -> float:
    from workbench.perf.families import FAMILIES

    groups = 1 if g in (-1, k) else -(-k // g)
    return n * k * FAMILIES[family].weight_bits / 8 + 2 * n * groups + m * k * 2 + m * n * 2


def regime_of_point(p: dict, hw: Hardware) -> Regime:
    """The regime a published point's benchmark ran in: its source's `weight_reused` and
    whether the call's weight, activations and output fit the part's L2."""
    return regime_for(hw, p.get("weight_reused"), _family_bytes(p["family"], p["m"], p["n"], p["k"], p["group_size"]))


def _family_us(hw: Hardware, family: str, m: int, n: int, k: int, g: int, eta: float,
               src: Hardware | None = None, regime: Regime = Regime.DRAM, exclude: dict | None = None
               ) -> float | None:
    """max(t0 + bytes / (eta BW), 2MNK at the rate the dense GEMM of the family's activation
    type reaches on this N x K when compute-bound); BW: the regime's (DRAM, or the L2)."""
    got = _family_compute(hw, family, m, n, k, src, exclude)
    if got is None:
        return None
    t0, compute = got
    nbytes = _family_bytes(family, m, n, k, g)
    return t0 + max(nbytes / (eta * stream_gbs(hw, regime) * 1e3), compute)


def _family_compute(hw: Hardware, family: str, m: int, n: int, k: int, src: Hardware | None = None,
                    exclude: dict | None = None, rate: float | None = None) -> tuple[float, float] | None:
    """(launch latency, compute time) of a family's call: 2MNK at the rate the dense GEMM of
    its activation type reaches on this N x K at M = max(M, 4096), where it is compute-bound."""
    from workbench.perf.families import FAMILIES

    big = max(m, 4096)
    fit, point, _, _ = _gpu_fit(hw, FAMILIES[family].act, big, n, k, -1, src, exclude=exclude, rate=rate)
    # launch latency (as eta_of_point): no rate enters it
    here, _, _, _ = _gpu_fit(hw, "bf16_dense", 1, n, k, -1, src, rate=_peak_of(hw, "bf16"))
    if fit is None or here is None:
        return None
    return here.t0, m * fit.predict(point) / big


def eta_of_point(p: dict) -> float | None:
    """The streaming efficiency a published point implies on its part, against the bandwidth
    of the regime its benchmark ran in; None where the call is compute-bound even at the
    part's peak (it says nothing of the stream)."""
    from workbench.perf.families import FAMILIES, point_us

    hw = hardware_for(p["part"])
    t = point_us(p, lambda part, n, k, m: predict_gpu(hardware_for(part), "bf16_dense", m, n, k, -1).predicted_us)
    fit, _, _, _ = _gpu_fit(hw, "bf16_dense", 1, p["n"], p["k"], -1, rate=_peak_of(hw, "bf16"))  # t0 only
    if fit is None or t <= fit.t0:
        return None
    nbytes = _family_bytes(p["family"], p["m"], p["n"], p["k"], p["group_size"])
    stream = nbytes / (stream_gbs(hw, regime_of_point(p, hw)) * 1e3)
    if 2 * p["m"] * p["n"] * p["k"] / (_peak_of(hw, _DTYPE[FAMILIES[p["family"]].act]) * 1e6) > stream:
        return None
    return stream / (t - fit.t0)


def _eta_in(regime: Regime):
    """eta_of_point, for the points whose benchmark streamed in `regime` only."""
    def eta(p: dict) -> float | None:
        return eta_of_point(p) if regime_of_point(p, hardware_for(p["part"])) is regime else None
    return eta


def predict_family(hw: Hardware, family: str, m: int, n: int, k: int, g: int, exclude: dict | None = None,
                   regime: Regime = Regime.DRAM, src: Hardware | None = None
                   ) -> tuple[float, float, float, object] | None:
    """(us, low, high, Eta) of a GPU kernel family on a part: its eta for the part's
    architecture class (measured records first, then published points), the band widened by
    the spread across classes when the part's class has no point; regime: where the weight
    streams from (DRAM unless a benchmark re-reads one weight copy that fits the L2)."""
    from workbench.perf.families import family_eta

    # A stream from the L2 and one from DRAM reach different fractions of their bandwidths:
    # the efficiency is read from points of the same regime; with none, DRAM's, band widened.
    eta = family_eta(family, _eta_in(regime), exclude, hw.preset)
    widen = 0.0
    if eta is None and regime is Regime.L2:
        eta, widen = family_eta(family, _eta_in(Regime.DRAM), exclude, hw.preset), 0.3
    us = None if eta is None else _family_us(hw, family, m, n, k, g, eta.value, src, regime, exclude)
    if us is None:
        return None
    w = 0.1 + widen + (eta.spread if eta.arch == "all" else 0.0)
    lo, hi = prediction_band(us, -w, w, "measured" if eta.measured else "published")
    return us, lo, hi, eta


# Past this M cuBLAS bf16 on another part is costed by the fitted per-tile model too, and
# dense points imply a rate (key_for's "small" bucket ends here).
_STREAM_M = 128


def predict_dense(hw: Hardware, family: str, m: int, n: int, k: int, *, src: Hardware | None = None,
                  exclude: dict | None = None, regime: Regime = Regime.DRAM) -> Prediction:
    """A published dense GEMM (families dense_fp16 / dense_int8 / dense_fp8) on a part.
    On the H200, cuBLAS bf16 is the kernel its results time: its fit. Elsewhere, and for
    the int8 and fp8 GEMMs (CUTLASS scaled_mm, torch._scaled_mm) everywhere, a GEMM is a
    family: it streams at an eta per part, then architecture, read from the published points
    of the same regime, and computes at the part's rate. The fitted small-M bucket is the
    H200 library's per-tile latency (torch._int_mm's, cuBLAS bf16's at the H200's rate),
    which other kernels' small-M tiles, or cuBLAS's GEMV-like ones on other parts, do not
    share; the fitted tiles are torch._int_mm's, not CUTLASS's. cuBLAS bf16 past M = 128 on
    another part: the larger of the family's time and its fitted per-tile model."""
    from workbench.perf.families import FAMILIES

    path = FAMILIES[family].act
    tile = predict_gpu(hw, path, m, n, k, -1, src, regime, exclude)
    if tile.basis == "roofline" or (family == "dense_fp16" and tile.basis == "measured"):
        return tile
    got = predict_family(hw, family, m, n, k, -1, exclude, regime, src)
    if got is None:
        return tile
    us, lo, hi, eta = got
    where = f"{eta.arch} points" if eta.arch != "all" else "points of other architectures"
    stream = replace(tile, predicted_us=us, low_us=lo, high_us=hi, basis="published",
                     note=f"family {family}, streaming at the efficiency of {where}; {regime.sentence}")
    if family != "dense_fp16" or m <= _STREAM_M or us >= tile.predicted_us:
        return stream
    return tile


def cost_of_runtime(platform: str, rt, m: int, n: int, k: int, g: int, *, selected: str | None = None,
                    error: str | None = None) -> Prediction:
    """The cost of what a selected kernel runs (a `workbench.dispatch.Runtime`, decided by a
    trace and handed over) on a platform (`hardware_of` says which part), keyed by that value:
    activation precision, the op and its implementation; held at the per-call floor."""
    hw = hardware_of(platform)
    if hw is None:  # this machine's CPU model holds its own engine switches
        return _floored(_runtime_cost(platform, hw, rt, m, n, k, g, selected, error), "cpu")
    p = _held(("selected", hw.preset, platform, rt, n, k, g, selected, error),
              lambda mm: _runtime_cost(platform, hw, rt, mm, n, k, g, selected, error), m)
    return _floored(p, hw.kind)


def _runtime_cost(platform: str, hw: Hardware | None, rt, m: int, n: int, k: int, g: int,
                  selected: str | None, error: str | None) -> Prediction:
    from workbench.perf.families import family_of

    if rt is None or rt.fails_at is not None:
        why = (rt.error if rt is not None else error) or "no kernel selected"
        return Prediction(platform, "selected", m, n, k, g, None, None, None, "roofline",
                          selected or "none", None, f"vLLM cannot run this layer here: {why}")
    runs = f"{rt.method} ({rt.computes}, {rt.op})"
    if rt.weight_bits != 4:  # every cost model here reads 4-bit weights
        return Prediction(platform, "selected", m, n, k, g, None, None, None, "roofline", runs, None,
                          f"{rt.weight_bits}-bit weights ({rt.weight}): no cost model of them here")
    if hw is None or hw.kind == "cpu":
        if rt.method == "Dynamic4bitLinearKernel" and rt.impl == "kleidiai":
            if hw is None:
                return Prediction(platform, "selected", m, n, k, g, None, None, None, "roofline", runs, None,
                                  "KleidiAI kernels: no timing of them on this machine")
            # int8 dot products as this project's int8 engine, at the part's sdot / i8mm rate
            p = predict_cpu(hw, "w4a8_native", m, n, k, g, platform)
            return replace(p, path="selected", kernel=runs,
                           note=f"KleidiAI: no timing of it here; modelled as an int8 engine; {p.note}")
        base = ("vllm_dynamic4bit" if rt.method == "Dynamic4bitLinearKernel" else
                "w4a8_native" if rt.computes == "w4a8" else "w4a16_fallback")
        p = predict_cpu(hw, base, m, n, k, g, platform)
        return replace(p, path="selected", kernel=runs, note=f"runs as this workbench's {base} path; {p.note}")
    if hw.preset == "xpu":
        # int4_gemm_w4a8 from min_tokens tokens, the W4A16 op below (the runtime value says which).
        path = "w4a8_native" if (rt.min_tokens is None or m >= rt.min_tokens) else "w4a16_fallback"
        roof = roofline_us(hw, path, m, n, k, g)
        return Prediction(platform, "selected", m, n, k, g, roof, roof, 3 * roof, "roofline", runs, roof,
                          f"XPU: the {path} roofline")
    fam = family_of(rt)
    engine = _ENGINE_OF_FAMILY.get(fam)
    if engine is not None:  # the kernel itself was timed: its own fit, measured or scaled
        p = predict_gpu(hw, engine, m, n, k, g)
        if p.basis != "roofline":
            how = ("fitted on this part's timings of it" if p.basis == "measured" else p.note)
            return replace(p, path="selected", kernel=runs,
                           note=f"{engine}: {how} (benchmarks/results/"
                                f"{(results_for(engine, hw.preset) or results_for(engine)).name})")
    roof = roofline_us(hw, "w4a8_native" if rt.computes.startswith("w4a8") else "w4a16_fallback", m, n, k, g)
    got = predict_family(hw, fam, m, n, k, g) if fam else None
    if got is None:
        return Prediction(platform, "selected", m, n, k, g, roof, roof, 3 * roof, "roofline", runs, roof,
                          f"no cost model for {rt.method} on this part: the roofline")
    us, lo, hi, eta = got
    if eta.measured:
        return Prediction(platform, "selected", m, n, k, g, us, lo, hi, "measured", runs, roof,
                          f"family {fam}, calibrated on this part's records of the kernel "
                          f"({eta.n_points} points)")
    where = (f"{eta.arch} points" if eta.arch != "all" else
             "points of other architectures (band widened by their spread)")
    return Prediction(platform, "selected", m, n, k, g, us, lo, hi, "published", runs, roof,
                      f"family {fam}, calibrated on published timings, {where} "
                      "(workbench/perf/published.json)")


# --------------------------------------------------------------------------- entry points


def _check(name: str, v, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
        raise InvalidInputError(f"{name} = {v!r}; accepted: an integer >= 1 and at most {hi}")
    return v


def check_shape(m: int, n: int, k: int, group_size: int) -> tuple[int, int, int, int]:
    """One GEMM call's M, N, K and group size as every cost here accepts them, or the named error."""
    m, n, k = _check("m", m, MAX_M), _check("n", n, MAX_DIM), _check("k", k, MAX_DIM)
    g = group_size
    if isinstance(g, bool) or not isinstance(g, int) or (g != -1 and (g < 1 or k % g)):
        raise InvalidInputError(f"group_size = {g!r}; accepted: -1 (per-channel) or a divisor of K = {k}")
    return m, n, k, g


@lru_cache(maxsize=1)
def _host_gpu() -> str | None:
    """This machine's GPU as its preset, or None: detected once (0.6 ms), not per cost."""
    from workbench.platforms import detect_host, preset_for_host

    return preset_for_host(detect_host())


def hardware_of(platform: str) -> Hardware | None:
    """The part a platform name is costed as, None for this machine's CPU (costed from its
    calibration). "host" is this machine's GPU where it has one (as its preset); "host-cpu"
    is its CPU always."""
    if platform in ("host", "host-cpu"):
        gpu = _host_gpu() if platform == "host" else None
        return None if gpu is None else hardware_for(gpu)
    return hardware_for(platform)


def predict(platform: str, path: str, m: int, n: int, k: int, group_size: int = -1) -> Prediction:
    """One prediction of an execution path (`PREDICTED_PATHS`; on CPUs also `CPU_ONLY_PATHS`).
    platform: a preset name (or alias), "host" or "host-cpu" (`hardware_of`). What vLLM selects
    is costed from its trace: `workbench.perf.selected.predict_selected`."""
    m, n, k, g = check_shape(m, n, k, group_size)
    if path == SELECTED:
        raise InvalidInputError(f"path {path!r} is what vLLM selects, decided by its trace: "
                                "workbench.perf.selected.predict_selected costs it; here accepted: "
                                f"{', '.join(PREDICTED_PATHS)}")
    if path in CPU_ONLY_PATHS:
        if platform not in ("host", "host-cpu") and hardware_for(platform).kind != "cpu":
            raise InvalidInputError(f"path {path!r} is this project's CPU dense GEMM; on {platform!r} "
                                    f"accepted: {', '.join(PREDICTED_PATHS)}")
    elif path not in PREDICTED_PATHS:
        raise InvalidInputError(f"path {path!r}; accepted: {', '.join(PREDICTED_PATHS)} (on CPUs also "
                                f"{', '.join(CPU_ONLY_PATHS)})")
    hw = hardware_of(platform)
    if hw is None:
        return _floored(predict_cpu(None, path, m, n, k, g, "host"), "cpu")
    if hw.kind == "cpu":  # the fitted variant a CPU path runs changes with M, and its band with it
        return _floored(_held(("path", hw.preset, path, n, k, g),
                              lambda mm: predict_cpu(hw, path, mm, n, k, g, hw.preset), m), "cpu")
    return _floored(_held(("path", hw.preset, path, n, k, g), lambda mm: predict_gpu(hw, path, mm, n, k, g), m),
                    hw.kind)


# The token counts a GPU curve is held at (`_held`): every M to 32, then steps no wider than
# the smallest tile height in that range, so every bucket, config-table and tile switch of the
# model (key_for's 16 / 128, the Triton tables' 8 to 1024, tiles of block_m 16 to 256) lies
# on it; between two of its points a curve is one launch shape, its time growing with the bytes.
_LADDER = tuple(sorted(set(range(1, 33)) | set(range(32, 1025, 16)) | set(range(1024, 8193, 64))
                       | set(range(8192, 32769, 256)) | set(range(32768, MAX_M + 1, 2048))))
_ENVELOPES: dict = {}


def _results_token() -> tuple:
    """The committed GPU results files' versions: a re-run bench is a new curve."""
    from workbench.perf.calibrate import ENGINE_RESULTS, H200_RESULTS, MACHETE_RESULTS

    out = []
    for f in (H200_RESULTS, ENGINE_RESULTS, MACHETE_RESULTS):
        try:
            st = f.stat()
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def _held(key: tuple, raw, m: int) -> Prediction:
    """raw(m), held at the highest cost (and band edges) raw gives at the ladder's token
    counts below m: a larger batch is never cheaper than a smaller one. The fits are per M
    bucket and per tile config, and a bucket fitted on large layers can put a small one below
    the bucket before it (a 256 x 1024 Machete call 20.4 us at M = 128, 2.3 us at M = 129):
    that is the model's artefact, not a kernel's, so the curve carries the smaller batch's cost."""
    import bisect

    p = raw(m)
    if p.predicted_us is None:
        return p
    key = key + (_results_token(),)
    env = _ENVELOPES.get(key)
    if env is None:
        if len(_ENVELOPES) > 4096:
            _ENVELOPES.clear()
        env = _ENVELOPES[key] = []  # per ladder point: (us, lo, hi, M it is held at, Prediction)
    upto = bisect.bisect_left(_LADDER, m)  # ladder points below m
    while len(env) < upto:
        q = raw(_LADDER[len(env)])
        prev = env[-1] if env else None
        if q.predicted_us is None:
            env.append(prev)
            continue
        if prev is None:
            env.append((q.predicted_us, q.low_us, q.high_us, q.m, q))
            continue
        us, lo, hi, at, src = prev
        if q.predicted_us >= us:
            at, src = q.m, q
        env.append((max(us, q.predicted_us), max(lo, q.low_us), max(hi, q.high_us), at, src))
    top = env[upto - 1] if upto else None
    if top is None or (top[0] <= p.predicted_us and top[1] <= p.low_us and top[2] <= p.high_us):
        return p
    us, lo, hi, at, src = top
    if us <= p.predicted_us:  # only a band edge is held
        return replace(p, low_us=max(lo, p.low_us), high_us=max(hi, p.high_us))
    held = (f"held at the cost at M = {at} ({us:.1f} µs against this M's own {p.predicted_us:.1f} µs): "
            "a larger batch is never cheaper than a smaller one")
    return replace(p, predicted_us=us, low_us=max(lo, p.low_us), high_us=max(hi, p.high_us), basis=src.basis,
                   note="; ".join(x for x in (p.note, held) if x))


def _floored(p: Prediction, kind: str) -> Prediction:
    """No call costs less than its fixed overhead (workbench/perf/cpu_classes.py says whose):
    the figure, its band and a roofline are held at the per-call floor, and the band always
    holds the figure."""
    from workbench.perf.cpu_classes import CPU_CALL_FLOOR_US, GPU_CALL_FLOOR_US

    if p.predicted_us is None:
        return p
    floor = CPU_CALL_FLOOR_US if kind == "cpu" else GPU_CALL_FLOOR_US
    us = max(p.predicted_us, floor)
    lo = min(max(p.low_us if p.low_us is not None else us, floor), us)
    hi = max(p.high_us if p.high_us is not None else us, us * (3.0 if p.basis == "roofline" else 1.0))
    roof = None if p.roofline_us is None else max(p.roofline_us, floor)
    return replace(p, predicted_us=us, low_us=lo, high_us=hi, roofline_us=roof)


def sweep_ms(lo: int = 1, hi: int = 16384) -> list[int]:
    """Token counts for a predicted curve: powers of two and the midpoints between them,
    so bucket switches (M = 16 / 17, 512 / 513 on the H200 tables) show as steps."""
    out, m = [], lo
    while m <= hi:
        out += [m] + ([m + m // 2] if m >= 2 and m + m // 2 <= hi else [])
        m *= 2
    return sorted(set(out))


def predicted_crossover(fast: Sequence[Prediction], slow: Sequence[Prediction]
                        ) -> tuple[int | None, int | None, int | None]:
    """(M, earliest, latest): the smallest M from which `fast` stays ahead of `slow`, by the
    predicted values and by the band's edges (fast at its low vs slow at its high, and the
    reverse)."""
    from workbench.sweeps import stays_ahead_from

    a = {p.m: p for p in fast if p.predicted_us}
    b = {p.m: p for p in slow if p.predicted_us}
    ms = sorted(set(a) & set(b))

    def cross(fa, fb):
        return stays_ahead_from([(m, getattr(b[m], fb) / getattr(a[m], fa)) for m in ms])

    return cross("predicted_us", "predicted_us"), cross("low_us", "high_us"), cross("high_us", "low_us")
