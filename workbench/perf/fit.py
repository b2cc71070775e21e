"""The fitted part of a GEMM's cost: waves of programs against bytes streamed.

For a launch of W waves (programs / (multiprocessors x programs per SM)), each program
running s K steps of 2 * block_k values,

    t = t0 + max(W * (a + b * K_per_program + d * s),  bytes / BW)

t0 is launch and epilogue latency, a a program's fixed cost, b the cost per K value (the
datapath: unpack, MMA), d the cost per step (per-group scaling, pipeline turn), BW the
bandwidth it reaches when streaming. The parameters are fitted on measured records (least
squares on relative error, non-negative), with the programs per SM and BW chosen over a
grid; nothing in them is entered by hand.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

__all__ = ["Point", "WaveFit", "fit_waves", "nnls", "BW_FRACTIONS"]

# The streaming branch's bandwidth, as fractions of the part's datasheet figure: a fit
# that explains compute-bound points with a slow "memory" branch does not carry to new N.
BW_FRACTIONS = tuple(float(x) for x in np.geomspace(0.5, 1.0, 10))


@dataclass(frozen=True)
class Point:
    """One timed call, as the fit sees it. programs: tiles x split; k_per_program: K values."""

    programs: int
    programs_per_sm: int  # the launch's own figure (split-K targets)
    k_per_program: float
    steps: float
    nbytes: float
    us: float
    fixup: float = 0.0  # serial work outside the waves (Machete's Stream-K reduction)


@dataclass(frozen=True)
class WaveFit:
    t0: float
    a: float
    b: float
    d: float
    bw: float  # bytes per us
    occupancy: int  # programs resident on one SM at once
    alpha: float  # occupancy residents take occupancy ** alpha of one program's time
    sms: int
    n_points: int
    rms_log: float  # fit residual, root mean square of log(pred / measured)
    # 3rd and 97th percentiles of log(measured / pred) on held-out shapes (or, with fewer
    # than three shapes, of the fit's residuals): the band's edges.
    err_lo: float = 0.0
    err_hi: float = 0.0
    e: float = 0.0  # cost per unit of a point's fixup
    # root mean square of log(measured / pred) on held-out shapes (the residual's, with fewer
    # than three shapes): what the grid choices were scored by
    held_rms: float = 0.0

    def compute(self, p: Point) -> float:
        """The per-tile (compute) branch at a point."""
        return self.waves(p) * (self.a + self.b * p.k_per_program + self.d * p.steps) + self.e * p.fixup

    def waves(self, p: Point) -> float:
        return _waves(p.programs, self.sms, self.occupancy, self.alpha)

    def predict(self, p: Point) -> float:
        return self.t0 + max(self.compute(p), p.nbytes / self.bw)

    def to_dict(self) -> dict:
        return asdict(self)


def nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a handful of columns: drop the most negative column
    and re-solve until none is negative."""
    keep = list(range(a.shape[1]))
    x = np.zeros(a.shape[1])
    while keep:
        sub, *_ = np.linalg.lstsq(a[:, keep], y, rcond=None)
        if (sub >= 0).all():
            x[keep] = sub
            return x
        keep.pop(int(np.argmin(sub)))
    return x


def _solve(t: np.ndarray, w: np.ndarray, kpp: np.ndarray, st: np.ndarray, mem: np.ndarray
           ) -> np.ndarray:
    """(t0, a, b, d) for one (alpha, BW): alternate between assigning each point to the
    branch of the max that binds and a weighted least-squares solve."""
    comp_cols = np.stack([np.ones_like(t), w, w * kpp, w * st], axis=1)
    mem_row = np.array([1.0, 0, 0, 0])
    on_comp = np.ones(len(t), dtype=bool)
    theta = np.zeros(4)
    scale = 1.0 / t  # relative error
    for _ in range(5):
        a = np.where(on_comp[:, None], comp_cols, mem_row)
        y = np.where(on_comp, t, t - mem)
        # K terms are ~1e4 larger than the others: scale columns for a well-posed solve.
        norm = np.maximum(np.abs(a).max(axis=0), 1e-12)
        theta = nnls(a * scale[:, None] / norm, y * scale) / norm
        new = comp_cols[:, 1:] @ theta[1:] >= mem
        if (new == on_comp).all():
            break
        on_comp = new
    return theta


def _predict(theta, w, kpp, st, mem):
    return theta[0] + np.maximum(w * (theta[1] + theta[2] * kpp + theta[3] * st), mem)


def _waves(programs: int, sms: int, occ: int, alpha: float) -> float:
    """Effective waves: L = ceil(programs / SMs) programs land on the busiest SM; they run
    occ at a time, and occ residents together take occ ** alpha of one alone."""
    full, rest = divmod(-(-programs // sms), occ)
    return full * occ ** alpha + (rest ** alpha if rest else 0.0)


# Highest occupancy first: where the records cannot tell two apart (no SM ever held more
# programs than the smaller one), the first wins, and fewer waves carry better to wider N.
_SHAPES = tuple((occ, alpha) for occ in (4, 2, 1) for alpha in ((1.0,) if occ == 1 else
                                                              (0.3, 0.45, 0.6, 0.75, 0.9)))


def fit_waves(pts: Sequence[Point], sms: int, peak_bw: float, groups: Sequence | None = None,
              shapes: Sequence[tuple[int, float]] = _SHAPES) -> WaveFit:
    """Fit (t0, a, b, d); choose the concurrency exponent and BW over their grids by
    leave-one-group-out error when `groups` (e.g. each point's shape) has two or more
    values, so the choice is the one that carries to shapes it was not fitted on;
    otherwise by the fit's own error. peak_bw: the datasheet bandwidth, bytes per us."""
    if not pts:
        raise ValueError("fit_waves: no points")
    t = np.array([p.us for p in pts])
    kpp = np.array([p.k_per_program for p in pts])
    st = np.array([p.steps for p in pts])
    nbytes = np.array([p.nbytes for p in pts])
    progs = [p.programs for p in pts]
    labels = np.array([str(g) for g in groups]) if groups is not None else None
    folds = sorted(set(labels)) if labels is not None and len(set(labels)) >= 3 else []
    best = None
    for occ, alpha in shapes:
        w = np.array([_waves(p, sms, occ, alpha) for p in progs])
        for frac in BW_FRACTIONS:
            bw = frac * peak_bw
            mem = nbytes / bw
            theta = _solve(t, w, kpp, st, mem)
            pred = _predict(theta, w, kpp, st, mem)
            resid = np.log(t / np.maximum(pred, 1e-9))
            if folds:
                errs = []
                for f in folds:
                    tr, te = labels != f, labels == f
                    th = _solve(t[tr], w[tr], kpp[tr], st[tr], mem[tr])
                    errs.append(np.log(t[te] / np.maximum(_predict(th, w[te], kpp[te], st[te], mem[te]), 1e-9)))
                held = np.concatenate(errs)
            else:
                held = resid
            score = float(np.sqrt(np.mean(held ** 2)))
            if best is None or score < best[0] - 1e-12:
                rms = float(np.sqrt(np.mean(resid ** 2)))
                lo, hi = np.percentile(held, [3, 97])
                best = (score, WaveFit(*(float(x) for x in theta), bw, occ, alpha, sms, len(pts), rms,
                                       float(lo), float(hi), held_rms=score))
    assert best is not None and math.isfinite(best[0])
    return best[1]


def error_stats(errs: Sequence[float]) -> dict:
    """Median, p90 (nearest rank) and max of |predicted/measured - 1|: the validation summary."""
    a = sorted(abs(e) for e in errs)
    if not a:
        return {"n": 0}
    p90 = a[min(len(a) - 1, int(round(0.9 * (len(a) - 1))))]
    return {"n": len(a), "median_abs_err": round(statistics.median(a), 4), "p90_abs_err": round(p90, 4),
            "max_abs_err": round(a[-1], 4)}
