"""This machine, measured: a short calibration (memory streaming, int8 and float GEMM
throughput, and the CPU kernel paths at a few shapes), cached per machine, thread count,
torch build and kernel sources (a kernel change makes the cache stale).

Each CPU path is a sum of what it does, fitted (non-negative least squares on relative
error) on the paths' own timings from `workbench.bench`:

    t = c0 + c_w * N*K (weight read / unpack) + c_mac * M*N*K (multiply-adds)
           + c_x * M*K (activation quantization / conversion) + c_y * M*N (output)

The model follows what the kernels run:
- W4A8 native: one fit per int8 engine, and per M the engine the prepared weight's
  `engine_for(m)` names (kernels/w4a8_kernels/cpu_w4a8.py; read from the kernels at calibration as
  the M from which each engine runs, so a new threshold needs no edit here);
- the W4A16 fallback: the fastest for the M of its variants (tinygemm, dequant + fp32,
  dequant + bf16 where bf16 is native: kernels/w4a8_kernels/cpu_w4a16.py fallback_candidates), each
  fitted on its own;
- `dense`: the fastest float GEMM per M (kernels/w4a8_kernels/cpu_dense.py), fitted as it runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform as _platform
import random
import time
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

__all__ = ["LinearFit", "HostCalibration", "Sample", "host_calibration", "fit_linear", "features",
           "measure_host", "plan_for", "fit_host", "FLOOR_SHAPES", "Floors", "engine_steps", "save_host_calibration", "CALIBRATION_SHAPES", "CALIBRATION_MS",
           "CPU_PATHS", "CalibrationSpreadWarning", "CalibrationLoadWarning", "loaded_calibration",
           "load_sentence", "spread_of", "calibrated_with_retries", "WIDE_SPREAD",
           "SLOW_PATHS", "bench_paths", "host_key", "measure_throughputs", "runs_here", "host_threads",
           "CalibrationRefusedWarning"]

# Shapes and token counts the host calibration times (small: seconds in all). Predictions
# elsewhere are extrapolations of the fitted terms, checked by benchmarks/validate_perf.py.
# The weights span 4-19 M elements (one size would leave the fixed and per-weight terms
# indistinguishable) and three aspect ratios.
CALIBRATION_SHAPES = ((2048, 2048), (4096, 2048), (3072, 6144))
# 1-16 and 32-128 on each side of the W4A8 engine switch (LARGE_M = 24 today): each engine
# gets three token counts per shape.
CALIBRATION_MS = (1, 4, 16, 32, 64, 128)
# Layers so small that a call is its fixed cost: each path's (and each W4A8 engine's) fastest
# call on them, at each calibrated M, is that path's per-call floor, held as the fit's fixed
# term instead of fitted from the large shapes, which cannot tell it apart (an AMX host's W4A8
# fit put 44 us on a 64 x 64 call that took 9). Two sizes, because torch switches kernels just
# above 64 x 64: its bf16 call took 4 us there at M = 1 and 21-24 us at 96 x 160, 128 x 128,
# 64 x 256 and 256 x 64 (this Xeon; 8 and 23-35 us on an AMX host). A layer no larger than
# the largest is read off them; a larger one takes the largest's floor plus the fitted terms
# (`Floors`, `LinearFit.predict`).
FLOOR_SHAPES = ((64, 64), (128, 128))
SMALL_LAYER = 256 * 256  # weights of at most this many elements are timed more often (measure_host)
CALIBRATION_GROUP = 128
# Prediction path -> the bench paths whose fits predict it (the fastest of them wins, as
# the fallback's own per-M chooser keeps the fastest variant).
CPU_PATHS = {"w4a8_native": ("w4a8_native",),
             "w4a16_fallback": ("w4a16_tinygemm", "w4a16_dequant", "w4a16_dequant_bf16"),
             "bf16_dense": ("bf16_dense",), "dense": ("dense",), "int8_mm": ("int8_mm",),
             "vllm_dynamic4bit": ("vllm_dynamic4bit",)}
# vLLM's x86 Dynamic4bit reference loop is slow (tens of ms per token at 4096 x 4096):
# timed at small M only, where its per-token cost is already clear.
SLOW_PATHS = {"vllm_dynamic4bit": (1, 2, 4)}
_ENGINE_SCAN = 4096  # engine_for is read for M = 1.._ENGINE_SCAN; beyond, the last engine runs
_FIT_VERSION = "6"  # 4: a measured floor; 5: small layers timed 5x as often; 6: floors by size and M
_MIN_POINTS = 5  # one per feature


def features(m: int, n: int, k: int) -> np.ndarray:
    return np.array([1.0, n * k, m * n * k, m * k, m * n], dtype=float)


@dataclass(frozen=True)
class Floors:
    """A path's measured per-call floors: ((weight elements, ((M, us), ...)), ...) by size.
    A layer takes the smallest size at least its own (the largest beyond them all), and at
    that size the floor of the largest calibrated M up to its M (the first M's below them).
    A size's floor at M is the least time of any M at or above it: never less at more
    tokens, nor, as each size is held to the smaller sizes' floors, at a larger layer."""

    by_size: tuple = ()

    @staticmethod
    def measured(samples: dict[tuple[int, int], dict[int, float]]) -> "Floors":
        """samples: (n, k) -> {M: fastest us}."""
        out, held = [], {}
        for (n, k), by_m in sorted(samples.items(), key=lambda kv: kv[0][0] * kv[0][1]):
            # the most that stays under every larger M's time: a slow outlier (an AMX host read
            # 80 us at M = 1 and 18 us at M = 4 on one 128 x 128 layer) lifts nothing
            row, low = [], float("inf")
            for m in sorted(by_m, reverse=True):
                low = min(low, by_m[m])
                row.append((m, low))
            row = [(m, max(us, held.get(m, 0.0))) for m, us in reversed(row)]
            held = dict(row)
            out.append((n * k, tuple(row)))
        return Floors(tuple(out))

    def at(self, m: int, n: int, k: int) -> float:
        size = n * k
        row = next((r for s, r in self.by_size if s >= size), self.by_size[-1][1])
        return self._in_row(row, m)

    @staticmethod
    def _in_row(row: tuple, m: int) -> float:
        below = [us for mm, us in row if mm <= m]
        return below[-1] if below else row[0][1]

    def covers(self, m: int, n: int, k: int) -> bool:
        """Whether the layer is no larger than the largest floor layer, at no more tokens than
        the floors were timed at (there the floor layers timed it whole)."""
        return n * k <= self.by_size[-1][0] and m <= self.by_size[-1][1][-1][0]

    @staticmethod
    def _between(row: tuple, m: int) -> float:
        """A row at M, linear between the calibrated Ms around it (an AMX host's 96 x 160 call
        at M = 48 took 61 us, twice the floors' M = 32 figures)."""
        for (m0, a), (m1, b) in zip(row, row[1:]):
            if m <= m1:
                return a if m <= m0 else a + (b - a) * (m - m0) / (m1 - m0)
        return row[-1][1]

    def small_layer(self, m: int, n: int, k: int) -> float:
        """A layer `covers` takes: its time read off the floor layers, linear in the weight's
        elements between the two around it (the smallest's below it) and in M between the
        calibrated Ms."""
        size = n * k
        lo = (0, self.by_size[0][1])
        for s, row in self.by_size:
            if s >= size:
                a, b = self._between(lo[1], m), self._between(row, m)
                return b if size <= lo[0] or s == lo[0] else a + (b - a) * (size - lo[0]) / (s - lo[0])
            lo = (s, row)
        return self._between(self.by_size[-1][1], m)


@dataclass(frozen=True)
class LinearFit:
    coef: tuple[float, ...]  # us per feature (see module docstring)
    n_points: int
    rms_log: float
    err_lo: float  # 5th / 95th percentiles of log(measured / fitted), held-out where known
    err_hi: float
    floors: Floors | None = None  # the fixed term where measured (coef[0]: the largest size's, at M = 1)

    def predict(self, m: int, n: int, k: int) -> float:
        x = features(m, n, k)
        if self.floors is None:
            return float(x @ np.array(self.coef))
        if self.floors.covers(m, n, k):  # timed whole at that size: the large shapes' terms do not apply
            return self.floors.small_layer(m, n, k)
        return self.floors.at(m, n, k) + float(x[1:] @ np.array(self.coef[1:]))


def fit_linear(points: Sequence[tuple[int, int, int, float]], c0: float | Floors | None = None) -> LinearFit:
    """points: (m, n, k, us). c0: the fixed per-call term, held instead of fitted (results
    at one weight size cannot tell it from the per-weight term): one figure, or the floors
    measured per size and M."""
    from workbench.perf.fit import nnls

    x = np.stack([features(m, n, k) for m, n, k, _ in points])
    t = np.array([p[3] for p in points])
    floors = c0 if isinstance(c0, Floors) else None
    norm = np.maximum(np.abs(x).max(axis=0), 1e-12)
    # a term proportional to another over these points is left out (at one K, M*N is M*N*K / K:
    # the fit could split the two any way, and another K would see the split)
    use = np.ones(x.shape[1], dtype=bool)
    use[4] = len({k for _, _, k, _ in points}) > 1
    use[3] = len({n for _, n, _, _ in points}) > 1
    coef = np.zeros(x.shape[1])
    if c0 is None:
        coef[use] = nnls(x[:, use] / t[:, None] / norm[use], np.ones_like(t)) / norm[use]
    else:
        use[0] = False
        fixed = (np.array([floors.at(m, n, k) for m, n, k, _ in points]) if floors is not None
                 else np.full_like(t, c0))
        coef[use] = nnls(x[:, use] / t[:, None] / norm[use], 1 - fixed / t) / norm[use]
        coef[0] = floors.by_size[-1][1][0][1] if floors is not None else c0
    fit = LinearFit(tuple(float(c) for c in coef), len(points), 0.0, 0.0, 0.0, floors)
    resid = np.log(t / np.maximum([fit.predict(m, n, k) for m, n, k, _ in points], 1e-9))
    lo, hi = np.percentile(resid, [5, 95])
    return LinearFit(fit.coef, len(points), float(np.sqrt(np.mean(resid ** 2))), float(lo), float(hi),
                     floors)


def _engine_at(steps: tuple, m: int) -> str | None:
    """The engine of the last step starting at or below m."""
    engine = None
    for first, name in steps:
        if m >= first:
            engine = name
    return engine


def _engine_key(engine: str) -> str:
    return f"w4a8_native@{engine}"


@dataclass(frozen=True)
class HostCalibration:
    """This machine's measured figures and fitted path models."""

    key: str
    stream_gbs: float
    fp32_tflops: float
    bf16_tflops: float
    int8_tops: float
    threads: int
    seconds: float
    fits: dict = field(default_factory=dict)  # bench path (W4A8: also per engine) -> LinearFit
    provenance: dict = field(default_factory=dict)
    # ((first M, engine), ...): the int8 engine a grouped W4A8 call of M tokens runs
    engine_steps: tuple = ()

    def engine_for(self, m: int) -> str | None:
        return _engine_at(self.engine_steps, m)

    def _fit(self, bench_path: str, m: int) -> LinearFit | None:
        if bench_path == "w4a8_native":
            engine = self.engine_for(m)
            if engine is not None and _engine_key(engine) in self.fits:
                return self.fits[_engine_key(engine)]
        return self.fits.get(bench_path)

    def candidates(self, path: str, m: int) -> list[LinearFit]:
        """The fits of what a path may run at M (the fastest of them runs)."""
        fits = [f for f in (self._fit(p, m) for p in CPU_PATHS.get(path, (path,))) if f is not None]
        if not fits and path in self.fits:  # results that timed the path whole (committed files)
            fits = [self.fits[path]]
        return fits

    def predict(self, path: str, m: int, n: int, k: int) -> tuple[float, LinearFit] | None:
        """(us, the fit that gave it) for a path, or None if it was not calibrated here."""
        cands = [(f.predict(m, n, k), f) for f in self.candidates(path, m)]
        return min(cands, key=lambda c: c[0]) if cands else None

    def to_json(self) -> dict:
        d = asdict(self)
        d["fits"] = {p: asdict(f) for p, f in self.fits.items()}
        return d


def _time(fn, repeats: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure_throughputs() -> dict:
    """This machine's streaming GB/s and fp32 / bf16 / int8 GEMM rates, measured now."""
    import torch

    a = torch.ones(64 * 2 ** 20 // 4)  # 64 MB of float32: well past the caches of most parts
    b = torch.empty_like(a)
    stream = 2 * a.numel() * 4 / _time(lambda: b.copy_(a)) / 1e9
    n = 1024
    f = torch.randn(n, n)
    fp32 = 2 * n ** 3 / _time(lambda: f @ f) / 1e12
    h = f.to(torch.bfloat16)
    bf16 = 2 * n ** 3 / _time(lambda: h @ h) / 1e12
    try:
        q = torch.randint(-8, 8, (n, n), dtype=torch.int8)
        int8 = 2 * n ** 3 / _time(lambda: torch._int_mm(q, q.t())) / 1e12
    except RuntimeError:
        int8 = 0.0  # no CPU _int_mm in this build
    return {"stream_gbs": stream, "fp32_tflops": fp32, "bf16_tflops": bf16, "int8_tops": int8}


def _kernels_digest() -> str:
    """The CPU kernels' sources (Python and C), found without importing them: a changed
    kernel makes a cached calibration stale."""
    from importlib.util import find_spec

    spec = find_spec("w4a8_kernels")
    if spec is None or not spec.submodule_search_locations:
        return ""
    root = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(root.glob("cpu_*.py")) + sorted(root.glob("_*.py")) + sorted((root / "csrc").glob("*.c"))
    h = hashlib.sha256()
    for f in files:
        try:
            h.update(f.name.encode() + f.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:12]


def host_key() -> str:
    """This machine (its ISA flags), thread count, torch build and kernel sources, read
    without importing torch (the app's landing page asks whether a calibration is cached,
    and must not pay torch's import)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = ""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                cpu += line
            if line.startswith("flags"):
                break
    except OSError:
        cpu = _platform.processor()
    ident = json.dumps([cpu, _platform.machine(), torch_version, _FIT_VERSION, CALIBRATION_SHAPES,
                        CALIBRATION_MS, _kernels_digest(), *runs_here()])
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def host_threads() -> int:
    """The compute threads a calibration here runs with: torch's count where torch is loaded
    (a set_num_threads counts), else what it will read ($OMP_NUM_THREADS, else the CPUs this
    process may run on)."""
    import sys

    if "torch" in sys.modules:
        return int(sys.modules["torch"].get_num_threads())
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def runs_here() -> tuple:
    """What changes which engines run and how fast, beyond the CPU: the ISA cap
    ($W4A8_KERNELS_MAX_ISA), each C engine's verdict (admitted after its self-test, or why
    not) and the thread count. Part of a calibration's key: a capped run, an engine refused
    or another thread count is another calibration, never one overwriting the other."""
    try:
        from w4a8_kernels.native import isa_cap, verdicts

        cap, verdict = isa_cap(), sorted(verdicts().items())
    except ImportError:  # an install without the C engines: nothing of theirs runs
        cap, verdict = os.environ.get("W4A8_KERNELS_MAX_ISA") or None, []
    return (f"isa_cap={cap}", verdict, f"threads={host_threads()}")


@dataclass(frozen=True)
class Sample:
    """One bench path at one shape and M: its fastest call over all rounds (bench's
    min_ms). Another process holding a core only ever makes a call slower, so on a shared
    machine the fastest call is the one nearest the quiet figure."""

    path: str  # bench path; W4A8 native as w4a8_native@<engine>
    n: int
    k: int
    m: int
    us: float
    rounds: int


def engine_steps(n: int = 1024, k: int = 1024, group: int = CALIBRATION_GROUP) -> tuple:
    """((first M, engine), ...) as a prepared grouped W4A8 weight's `engine_for` says."""
    from workbench.bench import int4_weight_of, synthetic_bench_layer
    from w4a8_kernels.registry import get_path

    prepared = get_path("w4a8_native").prepare(int4_weight_of(synthetic_bench_layer(n, k, group)))
    steps: list = []
    for m in range(1, _ENGINE_SCAN + 1):
        e = prepared.engine_for(m).value
        if not steps or steps[-1][1] != e:
            steps.append((m, e))
    return tuple(steps)


def bench_paths() -> list[str]:
    """The kernel paths a calibration times (each CPU path's variants)."""
    return sorted({p for ps in CPU_PATHS.values() for p in ps})


def plan_for(shapes: Iterable[tuple[int, int]], ms: Sequence[int],
             paths: Sequence[str] | None = None) -> dict:
    """{(N, K): (bench paths, token counts)} for `measure_host` (default: the model's paths)."""
    return {tuple(s): (list(paths) if paths is not None else bench_paths(), tuple(ms)) for s in shapes}


def measure_host(plan: dict, *, rounds: int = 1, steps: tuple = (), repeats: int = 3,
                 seed: int = 0, on_round=None) -> list[Sample]:
    """Bench each shape's paths at its token counts (`plan_for`), `rounds` times, the shapes
    in a fresh random order each round (so load falls on all of them alike). W4A8 samples
    are keyed by the engine `steps` names for their M. on_round(r, seconds) is called after
    each round (the caller records the load)."""
    from w4a8_kernels.registry import get_path

    from workbench.bench import bench_weight, int4_weight_of, synthetic_bench_layer

    # group 128 where it divides K (the floor's 64 x 64 layer is per-channel)
    weights = {s: int4_weight_of(synthetic_bench_layer(s[0], s[1], CALIBRATION_GROUP if s[1] % CALIBRATION_GROUP == 0
                                                       else -1)) for s in plan}
    live = {s: [p for p in plan[s][0] if get_path(p).availability(w)[0]] for s, w in weights.items()}
    order = list(plan)
    best: dict = {}
    rng = random.Random(seed)
    for r in range(rounds):
        t0 = time.perf_counter()
        rng.shuffle(order)
        for s in order:
            w = weights[s]
            ms = plan[s][1]
            runs = [([p for p in live[s] if p not in SLOW_PATHS], ms)]
            runs += [([p], slow_ms) for p, slow_ms in SLOW_PATHS.items() if p in live[s]]
            for run_paths, run_ms in runs:
                if not run_paths:
                    continue
                # a small layer's calls take microseconds, where a woken thread or a neighbour's
                # spin is the whole call: more of them cost nothing (AMX host, 96 x 160: torch's
                # bf16 call read 72 us at M = 48 and 53 at M = 128 with 3 a round)
                reps = repeats if s[0] * s[1] > SMALL_LAYER else 5 * repeats
                for rec in bench_weight(w, None, run_paths, run_ms, repeats=reps, error_rows=1,
                                        seed=seed + r):
                    if rec.min_ms is None:
                        continue
                    path = rec.path
                    if path == "w4a8_native" and steps:
                        path = _engine_key(_engine_at(steps, rec.m))
                    key = (path, rec.n, rec.k, rec.m)
                    us = rec.min_ms * 1e3
                    old = best.get(key)
                    best[key] = (min(us, old[0]) if old else us, (old[1] if old else 0) + 1)
        if on_round is not None:
            on_round(r, time.perf_counter() - t0)
    return [Sample(p, n, k, m, us, cnt) for (p, n, k, m), (us, cnt) in sorted(best.items())]


def fit_host(samples: Iterable[Sample], key: str, throughputs: dict, threads: int, seconds: float,
             provenance: dict, steps: tuple = ()) -> HostCalibration:
    """A calibration from samples: one fit per bench path (W4A8: per engine, and pooled
    for callers that know no engine)."""
    pts: dict[str, list] = {}
    small: dict[str, dict] = {}  # path -> (n, k) -> {M: fastest us}
    for s in samples:
        paths = (s.path, "w4a8_native") if s.path.startswith("w4a8_native@") else (s.path,)
        for path in paths:
            if (s.n, s.k) in FLOOR_SHAPES:
                by_m = small.setdefault(path, {}).setdefault((s.n, s.k), {})
                by_m[s.m] = min(by_m.get(s.m, s.us), s.us)
            else:
                pts.setdefault(path, []).append((s.m, s.n, s.k, s.us))
    floors = {p: Floors.measured(v) for p, v in small.items()}
    fits = {p: _with_held_out_band(fit_linear(v, c0=floors.get(p)), v, floors.get(p))
            for p, v in pts.items() if len(v) >= _MIN_POINTS}
    return HostCalibration(key, throughputs["stream_gbs"], throughputs["fp32_tflops"],
                           throughputs["bf16_tflops"], throughputs["int8_tops"], threads, seconds,
                           fits, provenance, tuple(tuple(s) for s in steps))


def _with_held_out_band(fit: LinearFit, points: list, c0: float | Floors | None = None) -> LinearFit:
    """The fit, its band widened to the 5th-95th percentiles of leave-one-shape-out error
    (predictions are for shapes the calibration did not time)."""
    shapes = {(n, k) for _, n, k, _ in points}
    resid = []
    for held in shapes:
        rest = [p for p in points if (p[1], p[2]) != held]
        if len(rest) < _MIN_POINTS:
            continue
        f = fit_linear(rest, c0=c0)
        resid += [float(np.log(us / max(f.predict(m, n, k), 1e-9))) for m, n, k, us in points
                  if (n, k) == held]
    if not resid:
        return fit
    lo, hi = np.percentile(resid, [5, 95])
    return LinearFit(fit.coef, fit.n_points, fit.rms_log, min(fit.err_lo, float(lo)), max(fit.err_hi, float(hi)),
                     fit.floors)


def _cache_file(key: str) -> Path | None:
    from workbench.perf.calibrate import cache_dir

    d = cache_dir()
    return None if d is None else d / f"host-{key}.json"


def _from_json(d: dict) -> HostCalibration:
    def floors(f: dict) -> Floors | None:
        got = f.get("floors")
        return None if not got else Floors(tuple((int(size), tuple((int(m), float(us)) for m, us in row))
                                                 for size, row in got["by_size"]))

    fits = {p: LinearFit(tuple(f["coef"]), f["n_points"], f["rms_log"], f["err_lo"], f["err_hi"], floors(f))
            for p, f in d["fits"].items()}
    steps = tuple((int(m), str(e)) for m, e in d.get("engine_steps", ()))
    return HostCalibration(**{**d, "fits": fits, "engine_steps": steps})


class CalibrationRefusedWarning(UserWarning):
    """A calibration measured under load was not kept: a quiet one of this machine stands."""


def _write(cal: HostCalibration) -> bool:
    """Cache a calibration; False where it was refused: one measured under load never
    replaces a quiet one of the same key (it would turn a measured figure into noise)."""
    import warnings

    path = _cache_file(cal.key)
    if path is None:
        return False
    if loaded_calibration(cal) is not None and path.is_file():
        try:
            old = _from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            old = None
        if old is not None and loaded_calibration(old) is None:
            warnings.warn(f"this machine's new calibration was {load_sentence(loaded_calibration(cal))}: "
                          "refused, the quiet one cached before stands", CalibrationRefusedWarning, stacklevel=3)
            return False
    try:
        path.write_text(json.dumps(cal.to_json()))
    except OSError:
        return False  # read-only cache: measured again next process
    return True


def save_host_calibration(cal: HostCalibration) -> None:
    """Cache a calibration for this machine (a validation run's own is kept this way)."""
    _write(cal)
    host_calibration.cache_clear()


def _live_calibration() -> HostCalibration:
    import torch  # only to measure: a cached calibration is read without it (the app's landing page)

    from workbench.bench import host_provenance
    from workbench.noise import cpu_sample, load_check

    t0 = time.perf_counter()
    start = cpu_sample()
    thr = measure_throughputs()
    steps = engine_steps()
    samples = measure_host(plan_for((*CALIBRATION_SHAPES, *FLOOR_SHAPES), CALIBRATION_MS), steps=steps)
    threads = torch.get_num_threads()
    check = load_check(start, cpu_sample(), threads)
    return fit_host(samples, host_key(), thr, threads, time.perf_counter() - t0,
                    {**host_provenance(), "machine": _platform.machine(), "pid": os.getpid(),
                     "load_check": check.to_dict()}, steps)


# A fit whose own held-out band spans more than this factor (95th over 5th percentile of
# measured / fitted) was timed on a machine busy enough to make it noise: measured again.
WIDE_SPREAD = 4.0
_ATTEMPTS = 3


class CalibrationSpreadWarning(UserWarning):
    """This machine's calibration stayed wide after every retry (a busy machine)."""


class CalibrationLoadWarning(UserWarning):
    """Every attempt at this machine's calibration ran beside other processes' load."""


def loaded_calibration(cal: HostCalibration) -> dict | None:
    """The load check of a calibration measured under load (workbench.noise), else None."""
    check = cal.provenance.get("load_check") or {}
    return check if check.get("loaded") else None


def load_sentence(check: dict) -> str:
    """A loaded calibration's load, in words (the faces' one wording)."""
    others = check.get("others_cores")
    took = ("" if others is None else
            f"other processes kept {others:.1f} of its {check.get('cores')} cores busy")
    avg = max((x for x in (check.get("load_start"), check.get("load_end")) if x is not None), default=None)
    over = "" if avg is None or not check.get("load_over_cores") else f"load average {avg:.1f}"
    return "calibrated under load (" + ", ".join(filter(None, [took, over])) + ")"


def spread_of(cal: HostCalibration) -> tuple[float, str]:
    """(the widest fit's band factor, that fit's path)."""
    worst = max(((float(np.exp(f.err_hi - f.err_lo)), p) for p, f in cal.fits.items()), default=(1.0, ""))
    return worst


def calibrated_with_retries(measure=None) -> HostCalibration:
    """A live calibration (`measure()`, default this machine's), measured again while its
    own spread is wide (up to _ATTEMPTS in all); the narrowest is kept, and a warning says so
    if it is still wide."""
    import warnings

    best = None
    for attempt in range(_ATTEMPTS):
        cal = (measure or _live_calibration)()
        spread = spread_of(cal)
        check = loaded_calibration(cal)
        # an unloaded attempt beats a loaded one, the less loaded of two loaded ones, then
        # the narrower band
        rank = (check is not None, (check or {}).get("others_cores") or 0.0, spread[0])
        if best is None or rank < best[2]:
            best = (cal, spread, rank)
        if spread[0] <= WIDE_SPREAD and check is None:
            break
    cal, (factor, path), (loaded, _, _) = best
    cal.provenance["spread"] = {"worst_band_factor": round(factor, 2), "path": path, "attempts": attempt + 1}
    if factor > WIDE_SPREAD:
        warnings.warn(f"this machine's calibration is noisy: the {path} fit's band spans {factor:.0f}x "
                      f"after {attempt + 1} attempts (load average {os.getloadavg()[0]:.1f}); "
                      "its predictions are wide. Recalibrate on a quieter machine "
                      "(WORKBENCH_RECALIBRATE=1).", CalibrationSpreadWarning, stacklevel=3)
    if loaded:
        warnings.warn(f"this machine was {load_sentence(loaded_calibration(cal))} in all {attempt + 1} "
                      "attempts: its host predictions carry that load, and say so. Recalibrate on a "
                      "quieter machine (WORKBENCH_RECALIBRATE=1).", CalibrationLoadWarning, stacklevel=3)
    return cal


@lru_cache(maxsize=1)
def host_calibration(refresh: bool = False) -> HostCalibration:
    """This machine's calibration: read from the cache, or measured now (seconds).
    WORKBENCH_RECALIBRATE=1 measures again (a cache made on a loaded machine is noise)."""
    key = host_key()
    path = _cache_file(key)
    refresh = refresh or os.environ.get("WORKBENCH_RECALIBRATE", "") not in ("", "0")
    if path is not None and path.is_file() and not refresh:
        try:
            return _from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError):
            pass
    cal = calibrated_with_retries()
    if not _write(cal) and loaded_calibration(cal) is not None and path is not None and path.is_file():
        try:  # refused: the quiet calibration stands
            return _from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError):
            pass
    return cal


_COMMITTED = ("cpu_sweep_m.json", "cpu_sweep_group.json", "cpu_sweep_tp.json", "cpu_sweep_alignment.json")


@lru_cache(maxsize=1)
def committed_calibration() -> HostCalibration:
    """Fits of the committed CPU results (benchmarks/results/cpu_sweep_*.json, one machine):
    what CPU presets are scaled from, so no live run is needed for them.

    That machine's figures are the x86-avx2 part's per core times the cores its provenance
    records (the same ISA class; its results carry no throughput measurement of their own).
    """
    from workbench.perf.calibrate import H200_RESULTS
    from workbench.perf.hardware import hardware_for
    from workbench.results import load_results

    pts: dict[str, list] = {}
    prov: dict = {}
    for name in _COMMITTED:
        res = load_results(H200_RESULTS.with_name(name))
        prov = prov or res.provenance
        for r in res.records:
            if r.group_size in (-1, 128):  # the group sweep's other sizes are another kernel branch
                pts.setdefault(r.path, []).append((r.m, r.n, r.k, r.median_us))
    # one weight size (4096 x 4096) in most of them: the per-call term is the floor, not fitted
    from workbench.perf.cpu_classes import CPU_CALL_FLOOR_US

    fits = {p: fit_linear(v, c0=CPU_CALL_FLOOR_US) for p, v in pts.items() if len(v) >= 5}
    ref = hardware_for("x86-avx2")
    cores = int(prov.get("threads") or prov.get("cores") or 1)
    share = cores / ref.units
    return HostCalibration("committed", ref.mem_gbs * share, ref.peak("fp32") * share,
                           ref.peak("bf16") * share, ref.peak("int8") * share, cores, 0.0, fits,
                           {"cpu": prov.get("cpu"), "isa": prov.get("isa"), "files": list(_COMMITTED)})


# A CPU class's own calibration, measured on a part of that class and committed (the
# "calibration" validate_perf.py --cpu-only writes): presets of that class are scaled from it
# by clock, cores and bandwidth instead of from the AVX2 results across classes.
# class value -> (results file, the preset whose per-core figures stand for the measured part)
CLASS_CALIBRATIONS = {"amx": ("amx_emr_quantizer/after_9b67b16_b/perf_validation_host.json", "x86-spr-amx")}


@lru_cache(maxsize=None)
def class_calibration(cls: str) -> HostCalibration | None:
    """The committed calibration measured on a CPU of class `cls`, or None where none is
    committed (or its file lacks one). Its key names the class; its provenance the part."""
    from workbench.paths import RESULTS_DIR

    if cls not in CLASS_CALIBRATIONS:
        return None
    name, scaled_as = CLASS_CALIBRATIONS[cls]
    try:
        host = json.loads((RESULTS_DIR / name).read_text())["host"]
        cal = _from_json(host["calibration"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return replace(cal, key=f"committed-{cls}",
                   provenance={**cal.provenance, "class": cls, "scaled_as": scaled_as, "file": name})


def cached_host_calibration() -> HostCalibration | None:
    """This machine's calibration if one is cached (the app never starts one unasked)."""
    path = _cache_file(host_key())
    if path is None or not path.is_file():
        return None
    try:
        return _from_json(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError):
        return None
