"""Machete's cost from the schedule vLLM picks (workbench/perf/machete_cost.py)."""
from __future__ import annotations

import math

import pytest

from w4a8_kernels.machete_schedule import machete_schedule
from workbench.perf.fit import WaveFit
from workbench.perf.machete_cost import K_STEP, MIN_UNIT_STEPS, fit_machete, machete_point


def test_a_point_counts_the_picked_schedules_tiles_over_the_sms():
    # M = 1: 128 x 16 tiles; 4096 / 128 = 32 tiles of 64 K steps over 132 SMs
    assert machete_schedule(1, 4096, 4096)[0] == (128, 16)
    p = machete_point(1, 4096, 4096, -1, 132, 50.0)
    assert p.programs == math.ceil(32 * 64 / 132) * 132
    assert p.k_per_program == pytest.approx(128 * 16 / 1e4)
    assert p.fixup == pytest.approx((132 // 32 - 1) * 128 * 16 / 1e4)  # 4 SMs share a tile
    assert p.steps == 0.0  # 8.4 MB: fits the L2
    # M = 4096 on 8192 x 8192: 128 x 256 tiles, 64 x 16 of them, no SM shares one; 192 MB spill
    assert machete_schedule(4096, 8192, 8192)[0] == (128, 256)
    q = machete_point(4096, 8192, 8192, 128, 132, 50.0)
    assert q.programs == math.ceil(64 * 16 * (8192 // K_STEP) / 132) * 132
    assert q.fixup == 0.0 and q.steps == pytest.approx(128 * 256 / 1e4)
    # grouped scales are bytes read: g128 reads 64 bf16 scales a row more than per-channel
    assert q.nbytes - machete_point(4096, 8192, 8192, -1, 132, 50.0).nbytes == 2 * 8192 * 63


def test_a_small_layer_keeps_stream_k_units_of_eight_steps():
    # 256 x 1024 at M = 1: 2 tiles of 16 K steps; a unit takes 8 or more of them, so the busiest
    # SM runs 8 steps (not 1) and 2 SMs (not 66) share a tile
    p = machete_point(1, 256, 1024, -1, 132, 50.0)
    assert p.programs == MIN_UNIT_STEPS * 132
    assert p.fixup == pytest.approx((2 - 1) * 128 * 16 / 1e4)


def test_the_fit_recovers_a_known_cost():
    truth = WaveFit(11.0, 0.15, 0.13, 0.05, 2.7e6, 1, 1.0, 132, 0, 0.0, e=0.9)
    shapes = ((1792, 4096), (4096, 4096), (4096, 7168), (8192, 8192), (28672, 8192))
    pts, groups = [], []
    for n, k in shapes:
        for m in (1, 16, 128, 1024, 4096):
            p = machete_point(m, n, k, -1, 132, 50.0)
            pts.append(p.__class__(**{**p.__dict__, "us": truth.predict(p)}))
            groups.append((n, k))
    fit = fit_machete(pts, 132, (2.7e6,), groups)
    for p in pts:
        assert fit.predict(p) == pytest.approx(p.us, rel=0.01)
    assert fit.err_hi - fit.err_lo < 0.02  # no error, so a narrow band
    held = machete_point(2048, 13824, 5120, -1, 132, 50.0)  # a shape and M it never saw
    assert fit.predict(held) == pytest.approx(truth.predict(held), rel=0.02)
