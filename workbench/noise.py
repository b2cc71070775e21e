"""How far a set of timings can be trusted: the spread of each point and the machine's load.

A median is stable when the p20-p80 band around it is narrow and nothing else competes for
the cores. The faces show both with every measured figure, and warn past these limits.

The load is measured two ways. The 1-minute load average lags by a minute and counts the
run's own threads. The direct measure is what other processes took of the cores this process
may run on while it ran: the busy time /proc/stat gives those cores, less this process's own
CPU time, over the wall time. A run whose threads did not find their cores free is loaded.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

__all__ = ["SPREAD_LIMIT", "LOAD_SLACK_CORES", "MIN_LOAD_WINDOW_S", "TimingNoise", "timing_noise",
           "usable_cores", "CpuSample", "cpu_sample", "others_cores", "LoadCheck", "load_check"]

# p80 / p20 above this: the point's median moves from run to run by more than the ratios the
# figures are read for (a 1.5x band spans most of the W4A8 / W4A16 differences measured here).
SPREAD_LIMIT = 1.5
# Other processes may keep this much of a core busy beyond the cores the run leaves free
# (a desktop's idle browser and shell take a few percent; one busy process takes a core).
LOAD_SLACK_CORES = 0.5
# /proc/stat counts in clock ticks (10 ms): a shorter window cannot tell a busy core from noise.
MIN_LOAD_WINDOW_S = 0.2


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _busy_seconds(cpus: set[int] | None) -> float | None:
    """Non-idle seconds of the given cores since boot (/proc/stat), None where unreadable."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
        tick = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    total, seen = 0, False
    for line in lines:
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        try:
            cpu = int(name[3:])
            # user nice system idle iowait irq softirq steal (guest is inside user)
            v = [int(x) for x in rest.split()[:8]]
        except ValueError:
            continue
        if cpus is not None and cpu not in cpus:
            continue
        v += [0] * (8 - len(v))
        total += v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
        seen = True
    return total / tick if seen else None


@dataclass(frozen=True)
class CpuSample:
    """One reading of the clock, the usable cores' busy time, this process's CPU time and
    the load average; two of them bound a run (`load_check`)."""

    wall_s: float
    busy_s: float | None  # non-idle seconds of the usable cores since boot
    own_s: float  # this process's user + system seconds (every thread, no children)
    loadavg_1m: float | None
    cores: int


def cpu_sample(helpers: tuple[int, ...] = ()) -> CpuSample:
    """A reading now. `helpers`: the pids of live processes working for this one (a measuring
    child, `workbench.contained`), whose CPU time is this run's own, not other processes' load."""
    cpus = _affinity()
    t = os.times()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    own = t.user + t.system + sum(_process_seconds(pid) for pid in helpers)
    return CpuSample(time.perf_counter(), _busy_seconds(cpus), own, load, len(cpus) if cpus else usable_cores())


def _process_seconds(pid: int) -> float:
    """A live process's user + system seconds (/proc/PID/stat), 0 where unreadable."""
    try:
        # the fields after the command's closing parenthesis; utime and stime are 14th and 15th
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


def others_cores(start: CpuSample, end: CpuSample) -> float | None:
    """Cores other processes kept busy between two samples, on average (None: not measurable
    here, or a window under MIN_LOAD_WINDOW_S)."""
    wall = end.wall_s - start.wall_s
    if start.busy_s is None or end.busy_s is None or wall < MIN_LOAD_WINDOW_S:
        return None
    others = (end.busy_s - start.busy_s) - (end.own_s - start.own_s)
    return min(max(others / wall, 0.0), float(end.cores))


def _crowded(others: float | None, threads: int, cores: int) -> bool:
    """Other processes took more than the cores a run of `threads` threads left free."""
    return others is not None and others > max(cores - threads, 0) + LOAD_SLACK_CORES


@dataclass(frozen=True)
class LoadCheck:
    """The load one run met: what other processes took of its cores, and the load average."""

    others_cores: float | None  # average cores other processes kept busy (None: unmeasured)
    threads: int  # the run's compute threads
    cores: int  # the cores it may run on
    load_start: float | None  # 1-minute load averages at its start and end
    load_end: float | None
    seconds: float

    @property
    def crowded(self) -> bool:
        """Other processes took the cores the run's threads needed."""
        return _crowded(self.others_cores, self.threads, self.cores)

    @property
    def load_over_cores(self) -> bool:
        loads = [x for x in (self.load_start, self.load_end) if x is not None]
        return bool(loads) and max(loads) > self.cores

    @property
    def loaded(self) -> bool:
        return self.crowded or self.load_over_cores

    def to_dict(self) -> dict:
        r = lambda v: None if v is None else round(v, 2)  # noqa: E731
        return {"loaded": self.loaded, "crowded": self.crowded, "load_over_cores": self.load_over_cores,
                "others_cores": r(self.others_cores), "threads": self.threads, "cores": self.cores,
                "load_start": r(self.load_start), "load_end": r(self.load_end),
                "seconds": r(self.seconds), "slack_cores": LOAD_SLACK_CORES}


def load_check(start: CpuSample, end: CpuSample, threads: int) -> LoadCheck:
    """The load a run of `threads` compute threads met between two samples."""
    return LoadCheck(others_cores(start, end), threads, end.cores, start.loadavg_1m, end.loadavg_1m,
                     end.wall_s - start.wall_s)


@dataclass(frozen=True)
class TimingNoise:
    """The widest p80 / p20 band of a run, where it is, and the load it ran under."""

    worst_spread: float | None  # the largest p80 / p20 over the timed points
    worst_path: str | None
    worst_m: int | None
    load: float | None  # the 1-minute load average, the larger of the run's start and end
    cores: int
    others_cores: float | None = None  # the most cores other processes took during a record's run
    threads: int = 1  # the most compute threads a record ran with

    @property
    def spread_high(self) -> bool:
        return self.worst_spread is not None and self.worst_spread > SPREAD_LIMIT

    @property
    def crowded(self) -> bool:
        """Other processes took the cores the run's threads needed (measured, not averaged)."""
        return _crowded(self.others_cores, self.threads, self.cores)

    @property
    def overloaded(self) -> bool:
        return self.crowded or (self.load is not None and self.load > self.cores)

    @property
    def noisy(self) -> bool:
        return self.spread_high or self.overloaded


def timing_noise(records: Iterable[Mapping], loads: Iterable[float | None] = (),
                 cores: int | None = None) -> TimingNoise:
    """The noise of bench records (`p20_ms`, `p80_ms`, `path`, `m`, and `others_cores`,
    `threads` where the bench measured them), under the load averages seen."""
    worst = None
    others: float | None = None
    threads = 1
    for r in records:
        lo, hi = r.get("p20_ms"), r.get("p80_ms")
        if lo and hi and lo > 0:
            spread = hi / lo
            if worst is None or spread > worst[0]:
                worst = (spread, r.get("path"), r.get("m"))
        busy = r.get("others_cores")
        if busy is not None and (others is None or busy > others):
            others = busy
        threads = max(threads, r.get("threads") or 1)
    seen = [x for x in loads if x is not None]
    return TimingNoise(worst[0] if worst else None, worst[1] if worst else None,
                       worst[2] if worst else None, max(seen) if seen else None,
                       cores or usable_cores(), others, threads)


def record_unreliable(r: Mapping, cores: int | None = None) -> str | None:
    """Why one bench record's median cannot be trusted (its p80 / p20 band past SPREAD_LIMIT,
    or other processes took the cores its threads needed while it ran), or None."""
    why = []
    lo, hi = r.get("p20_ms"), r.get("p80_ms")
    if lo and hi and lo > 0 and hi / lo > SPREAD_LIMIT:
        why.append(f"p80/p20 {hi / lo:.2f}x")
    busy = r.get("others_cores")
    if _crowded(busy, r.get("threads") or 1, cores or usable_cores()):
        why.append(f"other processes kept {busy:.1f} cores busy")
    return ", ".join(why) or None
