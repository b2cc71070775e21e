"""The performance model: launch geometry as the kernels compute it, fits that recover what
made their data, predictions for every preset with a band and a basis, and speed."""
import json
import math
import time
from dataclasses import replace

import numpy as np
import pytest
import torch

from workbench.perf import BASES, predict
from workbench.perf.selected import predict_paths, predict_selected
from workbench.perf.calibrate import H200_RESULTS, calibrate_gpu
from workbench.perf.fit import Point, WaveFit, fit_waves
from workbench.perf.hardware import hardware_for
from workbench.perf.launch import _packed, _split, triton_config
from workbench.platforms import PRESETS
from workbench.results import load_results

FOUR = ("w4a8_native", "w4a16_fallback", "bf16_dense", "int8_mm")


@pytest.mark.parametrize("kernel", ["w4a8", "w4a16"])
@pytest.mark.parametrize("m,n,k,g", [(1, 4096, 4096, -1), (3, 2112, 704, 32), (16, 256, 14784, 64),
                                     (600, 28672, 8192, 128)])
def test_split_k_is_the_kernels_own(kernel, m, n, k, g):
    from w4a8_kernels.triton_runtime import resolve_split_k

    cfg = triton_config(kernel, m, n, k, g)
    steps = _packed(n, k, g).half_k // cfg.block_k
    # On a CPU device the kernels fill 4 "multiprocessors" (triton_runtime.sm_count).
    assert _split(cfg, m, n, steps, 4) == resolve_split_k(cfg, m, n, steps, torch.device("cpu"))


def test_fit_recovers_the_model_that_made_its_points():
    truth = WaveFit(t0=3.0, a=1.0, b=2e-3, d=0.2, bw=3e6, occupancy=2, alpha=0.6, sms=132, n_points=0,
                    rms_log=0.0)
    rng = np.random.default_rng(0)
    pts, shapes = [], []
    for n, k in ((4096, 4096), (8192, 8192), (4096, 14336), (28672, 8192), (6144, 2048)):
        for m in (1, 64, 512, 4096):
            programs = -(-m // 64) * -(-n // 128)
            p = Point(programs, 2, k, k / 256, n * k / 2 + m * k * 2, 0.0)
            pts.append(replace(p, us=truth.predict(p) * math.exp(rng.normal(0, 0.01))))
            shapes.append((n, k))
    fit = fit_waves(pts, 132, 4.8e6, groups=shapes)
    errs = [abs(fit.predict(p) / truth.predict(p) - 1) for p in pts]
    assert max(errs) < 0.08 and fit.rms_log < 0.05


def test_h200_calibration_reads_the_results_file_and_fits_its_records():
    cal = calibrate_gpu()
    res = load_results(H200_RESULTS)
    errs = []
    for r in res.records:
        if r.path in FOUR:
            us = cal.predict(r.path, r.m, r.n, r.k, r.group_size)
            errs.append(abs(us / r.median_us - 1))
    assert len(errs) > 300 and float(np.median(errs)) < 0.06, np.median(errs)


def test_waves_make_steps_and_large_m_scales_linearly():
    # One more tile row than fills the SMs costs a wave: the time steps, a roofline would not.
    cal = calibrate_gpu()
    fit = next(f for k, f in cal.fits.items() if k[:2] == ("w4a16_fallback", "channel") and f.b > 0)
    one = Point(programs=132, programs_per_sm=1, k_per_program=8192, steps=64, nbytes=1e6, us=0)
    two = replace(one, programs=133)
    assert fit.predict(two) > fit.predict(one) * 1.2 or fit.occupancy > 1
    a = predict("sm90-h200", "w4a8_native", 8192, 8192, 8192, -1).predicted_us
    b = predict("sm90-h200", "w4a8_native", 16384, 8192, 8192, -1).predicted_us
    assert 1.8 < b / a < 2.2


@pytest.mark.parametrize("platform", [p for p in PRESETS if PRESETS[p].device != "cpu"])
def test_every_gpu_preset_predicts_each_path_with_a_band(platform):
    for p in predict_paths(platform, FOUR + ("selected",), [64], 4096, 4096, 128):
        assert p.basis in BASES
        if p.predicted_us is None:  # vLLM refuses the layer there: said so
            assert p.path == "selected" and "cannot run" in p.note
            continue
        assert 0 < p.low_us <= p.predicted_us <= p.high_us, p


def test_basis_says_what_the_prediction_rests_on():
    assert predict("sm90-h200", "w4a8_native", 16, 4096, 4096, -1).basis == "measured"
    assert predict("sm80-a100", "w4a8_native", 16, 4096, 4096, -1).basis == "scaled"
    assert predict("rocm-mi300x", "bf16_dense", 16, 4096, 4096, -1).basis == "roofline"
    # Humming and Machete (vLLM's W4A16 pick on Hopper) were timed on the H200
    # (benchmarks/h200_engines.sh, h200_machete.sh): their own fits there, per-channel included;
    # CUTLASS W4A8 (the W4A8-FP8 pick) was not: published timings.
    sel = predict_selected("sm90-h200", 16, 4096, 4096, 128)
    assert sel.basis == "measured" and sel.kernel.startswith("HummingLinearKernel")
    machete = predict_selected("sm90-h200", 16, 4096, 4096, 128, scheme="w4a16")
    assert machete.basis == "measured" and machete.kernel.startswith("MacheteLinearKernel")
    channel = predict_selected("sm90-h200", 16, 4096, 4096, -1, scheme="w4a16")
    assert channel.basis == "measured" and channel.kernel.startswith("MacheteLinearKernel")
    fp8 = predict_selected("sm90-h200", 16, 4096, 4096, 128, scheme="w4a8-fp8")
    assert fp8.basis == "published" and fp8.kernel.startswith("CutlassW4A8LinearKernel")


def test_one_prediction_takes_under_50_ms():
    predict("sm90-h200", "w4a8_native", 5, 4096, 4096, 128)  # calibration and imports
    t = time.perf_counter()
    for m in (3, 77, 700):
        predict("sm90-h200", "w4a8_native", m, 5120, 13824, 128)
    assert (time.perf_counter() - t) / 3 < 0.05


def test_hardware_data_covers_every_preset_with_sources():
    for name in PRESETS:
        hw = hardware_for(name)
        assert hw.source.startswith("https://") and hw.mem_gbs > 0 and hw.units > 0
        assert hw.peak("int8") or hw.peak("bf16")
    raw = json.loads((H200_RESULTS.parents[2] / "workbench" / "perf" / "hardware.json").read_text())
    assert raw["schema"].startswith("w4a8-workbench-hardware/")
