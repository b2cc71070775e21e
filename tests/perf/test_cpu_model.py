"""The CPU cost model follows what the CPU kernels run: the W4A8 engine per M, the
fallback's fastest variant per M, the dense path; its cache is keyed by what makes it stale."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from workbench.errors import InvalidInputError
from workbench.perf import predict
from workbench.perf.cpu import (HostCalibration, LinearFit, Sample, _from_json, host_key,
                                engine_steps, features, fit_host, measure_host, plan_for)
from workbench.perf.predict import predict_cpu

THR = {"stream_gbs": 10.0, "fp32_tflops": 0.1, "bf16_tflops": 0.2, "int8_tops": 0.4}


def _fit(*coef):
    return LinearFit(tuple(float(c) for c in coef), 9, 0.01, -0.02, 0.02)


def _cal(fits, steps=()):
    return HostCalibration("t", 1, 1, 1, 1, 2, 0, fits, {}, steps)


def test_engine_steps_are_what_the_prepared_weight_runs():
    from w4a8_kernels.registry import get_path
    from workbench.bench import int4_weight_of, synthetic_bench_layer

    steps = engine_steps()
    assert steps[0][0] == 1
    prepared = get_path("w4a8_native").prepare(int4_weight_of(synthetic_bench_layer(1024, 1024, 128)))
    cal = _cal({}, steps)
    for m in sorted({1, 2, 15, 16, 31, 32, 33, 64, 500, 4096, 70000} | {s[0] for s in steps}
                    | {s[0] - 1 for s in steps if s[0] > 1}):
        assert cal.engine_for(m) == prepared.engine_for(m).value, m


def test_w4a8_is_predicted_by_the_fit_of_the_engine_that_runs_at_that_m():
    small, large = _fit(10, 0, 1e-6, 0, 0), _fit(50, 0, 1e-7, 0, 0)
    cal = _cal({"w4a8_native@u4_vnni512": small, "w4a8_native@u4_amx": large,
                "w4a8_native": _fit(1, 0, 0, 0, 0)}, ((1, "u4_vnni512"), (32, "u4_amx")))
    for m, fit in ((1, small), (31, small), (32, large), (4000, large)):
        us, used = cal.predict("w4a8_native", m, 1024, 2048)
        assert used is fit and us == pytest.approx(fit.predict(m, 1024, 2048))
    p = predict_cpu(None, "w4a8_native", 40, 1024, 2048, 128, "host", cal=cal)
    assert p.kernel.endswith("u4_amx") and p.low_us <= p.predicted_us <= p.high_us
    # no engine known (results that recorded none): the pooled fit
    assert _cal(cal.fits).predict("w4a8_native", 40, 1024, 2048)[1].coef[0] == 1


def test_the_fallback_is_its_fastest_variant_per_m_and_the_whole_path_where_only_that_ran():
    tiny = _fit(0, 0, 4e-6, 0, 0)  # grows with M fastest
    deq = _fit(3000, 1e-4, 5e-7, 0, 0)  # a dequantization per call, then a cheap GEMM
    cal = _cal({"w4a16_tinygemm": tiny, "w4a16_dequant_bf16": deq})
    n = k = 4096
    assert cal.predict("w4a16_fallback", 1, n, k)[1] is tiny
    assert cal.predict("w4a16_fallback", 512, n, k)[1] is deq
    whole = _fit(7, 0, 0, 0, 0)
    assert _cal({"w4a16_fallback": whole}).predict("w4a16_fallback", 9, n, k)[1] is whole


def test_fit_host_recovers_each_path_from_samples_of_a_known_model():
    truth = {"w4a8_native@u4_vnni512": (20, 2e-5, 1e-6, 0, 0), "w4a8_native@u4_amx": (80, 3e-5, 2e-7, 0, 0),
             "dense": (5, 1e-4, 3e-7, 1e-4, 1e-4)}
    samples = [Sample(p, n, k, m, float(features(m, n, k) @ np.array(c)), 1)
               for p, c in truth.items() for n, k in ((2048, 4096), (4096, 2048), (3072, 3072))
               for m in ((1, 4, 16) if p.endswith("vnni512") else (32, 64, 128))]
    cal = fit_host(samples, "k", THR, 2, 0.0, {}, ((1, "u4_vnni512"), (32, "u4_amx")))
    for p, c in truth.items():
        for m, n, k in ((2, 5120, 2560), (100, 5120, 2560)):
            want = float(features(m, n, k) @ np.array(c))
            assert cal.fits[p].predict(m, n, k) == pytest.approx(want, rel=0.05)
    assert "w4a8_native" in cal.fits  # pooled, for callers without an engine
    assert cal.key == "k"  # the machine's key, which names its cache file (not a path's name)
    assert _from_json(json.loads(json.dumps(cal.to_json()))) == cal  # the cache reads back what it wrote


def test_measure_host_interleaves_rounds_and_keys_w4a8_by_engine():
    steps = engine_steps()
    rounds = []
    plan = plan_for([(256, 512), (512, 256)], (1, 40), ("w4a8_native", "dense"))
    got = measure_host(plan, rounds=2, steps=steps, on_round=lambda r, s: rounds.append(r))
    assert rounds == [0, 1]
    assert {(s.n, s.k) for s in got} == {(256, 512), (512, 256)}
    assert all(s.rounds == 2 and s.us > 0 for s in got)
    engines = {s.m: s.path for s in got if s.path.startswith("w4a8_native@")}
    cal = _cal({}, steps)
    assert engines == {m: f"w4a8_native@{cal.engine_for(m)}" for m in (1, 40)}


def test_the_cache_key_follows_the_thread_count(monkeypatch):
    import sys

    if "torch" in sys.modules:  # torch's own count is the one a calibration runs with
        import torch

        before = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            one = host_key()
            torch.set_num_threads(3)
            assert host_key() != one
        finally:
            torch.set_num_threads(before)
        return
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one = host_key()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert host_key() != one


def test_dense_is_a_cpu_path_only():
    with pytest.raises(InvalidInputError, match="CPU dense GEMM"):
        predict("sm90-h200", "dense", 1, 4096, 4096, 128)


def test_one_host_prediction_takes_under_50_ms():
    cal = _cal({"w4a8_native@u4_vnni512": _fit(1, 1e-6, 1e-7, 0, 0)}, ((1, "u4_vnni512"),))
    predict_cpu(None, "w4a8_native", 3, 4096, 4096, 128, "host", cal=cal)
    t = time.perf_counter()
    for m in (3, 77, 700):
        predict_cpu(None, "w4a8_native", m, 5120, 13824, 128, "host", cal=cal)
    assert (time.perf_counter() - t) / 3 < 0.05


def test_validate_perf_refuses_cpu_only_with_skip_host():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "validate_perf.py"
    r = subprocess.run([sys.executable, str(script), "--cpu-only", "--skip-host"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "--cpu-only and --skip-host leave nothing to run" in r.stderr


def _cal_of_spread(lo, hi):
    samples = [Sample("dense", n, k, m, float(features(m, n, k) @ np.array((5, 1e-4, 3e-7, 0, 0))), 1)
               for n, k in ((2048, 4096), (4096, 2048), (3072, 3072)) for m in (1, 16, 128)]
    cal = fit_host(samples, "k", THR, 2, 0.0, {}, ())
    f = cal.fits["dense"]
    return HostCalibration("k", 1, 1, 1, 1, 2, 0, {"dense": LinearFit(f.coef, f.n_points, f.rms_log, lo, hi)}, {})


def test_a_wide_recalibration_is_measured_again_and_warned_about():
    from workbench.perf.cpu import WIDE_SPREAD, CalibrationSpreadWarning, calibrated_with_retries, spread_of

    runs = iter([_cal_of_spread(-3.0, 3.0), _cal_of_spread(-0.1, 0.1)])  # a busy run, then a quiet one
    cal = calibrated_with_retries(lambda: next(runs))
    assert spread_of(cal)[0] <= WIDE_SPREAD and cal.provenance["spread"]["attempts"] == 2
    always_wide = [_cal_of_spread(-2.0, 2.0 + i) for i in range(3)]
    runs = iter(always_wide)
    with pytest.warns(CalibrationSpreadWarning, match="dense fit's band spans 55x after 3 attempts"):
        cal = calibrated_with_retries(lambda: next(runs))
    assert cal is always_wide[0]  # the narrowest of the three is kept


def test_an_amx_preset_is_costed_from_the_amx_class_own_committed_calibration():
    """x86-spr-amx is scaled from the calibration measured on an AMX part (its engine
    switch included), not from the AVX2 results across classes; another class still is."""
    from workbench.perf.cpu import CLASS_CALIBRATIONS, class_calibration
    from workbench.perf.hardware import hardware_for
    from workbench.perf.predict import predict_cpu

    cal = class_calibration("amx")
    assert cal is not None, f"the committed AMX calibration ({CLASS_CALIBRATIONS['amx'][0]}) does not load"
    assert cal.key == "committed-amx" and "amx_int8" in cal.provenance["isa"]
    assert cal.provenance["native_engines"]["u4_amx"].startswith("admitted")
    assert class_calibration("rvv") is None
    amx = predict_cpu(hardware_for("x86-spr-amx"), "w4a8_native", 128, 4096, 4096, 128, "x86-spr-amx")
    assert amx.basis == "scaled" and "committed amx results" in amx.note, amx
    assert amx.kernel == f"cpu int8 engine {cal.engine_for(128)}"
    other = predict_cpu(hardware_for("x86-avx512"), "w4a8_native", 128, 4096, 4096, 128, "x86-avx512")
    assert other.basis == "scaled across CPU classes", other


def test_floors_are_measured_by_size_and_m_and_never_fall():
    """A layer takes the floor of the smallest floor layer at least its size (torch switches
    kernels just above 64 x 64), at the largest calibrated M up to its M; a size's floor at M
    is the least time of any M at or above it (a slow outlier lifts nothing); a larger layer
    or more tokens never get a smaller floor."""
    from workbench.perf.cpu import Floors

    f = Floors.measured({(64, 64): {1: 4.0, 4: 22.0, 16: 21.0, 128: 29.0},
                         (128, 128): {1: 80.0, 4: 23.0, 16: 30.0, 128: 28.0}})
    assert f.at(1, 64, 64) == 4.0 and f.at(8, 64, 64) == 21.0 and f.at(16, 64, 64) == 21.0
    assert f.at(1, 96, 160) == 23.0  # 15360 elements: the 128 x 128 floor's (its M = 1 outlier left out)
    assert f.at(64, 4096, 4096) == 28.0 and f.at(128, 4096, 4096) == 29.0  # held to 64 x 64's at M = 128
    for m in (1, 2, 4, 8, 16, 64, 128, 512):
        assert f.at(m, 64, 64) <= f.at(m, 96, 160) <= f.at(m, 4096, 4096)
        assert f.at(m, 4096, 4096) <= f.at(2 * m, 4096, 4096)
    samples = [Sample("dense", n, k, m, us, 1) for (n, k), row in
               (((64, 64), {1: 4.0, 4: 22.0}), ((128, 128), {1: 20.0, 4: 23.0})) for m, us in row.items()]
    samples += [Sample("dense", n, k, m, 20.0 + 1e-5 * n * k + 1e-7 * m * n * k, 1)
                for n, k in ((2048, 2048), (4096, 2048), (3072, 6144)) for m in (1, 4, 16)]
    cal = fit_host(samples, "k", THR, 2, 0.0, {}, ())
    fit = cal.fits["dense"]
    # layers no larger than the largest floor layer are read off the floor layers (timed whole):
    # 96 x 160 lies 11/12 of the way from 64 x 64's 4 us to 128 x 128's 20 us
    assert fit.predict(1, 64, 64) == 4.0 and fit.predict(4, 128, 128) == 23.0
    assert fit.predict(1, 96, 160) == pytest.approx(4.0 + 16.0 * (15360 - 4096) / (16384 - 4096))
    assert fit.predict(1, 128, 129) > fit.predict(1, 128, 128)  # past them: the floor and the streamed terms
    assert fit.predict(4, 5120, 2560) == pytest.approx(23.0 + 1e-5 * 5120 * 2560 + 4e-7 * 5120 * 2560, rel=0.05)
    assert _from_json(json.loads(json.dumps(cal.to_json()))) == cal
