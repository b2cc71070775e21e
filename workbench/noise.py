"""How far a set of timings can be trusted: the spread of each point and the machine's load.

A median is stable when the p20-p80 band around it is narrow and nothing else competes for
the cores. The faces show both with every measured figure, and warn past these limits.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Mapping

__all__ = ["SPREAD_LIMIT", "TimingNoise", "timing_noise", "usable_cores"]

# p80 / p20 above this: the point's median moves from run to run by more than the ratios the
# figures are read for (a 1.5x band spans most of the W4A8 / W4A16 differences measured here).
SPREAD_LIMIT = 1.5


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class TimingNoise:
    """The widest p80 / p20 band of a run, where it is, and the load it ran under."""

    worst_spread: float | None  # the largest p80 / p20 over the timed points
    worst_path: str | None
    worst_m: int | None
    load: float | None  # the 1-minute load average, the larger of the run's start and end
    cores: int

    @property
    def spread_high(self) -> bool:
        return self.worst_spread is not None and self.worst_spread > SPREAD_LIMIT

    @property
    def overloaded(self) -> bool:
        return self.load is not None and self.load > self.cores

    @property
    def noisy(self) -> bool:
        return self.spread_high or self.overloaded


def timing_noise(records: Iterable[Mapping], loads: Iterable[float | None] = (),
                 cores: int | None = None) -> TimingNoise:
    """The noise of bench records (`p20_ms`, `p80_ms`, `path`, `m`), under the loads seen."""
    worst = None
    for r in records:
        lo, hi = r.get("p20_ms"), r.get("p80_ms")
        if lo and hi and lo > 0:
            spread = hi / lo
            if worst is None or spread > worst[0]:
                worst = (spread, r.get("path"), r.get("m"))
    seen = [x for x in loads if x is not None]
    return TimingNoise(worst[0] if worst else None, worst[1] if worst else None,
                       worst[2] if worst else None, max(seen) if seen else None,
                       cores or usable_cores())
