"""Machete's cost from the schedule vLLM launches: tiles of that schedule, Stream-K over the SMs.

vLLM's heuristic (`w4a8_kernels.machete_schedule`, generate.py:511-534) picks a tile (weight
rows x tokens, K step 64 for bf16: machete_mm_kernel.cuh:106) by M, N and K; every schedule is
CUTLASS 3's Stream-K, which spreads the tiles' K steps evenly over the SMs. So a call is

    t = t0 + max(W * (a + b * A) + e * (s - 1) * A + W * d * A * [working set > L2],  bytes / BW)

W the K steps on the busiest SM (all tiles' steps / SMs, rounded up, at least one Stream-K
unit's), A the tile's area (its MMA work per step), s the SMs sharing one tile where there are
fewer tiles than SMs (their partial sums are reduced in turn; a unit takes 8 steps or more), the last term the operands re-read from DRAM once A, B
and D no longer fit the L2 (M = 4096 runs 13% slower a step than M = 1024, on both parts),
and BW the part's measured copy rate (not fitted: few records stream). One fit covers every
M and both weight kinds (grouped scales cost within the spread), so a shape whose M falls in
another schedule is costed by that schedule's tiles, not by a curve of its neighbours.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from workbench.perf.fit import Point, WaveFit, nnls

__all__ = ["machete_point", "fit_machete", "K_STEP"]

K_STEP = 64  # TileShapeK = 128 * 8 / 16 bits (machete_mm_kernel.cuh:106-107)
# CUTLASS's PersistentTileSchedulerSm90StreamKParams::min_iters_per_sk_unit_ (the scheduler
# vLLM's Machete builds on): no Stream-K unit takes fewer of a tile's K steps.
MIN_UNIT_STEPS = 8


def machete_point(m: int, n: int, k: int, g: int, sms: int, l2_mb: float, us: float = 0.0) -> Point:
    """One call as the fit sees it: programs = the busiest SM's K steps x SMs (so the fit's
    waves are those steps), k_per_program = the tile's area / 1e4, steps = that area again
    where the working set overflows the L2 (else 0), fixup = the serial reduction's area."""
    from w4a8_kernels.machete_schedule import machete_schedule

    (tn, tm), _ = machete_schedule(m, n, k)
    tiles = -(-n // tn) * -(-m // tm)
    k_steps = -(-k // K_STEP)
    # a Stream-K unit takes at least MIN_UNIT_STEPS of a tile's K steps (or all of them)
    per_sm = max(-(-tiles * k_steps // sms), min(MIN_UNIT_STEPS, k_steps))
    area = tn * tm / 1e4
    sharing = min(max(1, sms // tiles), max(1, k_steps // MIN_UNIT_STEPS))
    groups = 1 if g in (-1, k) else -(-k // g)
    nbytes = n * k / 2 + 2 * n * groups + m * k * 2 + m * n * 2  # int4 W, bf16 scales, X, D
    spills = n * k / 2 + m * k * 2 + m * n * 2 > l2_mb * 1e6
    return Point(per_sm * sms, 1, area, area if spills else 0.0, nbytes, us, fixup=(sharing - 1) * area)


def _columns(pts: Sequence[Point], sms: int) -> np.ndarray:
    w = np.array([p.programs / sms for p in pts])
    return np.stack([np.ones(len(pts)), w, w * [p.k_per_program for p in pts], w * [p.steps for p in pts],
                     [p.fixup for p in pts]], axis=1)


def _solve(x: np.ndarray, t: np.ndarray, mem: np.ndarray) -> np.ndarray:
    """(t0, a, b, d, e), non-negative, least squares on relative error; each point on the
    branch of the max that binds, reassigned until stable."""
    on = np.ones(len(t), dtype=bool)
    theta = np.zeros(x.shape[1])
    for _ in range(8):
        a = np.where(on[:, None], x, np.eye(1, x.shape[1])[0])
        y = np.where(on, t, t - mem)
        norm = np.maximum(np.abs(a).max(axis=0), 1e-12)
        theta = nnls(a / t[:, None] / norm, y / t) / norm
        new = x[:, 1:] @ theta[1:] >= mem
        if (new == on).all():
            break
        on = new
    return theta


def _predict(theta: np.ndarray, x: np.ndarray, mem: np.ndarray) -> np.ndarray:
    return theta[0] + np.maximum(x[:, 1:] @ theta[1:], mem)


def fit_machete(pts: Sequence[Point], sms: int, bws: Sequence[float], groups: Sequence) -> WaveFit:
    """The fit over Machete's records; bws: the streaming rates to choose from (bytes per
    us; one, the part's measured copy rate, where it was measured), chosen by leave-one-
    shape-out error where there are three shapes or more. The band's edges are the 3rd and
    97th percentiles of those held-out errors (of the residuals with fewer shapes)."""
    if not pts:
        raise ValueError("fit_machete: no points")
    t = np.array([p.us for p in pts])
    x = _columns(pts, sms)
    nbytes = np.array([p.nbytes for p in pts])
    labels = np.array([str(s) for s in groups])
    folds = sorted(set(labels)) if len(set(labels)) >= 3 else []
    best = None
    for bw in bws:
        mem = nbytes / bw
        theta = _solve(x, t, mem)
        resid = np.log(t / np.maximum(_predict(theta, x, mem), 1e-9))
        held = resid
        if folds:
            held = np.concatenate([np.log(t[labels == f] / np.maximum(_predict(
                _solve(x[labels != f], t[labels != f], mem[labels != f]), x[labels == f], mem[labels == f]), 1e-9))
                for f in folds])
        score = float(np.sqrt(np.mean(held ** 2)))
        if best is None or score < best[0] - 1e-12:
            lo, hi = np.percentile(held, [3, 97])
            t0, a, b, d, e = (float(v) for v in theta)
            best = (score, WaveFit(t0, a, b, d, float(bw), 1, 1.0, sms, len(pts),
                                   float(np.sqrt(np.mean(resid ** 2))), float(lo), float(hi), e=e))
    assert best is not None and math.isfinite(best[0])
    return best[1]
