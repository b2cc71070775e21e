"""Bench harness: time kernel paths on one layer across token counts, with provenance.

Timing: each path is prepared once, its input made outside the timed region, warmed
up, then timed for `repeats` rounds; within one M the paths are timed round-robin
(one call of each per round, in a fresh seeded random order each round so that no path
always follows the same one) so that load from other processes falls on all of them alike, which keeps the ratios between paths honest on a shared machine. Reported:
median, 20th and 80th percentiles, min and max of wall time, in milliseconds, and the
median CPU time of the calling thread. With one torch thread every path computes in
the calling thread, so that CPU time is the kernel's cost without the time other
processes held the core: the steadier number on a loaded machine. Each record also carries
the cores other processes kept busy while its run was timed (`others_cores`,
workbench.noise), so a loaded run is flagged wherever its records go.

Errors: each output is compared on up to `error_rows` evenly spaced tokens (rows are
independent: per-token quantization) with the float reference (x @ W_float^T) and
with the quantized reference of what the path computes (kernels.reference).
"""
from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import os
import platform
import random
import statistics
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from w4a8_kernels import native
from w4a8_kernels.reference import w4a8_reference, w4a16_reference
from w4a8_kernels.registry import Computes, Int4Weight, KernelPath
from workbench.errors import InvalidInputError, KernelError
from workbench.execution import execution_path
from workbench.gpu_timing import MAX_COPIES, copies_for, eager_us, time_device
from workbench.limits import MAX_M, check_int, check_ms, check_positive, shown
from workbench.memory import bench_bytes, check_fits
from workbench.metrics import compare
from workbench.noise import cpu_sample, others_cores, timing_noise
from workbench.results import ResultRecord

__all__ = [
    "Timing", "time_fn", "BenchRecord", "bench_weight", "host_provenance",
    "write_json", "write_csv", "records_from_json", "Progress", "bench_layer_weight",
    "int4_weight_of", "synthetic_bench_layer", "bench_activation", "float_weight", "float_reference",
    "per_token_errors", "result_record", "first_call_s", "quantile", "engine_verdicts",
]

Progress = Callable[[int, int, str], None]  # (done, total, message)
# (path, M or None, what): called before kernel calls, outside any timed region (a path's
# preparation, its first call; no path for the round-robin's timed calls), so a crash can be named
Stage = Callable[[str, "int | None", str], None]


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    min_ms: float
    max_ms: float
    repeats: int
    cpu_median_ms: float | None = None  # CPU time of the calling thread (see `bench_weight`)


def quantile(sorted_ms: list[float], q: float) -> float:
    """The q-quantile of sorted samples, linear between the two nearest."""
    if len(sorted_ms) == 1:
        return sorted_ms[0]
    pos = q * (len(sorted_ms) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_ms) - 1)
    return sorted_ms[lo] + (sorted_ms[hi] - sorted_ms[lo]) * (pos - lo)


def summarize(samples_s: Sequence[float], cpu_samples_s: Sequence[float] | None = None) -> Timing:
    if not samples_s or not all(isinstance(s, (int, float)) and math.isfinite(s) and s >= 0
                                for s in samples_s):
        raise InvalidInputError(f"samples: {shown(samples_s)}; accepted: at least one finite "
                                "duration >= 0 in seconds")
    ms = sorted(s * 1e3 for s in samples_s)
    cpu = statistics.median(c * 1e3 for c in cpu_samples_s) if cpu_samples_s else None
    return Timing(statistics.median(ms), quantile(ms, 0.2), quantile(ms, 0.8), ms[0], ms[-1],
                  len(ms), cpu)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_fn(fn: Callable[[], Any], *, warmup: int = 2, repeats: int = 7, device: str = "cpu") -> Timing:
    """Warm up, then time `repeats` calls (synchronizing a GPU before reading the clock)."""
    warmup, repeats = check_int("warmup", warmup, 0, 100), check_int("repeats", repeats, 1, 1000)
    for _ in range(warmup):
        fn()
    _sync(device)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        samples.append(time.perf_counter() - t0)
    return summarize(samples)


@dataclass
class BenchRecord:
    """One (path, M) measurement; the keys other tools read are the first nine."""

    path: str
    m: int
    n: int
    k: int
    group_size: int
    median_ms: float | None
    rel_error: float | None  # against the float reference
    available: bool
    why: str = ""
    p20_ms: float | None = None
    p80_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    repeats: int = 0
    cpu_median_ms: float | None = None  # calling thread's CPU time: immune to preemption
    kernel_rel_error: float | None = None  # against the quantized reference of `computes`
    sqnr_db: float | None = None
    cosine: float | None = None
    max_abs_error: float | None = None
    worst_token_rel_error: float | None = None
    error_rows: int = 0
    computes: str = ""
    activation_dtype: str = ""
    emulated: bool = False
    detail: str = ""  # engine or sub-path that ran (int8 engine, fallback choice)
    threads: int = 0
    layer: str = ""
    # cores other processes kept busy while the run was timed (workbench.noise), None unmeasured
    others_cores: float | None = None
    # how the time was taken: "host clock" (CPU paths) or the GPU timer's method and copies
    timing: str = ""
    # GPU: the first call at this M (a JIT compile's time lands here), apart from the samples
    first_call_s: float | None = None
    # GPU: one eager call's host time with its launch and a synchronize (not the kernel's time)
    eager_ms: float | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        for key, value in d.items():  # JSON has no inf/nan
            if isinstance(value, float) and not math.isfinite(value):
                d[key] = None
        return d


def host_provenance(extra: dict | None = None) -> dict:
    """Where and when: host, CPU, ISA flags, torch version, threads, date, load."""
    flags: list[str] = []
    model = platform.processor()
    try:
        text = Path("/proc/cpuinfo").read_text()
        for line in text.splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                flags = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni",
                                     "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8")
                         if f in have]
                break
    except OSError:
        pass
    prov = {
        "host": platform.node(),
        "cpu": model,
        "machine": platform.machine(),
        "isa": flags,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        # what the kernels and torch were allowed to use, where less than the CPU has
        "isa_cap": native.isa_cap(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        # the libraries' own ISA caps: FBGEMM (quantized.linear_dynamic) and oneDNN pick
        # their kernels from the CPU, not from torch's capability
        "library_isa_env": {v: os.environ[v] for v in native.AVX2_LIBRARY_CAPS if v in os.environ},
        # which C engines this machine's build admitted after their self-test, or why not
        "native_engines": engine_verdicts(),
    }
    prov.update(extra or {})
    return prov


def engine_verdicts() -> dict[str, str]:
    """This machine's C engines: "admitted (self-test passed)", or why each is not."""
    return native.verdicts()


def int4_weight_of(layer) -> Int4Weight:
    """The kernels' weight bundle from a workbench QuantizedLayer."""
    if getattr(layer, "g_idx", None) is not None:
        raise InvalidInputError(f"layer {layer.name}: act-order (g_idx) layers are not benchmarked")
    return Int4Weight(layer.int4_weight(), layer.scales, layer.group_size, layer.zeros,
                      getattr(layer, "bias", None))


def synthetic_bench_layer(n: int, k: int, group_size: int, *, seed: int = 0,
                          symmetric: bool = True):
    """A seeded RTN-quantized normal(0, 0.02) layer (float weight kept for the float reference)."""
    from workbench.synthetic import synthetic_layer
    return synthetic_layer(name=f"synthetic_{n}x{k}_g{group_size}", out_features=n, in_features=k,
                           group_size=group_size, symmetric=symmetric, seed=seed)


# --------------------------------------------------------------------------- the path protocol
# Every face that runs a kernel path goes through these: prepare once per weight (or say why
# not), make the input outside any timed region, run, finish to float32 [M, N].


@dataclass
class _Prepared:
    path: KernelPath
    state: Any = None
    ok: bool = True
    why: str = ""
    skip_from_m: int | None = None  # too slow: larger M not timed
    last_call_s: float = 0.0
    copies: list = field(default_factory=list)  # GPU: more prepared weights to rotate over


def _prepare_paths(weight: Int4Weight, names: Sequence[str], *, ms: Sequence[int] = (),
                   w_float: torch.Tensor | None = None, on_stage: Stage | None = None) -> dict[str, _Prepared]:
    """Each named path prepared for `weight`, or marked with why it cannot run it.

    Nothing is allocated before every name is a known path and, for a sweep up to max(`ms`),
    before the memory it still needs (beside the tensors the caller holds) is known to fit.
    """
    paths: dict[str, KernelPath] = {}
    for name in names:
        paths[name] = execution_path(name)  # the kernels' paths, and Marlin W4A8-INT8 composed there
    if ms:
        check_fits(bench_bytes(weight.n, weight.k, max(ms), len(names)) - _held_bytes(weight, w_float),
                   f"benchmarking N = {weight.n}, K = {weight.k}, M up to {max(ms)} on {len(names)} "
                   "path(s)", "use fewer or smaller token counts, or a smaller layer")
    prepared: dict[str, _Prepared] = {}
    for name, path in paths.items():
        ok, why = path.availability(weight)
        p = _Prepared(path, ok=ok, why=why if not ok else "")
        if ok:
            if on_stage:
                on_stage(name, None, "the weight's preparation")
            try:
                p.state = path.prepare(weight)
            except KernelError as exc:
                p.ok, p.why = False, str(exc)
        prepared[name] = p
    return prepared


def _held_bytes(weight: Int4Weight, w_float: torch.Tensor | None) -> int:
    """The bytes a sweep's caller already holds: the layer's tensors and its float weight."""
    return sum(t.numel() * t.element_size() for t in (weight.w_q, weight.scales, weight.zeros,
                                                       weight.bias, w_float) if t is not None)


def _path_input(p: _Prepared, x: torch.Tensor) -> Any:
    xin = x.to(p.path.activation_dtype) if p.path.activation_dtype else x
    return p.path.make_input(xin, p.state)


def first_call_s(weight: Int4Weight, path: KernelPath) -> float:
    """Seconds to prepare `path` for `weight` and make its first call, at M = 1: a path that
    compiles its kernels then (`KernelPath.jit`) pays for it here, not in a sweep's timed calls."""
    t0 = time.perf_counter()
    p = _Prepared(path, path.prepare(weight))
    p.path.run(_path_input(p, bench_activation(1, weight.k)), p.state)
    _sync(p.path.device)
    return time.perf_counter() - t0


def bench_activation(m: int, k: int, seed: int = 0) -> torch.Tensor:
    """[m, k] seeded normal activations in bf16: what the bench feeds every path at M = m."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + m)
    return torch.randn(m, k, generator=gen).to(torch.bfloat16)


def float_weight(weight: Int4Weight, w_float: torch.Tensor | None) -> torch.Tensor:
    """The float64 weight the float reference multiplies: the source weight where there is
    one, else the int4 weight dequantized."""
    return (w_float if w_float is not None else _dequant64(weight)).to(torch.float64)


def float_reference(x: torch.Tensor, wf: torch.Tensor) -> torch.Tensor:
    """x @ W_float^T in float64, the bias left out (it adds no quantization error)."""
    return x.to(torch.float64) @ wf.t()


def _reference_bias(weight: Int4Weight, adds_bias: bool) -> torch.Tensor | int:
    # A path whose op adds the layer's bias is judged against references with it too: the
    # error stays the GEMM's (the other paths and references leave the bias out).
    return weight.bias.to(torch.float64) if adds_bias and weight.bias is not None else 0


def per_token_errors(weight: Int4Weight, w_float: torch.Tensor | None, paths: Sequence[str],
                     x: torch.Tensor) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Each path's relative error per token (row of x) against the float reference.

    Returns (errors by path, why a path did not run).
    """
    from workbench.metrics import per_token_rel_error

    ref = float_reference(x, float_weight(weight, w_float))
    out, skipped = {}, {}
    for name, p in _prepare_paths(weight, paths).items():
        if not p.ok:
            skipped[name] = p.why
            continue
        try:
            inputs = _path_input(p, x)
            y = p.path.finish(p.path.run(inputs, p.state), inputs, p.state)
        except KernelError as exc:
            skipped[name] = str(exc)
            continue
        out[name] = per_token_rel_error(y, ref + _reference_bias(weight, p.path.adds_bias)).tolist()
    return out, skipped


# --------------------------------------------------------------------------- the sweep


def _rows(m: int, error_rows: int) -> torch.Tensor:
    if m <= error_rows:
        return torch.arange(m)
    return torch.linspace(0, m - 1, error_rows).round().long().unique()


def _detail(p: _Prepared, m: int) -> str:
    state = p.state
    # what the kernel noted about accepted but unusual input (e.g. negative scales)
    notes = "; ".join(getattr(state, "notes", ()))
    engine_for = getattr(state, "engine_for", None)  # W4A8: the engine can differ by M
    engine = engine_for(m) if engine_for is not None else getattr(state, "engine", None)
    if engine is not None:
        return "; ".join(filter(None, [f"int8 engine {engine.value}", notes]))
    choices = getattr(state, "choices", None)
    if choices is not None and p.path.name == "w4a16_fallback":
        from w4a8_kernels.cpu_w4a16 import fallback_choice
        return "; ".join(filter(None, [f"ran {fallback_choice(state, m)}", notes]))
    return notes


def _check_sweep(paths: Sequence[str], ms: Sequence[int], warmup: int, repeats: int,
                 error_rows: int, max_call_s: float, slow_call_s: float) -> tuple[list[int], int, int]:
    """The sweep's arguments checked; (ms, warmup, repeats)."""
    if isinstance(paths, str) or not paths or not all(isinstance(p, str) for p in paths):
        raise InvalidInputError(f"paths: {shown(paths)}; accepted: a list of kernel path names")
    ms = check_ms(ms)  # M = 0 would time an empty GEMM and leave its errors None
    warmup, repeats = check_int("warmup", warmup, 0, 100), check_int("repeats", repeats, 1, 1000)
    check_int("error_rows", error_rows, 1, MAX_M)
    check_positive("max_call_s", max_call_s, 3600), check_positive("slow_call_s", slow_call_s, 3600)
    return ms, warmup, repeats


def _first_calls(prepared: dict[str, _Prepared], per_m: dict[str, BenchRecord], x: torch.Tensor,
                 m: int, warmup: int, max_call_s: float, on_stage: Stage | None = None
                 ) -> tuple[list[tuple[str, Any]], dict[str, torch.Tensor]]:
    """The untimed first calls at one M: each runnable path's output (the one judged) and
    warm-up; returns the live paths with their inputs, and the outputs."""
    live: list[tuple[str, Any]] = []
    outputs: dict[str, torch.Tensor] = {}
    for name, rec in per_m.items():
        p = prepared[name]
        if not p.ok:
            continue
        if p.skip_from_m is not None and m >= p.skip_from_m:
            rec.why = (f"not timed: one call at M = {p.skip_from_m // 2 or 1} or below took "
                       f"{p.last_call_s:.1f} s, over the {max_call_s:.0f} s budget")
            continue
        if on_stage:
            on_stage(name, m, "the first call")
        try:
            inputs = _path_input(p, x)
            t0 = time.perf_counter()
            out = p.path.run(inputs, p.state)  # warm-up call, also the output we judge
            _sync(p.path.device)
            p.last_call_s = time.perf_counter() - t0
            outputs[name] = p.path.finish(out, inputs, p.state)
            for _ in range(max(0, warmup - 1)):
                p.path.run(inputs, p.state)
            live.append((name, inputs))
        except KernelError as exc:
            rec.available, rec.why = False, str(exc)
    return live, outputs


def _time_round_robin(prepared: dict[str, _Prepared], live: list[tuple[str, Any]], m: int,
                      repeats: int, slow_call_s: float, seed: int
                      ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and thread-CPU samples of each live path, one call of each per round."""
    samples: dict[str, list[float]] = {name: [] for name, _ in live}
    cpu_samples: dict[str, list[float]] = {name: [] for name, _ in live}
    slow = {name for name, _ in live if prepared[name].last_call_s > slow_call_s}
    order = random.Random(seed * 7919 + m)
    for r in range(repeats):
        # a fresh random order each round: the call after a large one meets colder
        # caches, and a fixed (or rotated) order gives each path the same predecessor
        order.shuffle(live)
        for name, inputs in live:
            if name in slow and r > 0:
                continue
            p = prepared[name]
            c0, t0 = time.thread_time(), time.perf_counter()
            p.path.run(inputs, p.state)
            _sync(p.path.device)
            samples[name].append(time.perf_counter() - t0)
            cpu_samples[name].append(time.thread_time() - c0)
    return samples, cpu_samples


def _time_on_gpu(p: _Prepared, weight: Int4Weight, inputs: Any, m: int, seed: int) -> tuple[Timing, str]:
    """Device time of a GPU path at M = m (workbench.gpu_timing), and how it was taken: its
    calls rotate over prepared copies of the weight and activations that pass the L2 three
    times, as a layer in a model reads its weight from memory."""
    weight_bytes = weight.n * weight.k // 2 + weight.scales.numel() * weight.scales.element_size()
    copies = copies_for(weight_bytes + m * weight.k * 2)
    while 1 + len(p.copies) < copies:  # kept for the larger M of the sweep
        p.copies.append(p.path.prepare(weight))
    states = [p.state, *p.copies][:copies]
    xs = [inputs] + [_path_input(replace(p, state=states[i % len(states)]),
                                 bench_activation(m, weight.k, seed + 1 + i))
                     for i in range(1, min(copies, 8 if m >= 256 else MAX_COPIES))]
    fns = [lambda st=states[i % len(states)], xi=xs[i % len(xs)]: p.path.run(xi, st)
           for i in range(max(len(states), len(xs)))]
    d = time_device(fns)
    how = f"device: {d.method} over {len(states)} weight / {len(xs)} input copies"
    return Timing(d.median_us / 1e3, d.p20_us / 1e3, d.p80_us / 1e3, d.min_us / 1e3, d.max_us / 1e3,
                  d.samples), how


def _set_timing(rec: BenchRecord, t: Timing) -> None:
    rec.median_ms, rec.p20_ms, rec.p80_ms = t.median_ms, t.p20_ms, t.p80_ms
    rec.cpu_median_ms = t.cpu_median_ms
    rec.min_ms, rec.max_ms, rec.repeats = t.min_ms, t.max_ms, t.repeats


def bench_weight(
    weight: Int4Weight,
    w_float: torch.Tensor | None,
    paths: Sequence[str],
    ms: Sequence[int],
    *,
    warmup: int = 1,
    repeats: int = 5,
    error_rows: int = 64,
    max_call_s: float = 10.0,
    slow_call_s: float = 1.0,
    seed: int = 0,
    layer_name: str = "",
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_stage: Stage | None = None,
) -> list[BenchRecord]:
    """Records for every (path, M): timings, errors, or why a path did not run.

    A path whose call took longer than `max_call_s` is not timed at larger M (its
    records say so); one slower than `slow_call_s` is timed once per M instead of
    `repeats` times. `should_stop()` returning True ends the sweep early. `on_stage` hears
    which path runs at which M before each untimed call (a child process names a crash by it).
    """
    ms, warmup, repeats = _check_sweep(paths, ms, warmup, repeats, error_rows, max_call_s, slow_call_s)
    prepared = _prepare_paths(weight, paths, ms=ms, w_float=w_float, on_stage=on_stage)
    n, k, g = weight.n, weight.k, weight.group_size
    wf = float_weight(weight, w_float)
    total = len(ms) * len(paths)
    done = 0
    records: list[BenchRecord] = []
    threads = torch.get_num_threads()
    start = cpu_sample()
    for m in sorted(ms):
        if should_stop and should_stop():
            break
        x = bench_activation(m, k, seed)
        rows = _rows(m, error_rows)
        per_m = {name: BenchRecord(
            path=name, m=m, n=n, k=k, group_size=g, median_ms=None, rel_error=None,
            available=p.ok, why=p.why, computes=p.path.computes.value, emulated=p.path.emulated,
            activation_dtype=str(p.path.activation_dtype or x.dtype).replace("torch.", ""),
            threads=threads, layer=layer_name) for name, p in prepared.items()}
        live, outputs = _first_calls(prepared, per_m, x, m, warmup, max_call_s, on_stage)
        on_gpu = [(name, inputs) for name, inputs in live if prepared[name].path.device == "cuda"]
        if on_stage and len(live) > len(on_gpu):
            on_stage("", m, "the timed calls (round-robin over " + ", ".join(
                name for name, xin in live if (name, xin) not in on_gpu) + ")")
        samples, cpu_samples = _time_round_robin(
            prepared, [pair for pair in live if pair not in on_gpu], m, repeats, slow_call_s, seed)
        refs: dict[str, torch.Tensor] = {}
        for name, inputs in live:
            p, rec = prepared[name], per_m[name]
            if (name, inputs) in on_gpu:
                if on_stage:
                    on_stage(name, m, "the device timing")
                # device time; the first call (a JIT compile) is shown apart and never
                # counts against the budget
                t, rec.timing = _time_on_gpu(p, weight, inputs, m, seed)
                rec.first_call_s = round(p.last_call_s, 4)
                rec.eager_ms = round(eager_us(lambda: p.path.run(inputs, p.state)) / 1e3, 5)
                too_slow = t.min_ms / 1e3 > max_call_s
            else:
                t = summarize(samples[name], cpu_samples[name])
                rec.timing = "host clock"
                too_slow = p.last_call_s > max_call_s or t.min_ms / 1e3 > max_call_s
            _set_timing(rec, t)
            rec.detail = _detail(p, m)
            if too_slow:
                p.skip_from_m = m * 2
            if m and rows.numel():
                _fill_errors(rec, outputs[name], x, rows, weight, wf, refs, p.path.adds_bias)
        for name in paths:
            records.append(per_m[name])
            done += 1
            if progress:
                progress(done, total, f"M = {m}: {name}")
    busy = others_cores(start, cpu_sample())  # the run's load, on each record it produced
    for rec in records:
        rec.others_cores = None if busy is None else round(busy, 2)
    return records


def _dequant64(weight: Int4Weight) -> torch.Tensor:
    from w4a8_kernels.quant import dequantize_groupwise
    return dequantize_groupwise(weight.w_q, weight.scales, weight.group_size, weight.zeros,
                                dtype=torch.float64)


def _fill_errors(rec: BenchRecord, out: torch.Tensor, x: torch.Tensor, rows: torch.Tensor,
                 weight: Int4Weight, wf: torch.Tensor, refs: dict, adds_bias: bool = False) -> None:
    if rec.computes == Computes.INT8 and weight.effective_group != weight.k:
        rec.detail = "speed bound only: the integer GEMM alone applies no group scales"
        return
    xs = x[rows]
    if "float" not in refs:
        refs["float"] = float_reference(xs, wf)
    o = out[rows]
    if not bool(torch.isfinite(o).all()):
        rec.why = (rec.why + "; " if rec.why else "") + "output holds Inf or NaN"
    bias = _reference_bias(weight, adds_bias)
    rep = compare(o, refs["float"] + bias)
    rec.rel_error, rec.sqnr_db, rec.cosine = rep.rel_error, rep.sqnr_db, rep.cosine
    rec.max_abs_error, rec.worst_token_rel_error = rep.max_abs_error, rep.worst_token_rel_error
    rec.error_rows = int(rows.numel())
    key = "w4a8" if rec.computes in (Computes.W4A8, Computes.INT8) else "w4a16"
    if key not in refs:
        fn = w4a8_reference if key == "w4a8" else w4a16_reference
        refs[key] = fn(xs, weight.w_q, weight.scales, weight.group_size, weight.zeros)
    rec.kernel_rel_error = compare(o, refs[key] + bias).rel_error


def bench_layer_weight(layer, paths: Sequence[str], ms: Sequence[int], **kwargs) -> list[BenchRecord]:
    """`bench_weight` for a workbench QuantizedLayer (its float weight when it has one)."""
    return bench_weight(int4_weight_of(layer), getattr(layer, "source_weight", None), paths, ms,
                        layer_name=layer.name, **kwargs)


def write_json(records: Iterable[BenchRecord], path: str | Path, provenance: dict,
               extra: dict | None = None) -> Path:
    """Timed records in the one results schema (`workbench.results`); untimed ones (a path
    unavailable here) go to the document's "not_run" list with their reason."""
    from workbench.results import results_document

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recs = list(records)
    if "load_check" not in provenance:  # a caller that measured none: the records' own, flagged
        noise = timing_noise([r.to_dict() for r in recs], [provenance.get("loadavg_1m")])
        provenance = {**provenance, "load_check": {"loaded": noise.overloaded, "crowded": noise.crowded,
                                                   "others_cores": noise.others_cores,
                                                   "threads": noise.threads, "cores": noise.cores}}
    doc = results_document({"platform": "host", **provenance},
                           [_schema_dict(r) for r in recs if r.median_ms is not None])
    skipped = [r.to_dict() for r in recs if r.median_ms is None]
    if skipped:
        doc["not_run"] = skipped
    doc.update(extra or {})
    path.write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
    return path


def _json_default(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return str(obj)


def write_csv(records: Iterable[BenchRecord], path: str | Path, provenance: dict) -> Path:
    """Tidy CSV: one row per record, provenance repeated in prov_* columns."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [f.name for f in fields(BenchRecord)]
    prov_cols = {f"prov_{k}": (json.dumps(v) if isinstance(v, (list, dict)) else v)
                 for k, v in provenance.items()}
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=names + list(prov_cols))
        w.writeheader()
        for r in records:
            w.writerow({**r.to_dict(), **prov_cols})
    return path


_SCHEMA_MAIN = ("path", "m", "n", "k", "group_size", "repeats")


def _schema_dict(r: BenchRecord) -> dict:
    d = r.to_dict()
    ms = {key: d.pop(key) for key in ("median_ms", "p20_ms", "p80_ms")}
    main = {key: d.pop(key) for key in _SCHEMA_MAIN}
    return {**main, "kernel": r.detail or r.path, "median_us": ms["median_ms"] * 1e3,
            "p20_us": (ms["p20_ms"] or ms["median_ms"]) * 1e3,
            "p80_us": (ms["p80_ms"] or ms["median_ms"]) * 1e3, "config": None, "detail": d}


def result_record(r: BenchRecord) -> ResultRecord:
    """A timed BenchRecord in the one results schema (µs; the errors and the rest in `detail`):
    the bench's one conversion from its milliseconds."""
    if r.median_ms is None:
        raise InvalidInputError(f"record {r.path} at M = {r.m}: not timed ({r.why or 'no time'}); "
                                "accepted: a timed record")
    return ResultRecord(**_schema_dict(r))


def records_from_json(path: str | Path) -> tuple[dict, list[BenchRecord]]:
    """BenchRecords of a results file in any committed form (read by `workbench.results`)."""
    from workbench.results import load_results

    res = load_results(path)
    known = {f.name for f in fields(BenchRecord)}
    recs = []
    for r in res.records:
        extra = {k: v for k, v in r.detail.items() if k in known}
        recs.append(BenchRecord(**{**extra, "path": r.path, "m": r.m, "n": r.n, "k": r.k,
                                   "group_size": r.group_size, "median_ms": r.median_us / 1e3,
                                   "p20_ms": r.p20_us / 1e3, "p80_ms": r.p80_us / 1e3,
                                   "repeats": r.repeats, "rel_error": extra.get("rel_error"),
                                   "available": extra.get("available", True)}))
    recs += [BenchRecord(**{k: v for k, v in r.items() if k in known}) for r in res.not_run]
    return res.provenance, recs
