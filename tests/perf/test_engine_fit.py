"""The kernel vLLM selects on CUDA (Humming) is costed from its own H200 timings.

benchmarks/h200_engines.sh timed Humming beside this project's kernels; `selected` on the
H200 reads that fit (basis "measured"), on other CUDA parts the same fit scaled.
"""
from __future__ import annotations

import math
import statistics

import pytest

from workbench.perf.calibrate import ENGINE_FILES, ENGINE_RESULTS, MACHETE_RESULTS, calibrate_gpu
from workbench.perf.hardware import hardware_for
from workbench.perf.predict import predict, predict_gpu
from workbench.perf.selected import predict_selected
from workbench.results import load_results

HUMMING = ENGINE_FILES[ENGINE_RESULTS.name]
RECORDS = [r for r in load_results(ENGINE_RESULTS).records if r.path in HUMMING]


def test_the_engine_records_cover_decode_to_prefill_on_many_shapes():
    shapes = {(r.n, r.k) for r in RECORDS}
    assert len(shapes) >= 10 and {r.m for r in RECORDS} >= {1, 16, 64, 256, 1024, 4096}
    assert {r.path for r in RECORDS} == set(HUMMING)


def test_the_fit_follows_humming_on_every_record():
    cal = calibrate_gpu(ENGINE_RESULTS)
    hw = hardware_for("sm90-h200")
    errs, inside = [], 0
    for r in RECORDS:
        p = predict_gpu(hw, r.path, r.m, r.n, r.k, r.group_size)
        assert p.basis == "measured", p
        assert p.predicted_us == pytest.approx(cal.predict(r.path, r.m, r.n, r.k, r.group_size), rel=1e-9)
        errs.append(abs(p.predicted_us / r.median_us - 1))
        inside += p.low_us <= r.median_us <= p.high_us
    assert statistics.median(errs) < 0.08 and sorted(errs)[int(0.9 * len(errs))] < 0.2
    assert inside / len(RECORDS) >= 0.9


def test_selected_humming_is_costed_from_its_fit():
    # A g128 W4A8-int layer on the H200: vLLM's input-schema check runs it with bf16
    # activations (schema.py:354-357), so it costs the Humming W4A16 fit, measured.
    hw = hardware_for("sm90-h200")
    for m in (1, 64, 1024):
        sel = predict_selected("sm90-h200", m, 8192, 8192, 128, scheme="w4a8-int")
        assert "HummingLinearKernel" in sel.kernel and sel.basis == "measured", sel
        assert sel.predicted_us == pytest.approx(predict_gpu(hw, "vllm_humming", m, 8192, 8192, 128).predicted_us)
    # int8 activations (per-channel weights) are faster than bf16 once compute-bound: 0.57 at M = 1024
    i8, bf = (predict_gpu(hw, p, 1024, 8192, 8192, -1).predicted_us for p in HUMMING[::-1])
    assert i8 < 0.8 * bf


def test_each_hopper_part_is_costed_from_its_own_timings():
    h200 = predict_selected("sm90-h200", 1, 28672, 8192, 128, scheme="w4a8-int")
    h100 = predict_selected("sm90-h100", 1, 28672, 8192, 128, scheme="w4a8-int")
    assert h100.basis == "measured" and "Humming" in h100.kernel and "h100_bench.json" in h100.note, h100
    # decode streams the weight: the H100 is slower, by about its measured copy rate (2440
    # against 2715-2774 GB/s read + write), far less than its datasheet (3.35 against 4.8 TB/s)
    assert 1.0 < h100.predicted_us / h200.predicted_us < 1.3
    from workbench.errors import InvalidInputError
    from workbench.perf.calibrate import H100_RESULTS

    with pytest.raises(InvalidInputError, match="measured on sm90-h100; it cannot calibrate sm90-h200"):
        calibrate_gpu(H100_RESULTS, platform="sm90-h200")


def test_an_m_bucket_a_part_never_timed_is_scaled_from_the_h200():
    """The H100's file times cuBLAS int8 at M = 128 and up only: below M = 65 (the bucket where
    its kernels are flat in M) it is costed as an unmeasured part is, from the H200's fit, never
    by the roofline; from M = 65 by its own records."""
    hw = hardware_for("sm90-h100")
    small = predict_gpu(hw, "int8_mm", 32, 4096, 4096, -1)
    own = predict_gpu(hw, "int8_mm", 128, 4096, 4096, -1)
    assert small.basis == "scaled" and "fitted on sm90-h200" in small.note, small
    assert own.basis == "measured", own
    # the H100 times 4096 x 4096 at M = 128 at 11.6 us; both buckets land near it
    assert 0.7 < small.predicted_us / own.predicted_us < 1.3


def test_a_library_tile_is_the_one_that_carries_to_held_out_shapes():
    """cuBLAS has no tiling to read: the tile of each fit is chosen by its error on shapes left
    out of the fit (WaveFit.held_rms), not by its residual on the shapes it was fitted on."""
    from workbench.perf.calibrate import H200_RESULTS, _LIB_TILES, point_for, records_of
    from workbench.perf.fit import fit_waves

    cal = calibrate_gpu(H200_RESULTS)
    hw = hardware_for("sm90-h200")
    recs = [r for r in records_of(load_results(H200_RESULTS), ("int8_mm",)) if r.m <= 64]
    scores = {}
    for tile in _LIB_TILES:
        pts = [point_for("int8_mm", r.m, r.n, r.k, -1, hw.units, r.median_us, tile) for r in recs]
        scores[tile] = fit_waves(pts, hw.units, hw.mem_gbs * 1e3, groups=[(r.n, r.k) for r in recs]).held_rms
    assert cal.tiles[("int8_mm", "small")] == min(scores, key=scores.get)
    assert cal.fits[("int8_mm", "small")].held_rms == pytest.approx(min(scores.values()))


def test_a_part_scaled_from_another_reads_their_measured_copy_rates(monkeypatch):
    import sys

    from workbench.perf import calibrate

    predict_mod = sys.modules["workbench.perf.predict"]  # the package's `predict` is the function

    monkeypatch.setitem(calibrate.PART_FILES, "sm90-h100", ())  # the H100 unmeasured
    h100 = predict_gpu(hardware_for("sm90-h100"), "vllm_humming", 1, 28672, 8192, 128)
    assert h100.basis == "scaled" and "measured copy rates" not in h100.note  # datasheets only
    rates = {"sm90-h100": 2440.0, "sm90-h200": 2715.0}
    monkeypatch.setattr(predict_mod, "copy_gbs", rates.get)  # both parts' rates measured
    measured = predict_gpu(hardware_for("sm90-h100"), "vllm_humming", 1, 28672, 8192, 128)
    assert measured.basis == "scaled" and "measured copy rates" in measured.note, measured
    # a decode call streams its weight: the measured ratio (1.11) replaces the datasheet's (1.43)
    assert measured.predicted_us < h100.predicted_us


def test_the_crossover_a_vllm_user_gets_compares_the_two_checkpoints_as_vllm_loads_them():
    from workbench.perf.selected import what_vllm_runs

    ms = [1, 16, 256, 4096]
    c = what_vllm_runs("sm90-h200", ms, 8192, 8192, 128)
    assert [p.m for p in c.w4a8] == ms and {p.path for p in c.predictions} == {
        "vLLM, W4A8-int checkpoint", "vLLM, W4A16 checkpoint"}
    # each side is what `selected` costs for its scheme, the kernel vLLM picks named
    for p, scheme in ((c.w4a8[1], "w4a8-int"), (c.w4a16[1], "w4a16")):
        sel = predict_selected("sm90-h200", 16, 8192, 8192, 128, scheme=scheme)
        assert (p.predicted_us, p.kernel) == (sel.predicted_us, sel.kernel)
    assert c.crossover is not None and len(c.crossover) == 3
    # where the W4A8 checkpoint has no kernel (vLLM refuses it), there is no crossover to draw
    mi = what_vllm_runs("rocm-mi300x", ms, 8192, 8192, 128)
    assert mi.crossover is None and mi.w4a8[0].predicted_us is None


MACHETE = [r for r in load_results(MACHETE_RESULTS).records if r.path == "vllm_machete"]


def test_machete_was_timed_as_vllm_builds_it_beside_humming():
    # vLLM's own Machete templates, built from its sdist (benchmarks/build_machete.sh), on the H200
    prov = load_results(MACHETE_RESULTS).provenance
    assert "vllm_machete" in prov["engines"] and prov["gpu"] == "NVIDIA H200"
    # Llama-3-70B-sized shapes, Llama-3-8B's MLP at TP 2 (7168 x 4096, 4096 x 7168) and TP 8
    assert {(r.n, r.k) for r in MACHETE} >= {(4096, 4096), (8192, 8192), (28672, 8192), (7168, 4096),
                                              (4096, 7168), (1792, 4096)}
    assert {r.m for r in MACHETE} >= {1, 16, 128, 1024, 4096} and {r.group_size for r in MACHETE} == {-1, 64, 128}
    # N = 2112 (DeepSeek-V3) is refused by Machete (N % 128): Humming was timed there, Machete not
    assert (2112, 7168) not in {(r.n, r.k) for r in MACHETE}


def test_selected_machete_is_costed_from_its_own_timings():
    # A pack-quantized W4A16 layer on the H200 (g128, g64 or per-channel): vLLM picks Machete,
    # costed from its fit, within its band of every timing of it.
    for r in MACHETE:
        sel = predict_selected("sm90-h200", r.m, r.n, r.k, r.group_size, scheme="w4a16")
        assert "MacheteLinearKernel" in sel.kernel and sel.basis == "measured", sel
        assert "h200_machete_bench.json" in sel.note
        assert sel.low_us <= r.median_us <= sel.high_us, (r, sel)
