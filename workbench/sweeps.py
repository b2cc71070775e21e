"""Sweeps over token count, alignment and group size; crossover and slowdown as data.

Every sweep returns `BenchRecord`s (workbench.bench), so faces plot them the same way.
`crossover` finds the smallest M where a W4A8 path beats a W4A16 path and says whether
the timing spread supports it; `slowdown` gives a path's time over a baseline's per M.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from workbench.bench import BenchRecord, Progress, bench_weight, int4_weight_of, synthetic_bench_layer
from workbench.errors import InvalidInputError
from workbench.limits import check_int
from workbench.models import broken_rules, get_model, partitions

__all__ = [
    "DEFAULT_MS", "ALIGNMENT_NS", "GROUP_SIZES", "sweep_m", "sweep_alignment", "sweep_partitions",
    "sweep_group", "Crossover", "crossover", "Slowdown", "slowdown",
]

DEFAULT_MS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
ALIGNMENT_NS = (4096, 4100, 4104, 4160)
GROUP_SIZES = (-1, 32, 64, 128)
DEFAULT_PATHS = ("w4a8_native", "w4a16_fallback")


def sweep_m(n: int = 4096, k: int = 4096, group_size: int = 128, *,
            paths: Sequence[str] = DEFAULT_PATHS, ms: Sequence[int] = DEFAULT_MS,
            layer=None, progress: Progress | None = None, **bench_kw) -> list[BenchRecord]:
    """Every path at every M on one layer (a synthetic n x k layer unless `layer` is given)."""
    layer = layer or synthetic_bench_layer(n, k, group_size, seed=bench_kw.pop("seed", 0))
    return bench_weight(int4_weight_of(layer), layer.source_weight, paths, ms,
                        layer_name=layer.name, progress=progress, **bench_kw)


def _chain(progress: Progress | None, offset: int, total: int) -> Progress | None:
    if progress is None:
        return None
    return lambda done, _t, msg: progress(offset + done, total, msg)


def sweep_alignment(ns: Sequence[int] = ALIGNMENT_NS, k: int = 4096, group_size: int = 128, *,
                    paths: Sequence[str] = DEFAULT_PATHS, ms: Sequence[int] = (1, 128),
                    progress: Progress | None = None, **bench_kw) -> list[BenchRecord]:
    """The same paths over output widths that do and do not meet kernels' alignment rules."""
    records: list[BenchRecord] = []
    total = len(ns) * len(ms) * len(paths)
    for i, n in enumerate(ns):
        layer = synthetic_bench_layer(n, k, group_size)
        recs = bench_weight(int4_weight_of(layer), layer.source_weight, paths, ms,
                            layer_name=f"N={n} (breaks: {'; '.join(broken_rules(k, n, group_size)) or 'none'})",
                            progress=_chain(progress, i * len(ms) * len(paths), total), **bench_kw)
        records += recs
    return records


def sweep_partitions(model: str, tp_sizes: Sequence[int] = (1, 2, 4, 8), group_size: int = 128, *,
                     layers: Sequence[str] | None = None, paths: Sequence[str] = DEFAULT_PATHS,
                     ms: Sequence[int] = (1, 128), progress: Progress | None = None,
                     **bench_kw) -> list[BenchRecord]:
    """Paths on each tensor-parallel shard of a real model's linears (synthetic weights).

    A shard whose K is not a multiple of the group size is benchmarked per-channel (and
    its records say so): vLLM refuses that split for a grouped checkpoint.
    """
    get_model(model)
    for i, tp in enumerate(tp_sizes):  # here, not below: a refused split is skipped there
        check_int(f"tp_sizes[{i}]", tp, 1, 1024)
    shards = []
    for tp in tp_sizes:
        try:
            shards += [p for p in partitions(model, tp) if layers is None or p.layer in layers]
        except InvalidInputError:
            continue  # a split vLLM refuses (heads not divisible): nothing to run
    records: list[BenchRecord] = []
    total = len(shards) * len(ms) * len(paths)
    for i, p in enumerate(shards):
        g = group_size if group_size == -1 or p.k % group_size == 0 else -1
        layer = synthetic_bench_layer(p.n, p.k, g)
        name = f"{model} {p.layer} TP{p.tp}" + ("" if g == group_size else
                                              f" (K={p.k} % {group_size} != 0: per-channel)")
        records += bench_weight(int4_weight_of(layer), layer.source_weight, paths, ms,
                                layer_name=name, progress=_chain(progress, i * len(ms) * len(paths), total),
                                **bench_kw)
    return records


def sweep_group(group_sizes: Sequence[int] = GROUP_SIZES, n: int = 4096, k: int = 4096, *,
                paths: Sequence[str] = DEFAULT_PATHS, ms: Sequence[int] = (1, 128),
                progress: Progress | None = None, **bench_kw) -> list[BenchRecord]:
    records: list[BenchRecord] = []
    total = len(group_sizes) * len(ms) * len(paths)
    for i, g in enumerate(group_sizes):
        layer = synthetic_bench_layer(n, k, g)
        records += bench_weight(int4_weight_of(layer), layer.source_weight, paths, ms,
                                layer_name=layer.name,
                                progress=_chain(progress, i * len(ms) * len(paths), total), **bench_kw)
    return records


@dataclass(frozen=True)
class Crossover:
    """Smallest M where `fast` beats `slow`, and how firmly the timings say so."""

    fast: str
    slow: str
    m: int | None  # None: fast never wins in the measured range
    ratio: float | None  # slow median / fast median at m
    separated: bool  # fast's 80th percentile below slow's 20th at m
    holds_above: bool  # fast also wins at every larger measured M
    points: tuple[tuple[int, float], ...]  # (M, slow / fast) for every M with both timed

    @property
    def stays_ahead_from(self) -> int | None:
        return stays_ahead_from(self.points)

    def to_dict(self) -> dict:
        return {**asdict(self), "stays_ahead_from": self.stays_ahead_from}


def stays_ahead_from(points: Sequence[tuple[int, float]]) -> int | None:
    """The smallest M from which the speedup (slow / fast) stays above 1; None if it never does.

    The other reading of "crossover" next to `Crossover.m` (the first M where fast wins):
    the two differ when timings cross back and forth.
    """
    pts = sorted(points)
    for i, (m, ratio) in enumerate(pts):
        if all(r > 1.0 for _, r in pts[i:]):
            return m
    return None


def _by_m(records: Sequence[BenchRecord], path: str) -> dict[int, BenchRecord]:
    return {r.m: r for r in records if r.path == path and r.median_ms is not None and r.m > 0}


def _time(r: BenchRecord, clock: str) -> float:
    if clock == "cpu":
        if r.cpu_median_ms is None:
            raise InvalidInputError(f"{r.path} at M = {r.m} has no CPU-time measurement")
        return r.cpu_median_ms
    return r.median_ms


def crossover(records: Sequence[BenchRecord], fast: str = "w4a8_native",
              slow: str = "w4a16_fallback", *, layer: str | None = None,
              clock: str = "wall") -> Crossover:
    """clock "wall" (median wall time) or "cpu" (median CPU time of the calling thread)."""
    if clock not in ("wall", "cpu"):
        raise InvalidInputError(f"clock: {clock!r}; accepted: wall, cpu")
    recs = [r for r in records if layer is None or r.layer == layer]
    a, b = _by_m(recs, fast), _by_m(recs, slow)
    common = sorted(set(a) & set(b))
    if not common:
        raise InvalidInputError(f"no M has timings for both {fast} and {slow}")
    points = tuple((m, _time(b[m], clock) / _time(a[m], clock)) for m in common)
    wins = [m for m, ratio in points if ratio > 1.0]
    if not wins:
        return Crossover(fast, slow, None, None, False, False, points)
    m0 = wins[0]
    sep = (a[m0].p80_ms or a[m0].median_ms) < (b[m0].p20_ms or b[m0].median_ms)
    holds = all(ratio > 1.0 for m, ratio in points if m >= m0)
    return Crossover(fast, slow, m0, dict(points)[m0], sep, holds, points)


@dataclass(frozen=True)
class Slowdown:
    path: str
    baseline: str
    points: tuple[tuple[int, float], ...]  # (M, path median / baseline median)
    untimed: tuple[int, ...]  # M where the path was skipped (too slow) or unavailable

    @property
    def max_factor(self) -> float | None:
        return max((f for _, f in self.points), default=None)

    @property
    def min_factor(self) -> float | None:
        return min((f for _, f in self.points), default=None)

    def to_dict(self) -> dict:
        return {**asdict(self), "max_factor": self.max_factor, "min_factor": self.min_factor}


def slowdown(records: Sequence[BenchRecord], path: str = "vllm_dynamic4bit",
             baseline: str = "w4a16_fallback", *, layer: str | None = None,
             clock: str = "wall") -> Slowdown:
    recs = [r for r in records if layer is None or r.layer == layer]
    p, b = _by_m(recs, path), _by_m(recs, baseline)
    points = tuple((m, _time(p[m], clock) / _time(b[m], clock)) for m in sorted(set(p) & set(b)))
    untimed = tuple(sorted({r.m for r in recs if r.path == path and r.median_ms is None}))
    return Slowdown(path, baseline, points, untimed)
