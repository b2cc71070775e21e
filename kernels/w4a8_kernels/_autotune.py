"""Per-M choice among equivalent paths, timed on the caller's own input once per M bucket."""
from __future__ import annotations

import time
from typing import Any, Callable

import torch


def m_bucket(m: int) -> int:
    """The power of two at or above m: calls in one bucket share one choice."""
    return 1 << max(0, (m - 1).bit_length())


def _time_once(fn: Callable, x: torch.Tensor, prepared: Any) -> float:
    # One torch thread: the calling thread's CPU time, which leaves out the time other
    # processes held the core (a loaded machine otherwise flips close choices). Several
    # threads: wall time, since the work is spread over threads this clock cannot see.
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    t0 = clock()
    fn(x, prepared)
    return clock() - t0


def pick(choices: dict, timings: dict, fns: dict[str, Callable], x: torch.Tensor,
         prepared: Any) -> str:
    """The name of the fastest of `fns` for x's M bucket, timed on first use.

    Three interleaved tries each (two when a call takes over half a second), kept by the
    minimum; `choices[bucket]` and `timings[bucket]` record the outcome.
    """
    b = m_bucket(x.shape[0])
    if b not in choices:
        if len(fns) == 1:
            choices[b] = next(iter(fns))
            return choices[b]
        t = {name: float("inf") for name in fns}
        for r in range(3):
            for name, fn in fns.items():
                t[name] = min(t[name], _time_once(fn, x, prepared))
            if r == 1 and max(t.values()) > 0.5:
                break  # slow calls: two interleaved tries each are enough
        timings[b] = t
        choices[b] = min(t, key=t.get)
    return choices[b]
