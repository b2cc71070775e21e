"""What the CPU bench scripts share: the synthetic RTN weight, the error against float, and
round-robin timing read on the clock that the thread count calls for."""
from __future__ import annotations

import random
import statistics
import time

import torch


def synthetic_weight(n: int, k: int, seed: int = 0):
    """(float weight, (w_q, scales) per-channel, (w_q, scales) group 128): RTN int4."""
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.02
    out = [w]
    for g in (k, 128):
        wg = w.view(n, k // g, g)
        s = wg.abs().amax(-1) / 7.0
        q = torch.clamp(torch.round(wg / s.unsqueeze(-1)), -8, 7).to(torch.int8).view(n, k)
        out.append((q, s.to(torch.bfloat16).to(torch.float32)))
    return tuple(out)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def clock_for(threads: int) -> str:
    """One thread: this process's CPU time (the machine is shared); more: wall time."""
    return "cpu" if threads == 1 else "wall"


def _quantiles(s: list) -> tuple:
    q = statistics.quantiles(s, n=10, method="inclusive") if len(s) > 1 else [s[0]] * 9
    return q[1], statistics.median(s), q[7]


def round_robin(fns: dict, rounds: int, clock: str, seed: int = 0) -> dict:
    """{name: {p20_ms, p50_ms, p80_ms (of `clock`), wall_*, cpu_*, rounds}}: each round calls
    every fn once, in a fresh order."""
    for fn in fns.values():
        fn()  # warm-up: library loads, per-M tuning, first-touch of buffers
    wall = {name: [] for name in fns}
    cpu = {name: [] for name in fns}
    items = list(fns.items())
    rng = random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(items)
        for name, fn in items:
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            wall[name].append((time.perf_counter() - t0) * 1e3)
            cpu[name].append((time.process_time() - c0) * 1e3)
    out = {}
    for name in fns:
        w, c = _quantiles(wall[name]), _quantiles(cpu[name])
        read = c if clock == "cpu" else w
        out[name] = {"p20_ms": read[0], "p50_ms": read[1], "p80_ms": read[2], "clock": clock,
                     "wall_p20_p50_p80_ms": w, "cpu_p20_p50_p80_ms": c, "rounds": len(wall[name])}
    return out
