"""Where a weight streams from (DRAM or the L2), per-part dense rates read from published
points with the point under check held out, and the published-figures check they give
(workbench/perf/regime.py, families.dense_rate, predict.predict_dense)."""
import json
from dataclasses import replace

import pytest

from workbench.perf.families import point_us, published_points
from workbench.perf.hardware import HARDWARE_FILE, hardware_for
from workbench.perf.predict import predict, predict_dense, regime_of_point
from workbench.perf.regime import Regime, regime_for


def _point(source_tail: str, n: int, k: int, m: int) -> dict:
    return next(p for p in published_points() if p["source"].endswith(source_tail)
                and (p["n"], p["k"], p["m"]) == (n, k, m))


def _held(hw, source):
    """The part without the sustained rates read from `source` (as the check holds them out)."""
    own = {t for t, link in (hw.sustained.get("links") or {}).items() if link == source}
    return replace(hw, sustained={t: v for t, v in hw.sustained.items() if t not in own})


def test_every_l2_bandwidth_says_whether_it_is_published_or_derived():
    for preset, d in json.loads(HARDWARE_FILE.read_text())["parts"].items():
        if "l2_gbs" not in d:
            continue
        assert d["l2_gbs"] > d["mem_gbs"], preset  # the L2 outruns the part's DRAM
        src = d["l2_source"]
        assert src.startswith("derived:") or "B/clk" in src, preset
        assert "http" in src, preset
    a100 = hardware_for("sm80-a100")
    assert a100.l2_gbs == pytest.approx(5120 * 1410 / 1e3)  # the whitepaper's bytes per clock


def test_the_regime_is_the_benchmarks_condition_never_its_time():
    l40s = hardware_for("sm89-l40s")
    assert regime_for(l40s, True, 50e6) is Regime.L2
    assert regime_for(l40s, True, 120e6) is Regime.DRAM  # larger than the 96 MB L2
    assert regime_for(l40s, False, 50e6) is Regime.DRAM  # copies rotate
    assert regime_for(l40s, None, 50e6) is Regime.DRAM  # the source does not say
    assert regime_for(hardware_for("rocm-mi300x"), True, 50e6) is Regime.DRAM  # no L2 figure
    # triton's do_bench zeroes 256 MB before every timed call: sglang PR 2752 reads DRAM
    sglang = _point("sglang/pull/2752", 4096, 8192, 1)
    assert sglang["weight_reused"] is False
    assert regime_of_point(sglang, hardware_for("sm80-a100")) is Regime.DRAM
    assert regime_of_point(_point("vllm/pull/6848", 12288, 4096, 1), l40s) is Regime.L2


def test_an_l2_resident_benchmark_point_is_predicted_within_its_band():
    # vLLM PR 6848: 50 MB of int8 weight re-read on an L40S (96 MB L2), 15.4 us, 3.4x under
    # the DRAM roofline; held out of every efficiency and rate it could inform
    p = _point("vllm/pull/6848", 12288, 4096, 1)
    l40s = hardware_for("sm89-l40s")
    meas = point_us(p, None)
    got = predict_dense(l40s, "dense_int8", 1, 12288, 4096, exclude=p, regime=regime_of_point(p, l40s))
    assert got.low_us <= meas <= got.high_us
    assert abs(got.predicted_us / meas - 1) <= 0.35
    assert "from the L2" in got.note
    # a user's forward of the same layer keeps the DRAM regime, and says so
    fwd = predict("sm89-l40s", "int8_mm", 1, 12288, 4096)
    assert "from DRAM" in fwd.note and fwd.predicted_us > 2.5 * got.predicted_us


def test_a100_int8_with_its_own_rate_held_out_follows_amperes_other_points():
    # sglang PR 2752's vLLM CUTLASS int8 GEMM at M = 1, memory-bound: the A100's int8 figure
    # came from this very table, so it is held out, and the point itself too
    src = "https://github.com/sgl-project/sglang/pull/2752"
    p = _point("sglang/pull/2752", 8192, 21760, 1)
    a100 = _held(hardware_for("sm80-a100"), src)
    h200 = _held(hardware_for("sm90-h200"), src)
    assert a100.sustained_rate("int8") is None
    meas = point_us(p, None)
    got = predict_dense(a100, "dense_int8", 1, 8192, 21760, src=h200, exclude=p, regime=regime_of_point(p, a100))
    assert abs(got.predicted_us / meas - 1) <= 0.12 and got.low_us <= meas <= got.high_us
    assert "ampere" in got.note
    # compute-bound, M = 2048: the rate comes from the table's other rows, not its own
    big = _point("sglang/pull/2752", 8192, 21760, 2048)
    got = predict_dense(a100, "dense_int8", 2048, 8192, 21760, src=h200, exclude=big)
    assert abs(got.predicted_us / point_us(big, None) - 1) <= 0.25


def test_no_point_informs_its_own_rate():
    from workbench.perf.families import dense_rate
    from workbench.perf.predict import _implied_rates

    pts, implied = published_points(), list(_implied_rates())
    i = next(i for i, p in enumerate(pts) if p["source"].endswith("sglang/pull/2752") and p["m"] == 1024
             and p["n"] == 8192)
    assert implied[i] is not None
    a100 = _held(hardware_for("sm80-a100"), pts[i]["source"])
    before = dense_rate(a100, "int8", tuple(implied), exclude=pts[i])
    implied[i] *= 10  # whatever the point says, its own estimate is the same
    after = dense_rate(a100, "int8", tuple(implied), exclude=pts[i])
    assert before == after and before.scope == "part"
    assert dense_rate(a100, "int8", tuple(implied)).eff > after.eff  # it counts once not excluded



def test_the_published_check_meets_its_goal(validate_perf):
    # Every costed point, each held out of its own family's calibration and of every rate
    # read from points: the goal, median <= 0.12, p90 <= 0.35, band >= 80%
    pub = validate_perf.published_table()
    assert pub["n_costed"] >= 160 and len(pub["parts"]) >= 8
    assert pub["median_abs_err"] <= 0.12 and pub["p90_abs_err"] <= 0.35 and pub["band_coverage"] >= 0.8
    assert all(r["regime"] in ("dram", "l2") for r in pub["rows"])
