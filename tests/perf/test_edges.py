"""Every prediction at the edges of the accepted sizes is a positive figure inside its own
band, over every preset, alias and path; CPU presets are at least their roofline and never
cheaper at more tokens."""
from __future__ import annotations

import math

import pytest

from workbench.errors import WorkbenchError
from workbench.limits import MAX_DIM, MAX_M
from workbench.perf.cpu_classes import CPU_CALL_FLOOR_US, GPU_CALL_FLOOR_US
from workbench.perf.hardware import _doc, hardware_for
from workbench.perf.predict import CPU_ONLY_PATHS, PREDICTED_PATHS, SELECTED, predict, sweep_ms
from workbench.perf.selected import predict_paths, predict_selected
from workbench.platforms import ALIASES

EDGES = ((MAX_M, MAX_DIM, MAX_DIM), (1, 1, 1), (1, MAX_DIM, 1), (MAX_M, 1, 1), (1, 1, MAX_DIM), (MAX_M, 1, MAX_DIM))
PLATFORMS = sorted(set(_doc()["parts"]) | set(ALIASES))


def _predictions(platform: str):
    for path in PREDICTED_PATHS + (SELECTED,) + CPU_ONLY_PATHS:
        for m, n, k in EDGES:
            try:
                yield from predict_paths(platform, [path], [m], n, k, -1)
            except WorkbenchError:
                continue  # a path the platform has not, or a preset another module lacks


@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_edge_record_is_positive_and_inside_its_own_band(platform):
    seen = 0
    for p in _predictions(platform):
        if p.predicted_us is None:
            assert p.note  # no figure: says why
            continue
        seen += 1
        j = p.to_json()  # what the faces and exports print: rounded, still positive
        floor = CPU_CALL_FLOOR_US if hardware_for(platform).kind == "cpu" else GPU_CALL_FLOOR_US
        assert all(math.isfinite(j[f]) for f in ("predicted_us", "low_us", "high_us")), j
        assert floor <= j["low_us"] <= j["predicted_us"] <= j["high_us"], j
    assert seen


CPU_PRESETS = [p for p, d in _doc()["parts"].items() if d["kind"] == "cpu"]


@pytest.mark.parametrize("platform", CPU_PRESETS)
@pytest.mark.parametrize("path", ["w4a8_native", "w4a16_fallback", "selected"])
@pytest.mark.parametrize("n,k", [(256, 1024), (4096, 4096), (14336, 4096)])
def test_cpu_presets_are_at_least_their_roofline_and_monotone_in_m(platform, path, n, k):
    last = 0.0
    for p in predict_paths(platform, [path], sweep_ms(1, 4096), n, k, 128):
        if p.predicted_us is None:
            return  # vLLM refuses W4A8 there: nothing to cost
        if p.roofline_us is not None:
            assert p.predicted_us >= p.roofline_us * (1 - 1e-9), p
        assert p.predicted_us >= last * (1 - 1e-9), (p.m, p.predicted_us, last)
        last = p.predicted_us


def test_a_preset_of_another_cpu_class_says_so_and_widens_its_band():
    same = predict("x86-avx2", "w4a8_native", 16, 4096, 4096, 128)
    # (an AMX preset has its class's own committed calibration: tests/perf/test_cpu_model.py)
    other = predict("x86-avx512", "w4a8_native", 16, 4096, 4096, 128)
    assert same.basis == "scaled" and other.basis == "scaled across CPU classes"
    assert "avx2 to avx512" in other.note
    assert math.log(other.high_us / other.low_us) > math.log(same.high_us / same.low_us) + 0.9


def test_the_preset_isa_sets_the_speed_of_what_runs():
    # per core per cycle (n = k = 4096, M = 512: compute-bound), every preset scaled from the same
    # committed AVX2 results by its ISA's rates (an AMX preset is costed from its own class's
    # measured calibration in use: tests/perf/test_cpu_model.py): AMX's tiles beat AVX-512 VNNI,
    # which beats AVX2; bf16-native parts run the W4A16 fallback faster per cycle than AVX2's fp32
    from workbench.perf.cpu import committed_calibration
    from workbench.perf.predict import predict_cpu

    def per_cycle(preset, path):
        hw = hardware_for(preset)
        got = predict_cpu(hw, path, 512, 4096, 4096, 128, preset, cal=committed_calibration())
        return got.predicted_us * hw.units * hw.clock_mhz

    assert per_cycle("x86-spr-amx", "w4a8_native") < per_cycle("x86-avx512", "w4a8_native") \
        < per_cycle("x86-avx2", "w4a8_native")
    assert per_cycle("x86-avx512", "w4a16_fallback") < per_cycle("x86-avx2", "w4a16_fallback")


@pytest.mark.parametrize("platform", ["x86-avx2", "x86-avx512", "x86-spr-amx", "zen4-zentorch"])
def test_the_reference_dynamic4bit_loop_is_slower_than_the_native_engine_at_every_m(platform):
    """vLLM's x86 Dynamic4bit runs torch's generic loop (the trace says "very slow"): its cost
    is modelled in fp32 from the part's ISA, never below this project's int8 engine."""
    for m in (1, 16, 256, 4096):
        for n, k in ((256, 1024), (4096, 4096)):
            sel = predict_selected(platform, m, n, k, 128)
            assert sel.kernel.startswith("Dynamic4bitLinearKernel")
            assert sel.predicted_us > predict(platform, "w4a8_native", m, n, k, 128).predicted_us, (m, n, k)


def test_a_roofline_figure_reads_as_a_bound_with_no_band_and_no_ratio():
    from workbench.perf.wording import band_text, ratio_text, time_text

    p = predict("rocm-mi300x", "w4a8_native", 1, 4096, 4096, 128)
    assert p.basis == "roofline"
    assert time_text(p.predicted_us, p.basis) == f"at least {p.predicted_us:.1f} µs (roofline)"
    assert band_text(p.low_us, p.high_us, p.basis) == "-"
    assert ratio_text(p.predicted_us, p.basis, 10.0, "measured", "the native time") is None
    assert ratio_text(6.6, "published", 10.0, "measured", "the native time") == "0.66x the native time"
