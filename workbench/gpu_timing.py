"""Device time of GPU calls, one implementation for `bench`, the Kernels page, notebook 02 and
`benchmarks/gpu_bench.py`.

A call is timed on the GPU, not the host: the calls rotate over copies of their inputs (and
weights) that together pass the L2 three times, so each call reads its operands from memory
as a call in a model does; they are warmed up, then captured in a CUDA graph (a pass over
all copies, repeated to last >= 1 ms) and timed per replay with CUDA events, so no launch
gap or host synchronization is counted (vLLM runs decode in CUDA graphs). A call too long
for that, or one a graph cannot capture, is timed one by one with events. The median and its
p20/p80 band come from 25 samples. A per-call synchronize around a host clock measures the
launch path instead: a 4 us kernel read as 51 us that way (flashinfer-bench#195), and
Humming at M = 1 read 349 us where the GPU took about 9.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

__all__ = ["DeviceTiming", "time_device", "copies_for", "l2_bytes", "eager_us", "GRAPH_BELOW_MS",
           "MAX_COPIES"]

GRAPH_BELOW_MS = 2.0  # calls shorter than this are timed in graphs: launch time rivals them
MAX_COPIES = 32


@dataclass(frozen=True)
class DeviceTiming:
    median_us: float
    p20_us: float
    p80_us: float
    min_us: float
    max_us: float
    samples: int
    method: str  # "graph xN" (calls per replay) or "events"


def l2_bytes(device: int | None = None) -> int:
    """The GPU's L2 as the driver reports it (50 MB on an H100 or H200)."""
    return int(torch.cuda.get_device_properties(device or torch.cuda.current_device()).L2_cache_size)


def copies_for(cold_bytes: int, l2: int | None = None) -> int:
    """Copies to rotate so that one pass over them streams at least 3x the L2 from memory."""
    l2 = l2_bytes() if l2 is None else l2
    return max(1, min(MAX_COPIES, math.ceil(3 * l2 / max(cold_bytes, 1))))


def _events(n: int) -> list:
    return [torch.cuda.Event(enable_timing=True) for _ in range(n)]


def _summary(per_us: list[float], method: str) -> DeviceTiming:
    per = sorted(per_us)
    q = lambda p: per[min(len(per) - 1, int(p * len(per)))]  # noqa: E731
    return DeviceTiming(statistics.median(per), q(0.2), q(0.8), per[0], per[-1], len(per), method)


def time_device(fns: Sequence[Callable[[], Any]], *, samples: int = 25, graph: bool = True) -> DeviceTiming:
    """Device time of one call of `fns` (each the same work on its own copy of the operands).

    The calls are warmed up first (a compile at the first call must be timed by the caller,
    apart); a RuntimeError from graph capture falls back to events.
    """
    for f in fns:
        f()
    torch.cuda.synchronize()
    est_ms = float("inf")
    for _ in range(2):  # the smaller of two passes: one hiccup must not pick the method
        s, e = _events(2)
        s.record()
        for f in fns:
            f()
        e.record()
        torch.cuda.synchronize()
        est_ms = min(est_ms, s.elapsed_time(e) / len(fns))
    if est_ms < GRAPH_BELOW_MS and graph:
        try:
            return _graph_replays(fns, samples, est_ms)
        except RuntimeError:
            torch.cuda.synchronize()  # a call a graph cannot capture: events below
    n = max(5, min(samples, int(200 / max(est_ms, 1e-3))))
    starts, ends = _events(n), _events(n)
    for i in range(n):
        starts[i].record()
        fns[i % len(fns)]()
        ends[i].record()
    torch.cuda.synchronize()
    return _summary([starts[i].elapsed_time(ends[i]) * 1e3 for i in range(n)], "events")


def _graph_replays(fns: Sequence[Callable[[], Any]], samples: int, est_ms: float) -> DeviceTiming:
    reps = min(200, max(1, math.ceil(1.0 / (est_ms * len(fns) + 1e-6))))
    g = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for f in fns:  # warm on the capture stream (allocator pools)
            f()
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(g):
        for _ in range(reps):
            for f in fns:
                f()
    g.replay()
    torch.cuda.synchronize()
    starts, ends = _events(samples), _events(samples)
    for i in range(samples):
        starts[i].record()
        g.replay()
        ends[i].record()
    torch.cuda.synchronize()
    calls = reps * len(fns)
    del g
    return _summary([starts[i].elapsed_time(ends[i]) * 1e3 / calls for i in range(samples)],
                    f"graph x{calls}")


def eager_us(fn: Callable[[], Any], calls: int = 20) -> float:
    """Host time of one eager call with its launch overhead, one synchronize per call: what a
    Python loop without graphs pays (a second, labelled figure, never the kernel's time)."""
    import time

    fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(per)
