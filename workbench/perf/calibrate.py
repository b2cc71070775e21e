"""Calibration on the results files: fitted wave models per (path, weight kind, M bucket).

Reads the committed GPU results through `workbench.results` (a re-run of the bench is a
re-calibration) and the launch geometry of this project's kernels through
`workbench.perf.launch`. Library GEMMs (cuBLAS) have no tiling we can read: their tile is
chosen from a few candidates by the same fit.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from workbench.errors import InvalidInputError
from workbench.paths import RESULTS_DIR
from workbench.perf.fit import BW_FRACTIONS, Point, WaveFit, fit_waves
from workbench.perf.launch import Launch, cublas_launch, triton_config, triton_launch
from workbench.perf.machete_cost import fit_machete, machete_point
from workbench.results import ResultRecord, load_results

__all__ = ["TRITON_PATHS", "LIBRARY_PATHS", "ENGINE_PATHS", "GpuCalibration", "calibrate_gpu", "point_for",
           "key_for", "bytes_moved", "H200_RESULTS", "H100_RESULTS", "H100_MACHETE_RESULTS", "PART_FILES", "copy_gbs",
           "REFERENCE_PART", "ENGINE_RESULTS", "MACHETE_RESULTS", "ENGINE_FILES", "results_for", "records_of",
           "launch_config", "cache_dir", "measured_copy_bw", "MACHETE_PATH"]

H200_RESULTS = RESULTS_DIR / "h200_bench.json"
# The kernels vLLM itself runs on the H200 (Humming, benchmarks/h200_engines.sh), beside ours.
ENGINE_RESULTS = RESULTS_DIR / "h200_engines_bench.json"
# vLLM's Machete W4A16 kernels built from its sdist (benchmarks/h200_machete.sh), beside Humming.
MACHETE_RESULTS = RESULTS_DIR / "h200_machete_bench.json"

# path -> the Triton kernel it launches (w4a8_native includes its activation quantizer).
TRITON_PATHS = {"w4a8_native": "w4a8", "w4a8_prequant": "w4a8", "w4a16_fallback": "w4a16"}
# Library paths: one tile shape each, fitted from these candidates.
LIBRARY_PATHS = ("bf16_dense", "int8_mm", "triton_int8_mm")
# vLLM's own kernels: no tiling we can read either (Humming's heuristics pick it per shape and
# M), so they are fitted as the library paths are, apart per weight kind (grouped scales cost
# per step). vllm_humming_int8 quantizes its bf16 input itself, per token.
ENGINE_PATHS = ("vllm_humming", "vllm_humming_int8", "vllm_machete")
# Machete's schedule is read from vLLM's heuristic: costed by its tiles, not a fitted tile.
MACHETE_PATH = "vllm_machete"
# results file -> the engine paths fitted from it (its other paths repeat h200_bench.json's)
ENGINE_FILES = {ENGINE_RESULTS.name: ("vllm_humming", "vllm_humming_int8"), MACHETE_RESULTS.name: ("vllm_machete",)}
# The H100's own measurements (benchmarks/hopper_host_run.sh): this project's kernels, the
# libraries and Humming in one file, Machete in its own.
H100_RESULTS = RESULTS_DIR / "h100_bench.json"
H100_MACHETE_RESULTS = RESULTS_DIR / "h100_machete_bench.json"
ENGINE_FILES[H100_MACHETE_RESULTS.name] = ("vllm_machete",)
# Each measured part's files, in the order a path is looked up: a part is fitted from its own
# measurements where it has them; the first part is the one others are scaled from.
PART_FILES = {"sm90-h200": (ENGINE_RESULTS, MACHETE_RESULTS, H200_RESULTS),
              "sm90-h100": (H100_MACHETE_RESULTS, H100_RESULTS)}
REFERENCE_PART = "sm90-h200"
# None: no tile term at all, the call is latency plus bytes streamed (cuBLAS at small M).
_LIB_TILES = (None, (64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128))


def bytes_moved(path: str, m: int, n: int, k: int, g: int, split: int = 1) -> float:
    """Bytes a call reads and writes in DRAM: weights, scales, activations, output, and
    split-K partials (fp32, written then read)."""
    out = m * n * 2
    partial = 2 * split * m * n * 4 if split > 1 else 0
    if path in TRITON_PATHS or path in ("w4a16", "w4a8"):
        groups = 1 if g in (-1, k) else -(-k // g)
        w = n * k / 2 + 4 * n * groups
        x = m * k * 2 + (m * k * 2 if path == "w4a8_native" else 0)  # bf16 in; int8 out + in
        if path == "w4a8_prequant":
            x = m * k + 4 * m
        return w + x + out + partial
    if path == "bf16_dense":
        return n * k * 2 + m * k * 2 + out
    if path in ("int8_mm", "triton_int8_mm"):
        return n * k + m * k + m * n * (4 if path == "int8_mm" else 2)
    if path in ENGINE_PATHS:  # int4 weights, bf16 scales (per group or per channel), bf16 in/out
        groups = 1 if g in (-1, k) else -(-k // g)
        return n * k / 2 + 2 * n * groups + m * k * 2 + out
    if path == "quantizer":
        return m * k * 3 + 4 * m
    raise KeyError(path)


def key_for(path: str, m: int, n: int, k: int, g: int, config: dict | None = None) -> tuple:
    """What one fit covers: a library path, or a Triton path with one weight kind and one
    tile config (block_k aside: it follows K and g, and the fit takes K per program as a
    variable). config: what a record says ran; None: what the kernel's table picks now."""
    if path in TRITON_PATHS:
        if config is None:
            return _key_now(path, m, n, k, g)
        cfg = config
        ident = tuple((f, v) for f, v in sorted(cfg.items()) if f != "block_k")
        return (path, "channel" if g in (-1, k) else "group", ident)
    if path == MACHETE_PATH:  # one fit over its schedules' tiles (workbench/perf/machete_cost.py)
        return (path, "tiles")
    if path in ENGINE_PATHS:  # their heuristics change kernel past decode sizes (Humming M 64: 1.6x M 1)
        size = "decode" if m <= 16 else "small" if m <= 128 else "large"
        return (path, ("channel-" if g in (-1, k) else "group-") + size)
    if path == "int8_mm":  # cuBLAS int8 as measured on the H200: flat in M up to 64 on every
        # shape; a 2x step at M = 96 (N = 7392 to 8192) or 192 (N = 4096, 28672), so its kernel
        # changes there with the shape; compute-bound from about 384
        return (path, "small" if m <= 64 else "mid" if m <= 256 else "large")
    return (path, "small" if m <= 128 else "large")


@lru_cache(maxsize=65536)
def _key_now(path: str, m: int, n: int, k: int, g: int) -> tuple:
    """key_for a Triton path with the config its table picks now."""
    return key_for(path, m, n, k, g, asdict(triton_config(TRITON_PATHS[path], m, n, k, g)))


def _launch(path: str, m: int, n: int, k: int, g: int, sms: int, tile=None, config=None) -> Launch:
    if path in TRITON_PATHS:
        return triton_launch(TRITON_PATHS[path], m, n, k, g, sms,
                             None if config is None else tuple(sorted(config.items())))
    if path == "quantizer":
        return Launch({}, -(-m // 1), 1, 1, 1)  # one program per token row
    if tile is None:
        return Launch({"block_k": 1}, 0, 1, 0, 1)  # no programs: t = t0 + bytes / BW
    bm, bn = tile
    return cublas_launch(m, n, k, bm, bn, sms=sms)


def point_for(path: str, m: int, n: int, k: int, g: int, sms: int, us: float = 0.0,
              tile=None, config: dict | None = None, l2_mb: float | None = None) -> Point:
    """One call as its fit sees it. l2_mb: the part's L2 (Machete's cost reads it)."""
    if path == MACHETE_PATH:
        if l2_mb is None:
            raise ValueError("point_for: vllm_machete needs the part's L2 (l2_mb)")
        return machete_point(m, n, k, g, sms, l2_mb, us)
    ln = _launch(path, m, n, k, g, sms, tile, config)
    step_k = 2 * ln.config.get("block_k", 32) if path in TRITON_PATHS else ln.config.get("block_k", 1)
    return Point(ln.programs, ln.programs_per_sm, ln.k_steps * step_k, ln.k_steps,
                 bytes_moved(path, m, n, k, g, ln.split), us)


@dataclass(frozen=True)
class GpuCalibration:
    """Fitted models of one GPU's results file."""

    platform: str
    sms: int
    source: str  # the results file
    digest: str  # sha256 of it: a different file is a different calibration
    fits: dict  # key tuple -> WaveFit
    tiles: dict  # library path -> (block_m, block_n)
    spread: dict  # path -> (q_low, q_high) of leave-one-shape-out relative errors (validate)

    def predict(self, path: str, m: int, n: int, k: int, g: int) -> float | None:
        key = key_for(path, m, n, k, g)
        fit = self.fits.get(key)
        if fit is None:
            return None
        from workbench.perf.hardware import hardware_for

        return fit.predict(point_for(path, m, n, k, g, self.sms, tile=self.tiles.get(key),
                                     l2_mb=hardware_for(self.platform).llc_mb))


def records_of(res, paths: Iterable[str]) -> list[ResultRecord]:
    """The timed records of `res` on the named paths."""
    want = set(paths)
    return [r for r in res.records if r.path in want and r.median_us > 0]


def launch_config(r: ResultRecord) -> dict | None:
    """The TileConfig a Triton record says it launched with (None: not recorded)."""
    from dataclasses import fields

    from w4a8_kernels.triton_runtime import TileConfig

    if r.path not in TRITON_PATHS or not r.config:
        return None
    known = {f.name for f in fields(TileConfig)}
    return {key: v for key, v in r.config.items() if key in known}


def fit_records(recs: Sequence[ResultRecord], sms: int, peak_bw: float, l2_mb: float,
                copy_bw: float | None = None) -> tuple[dict, dict]:
    """(fits by key, library tiles by key) from records; peak_bw in bytes per us; l2_mb: the
    part's L2; copy_bw: its copy rate measured beside the records (bytes per us), the rate
    Machete streams at (without one, chosen as the other fits choose theirs)."""
    fits: dict = {}
    tiles: dict = {}
    groups: dict = {}
    for r in recs:
        groups.setdefault(key_for(r.path, r.m, r.n, r.k, r.group_size, launch_config(r)), []).append(r)
    for key, rs in groups.items():
        path = key[0]
        if path == MACHETE_PATH:
            pts = [point_for(path, r.m, r.n, r.k, r.group_size, sms, r.median_us, l2_mb=l2_mb) for r in rs]
            bws = (copy_bw,) if copy_bw else tuple(f * peak_bw for f in BW_FRACTIONS)
            fits[key] = fit_machete(pts, sms, bws, groups=[(r.n, r.k) for r in rs])
            continue
        if path in TRITON_PATHS or path == "quantizer":
            pts = [point_for(path, r.m, r.n, r.k, r.group_size, sms, r.median_us, config=launch_config(r))
                   for r in rs]
            fits[key] = fit_waves(pts, sms, peak_bw, groups=[(r.n, r.k) for r in rs])
            continue
        best = None
        for tile in _LIB_TILES:
            pts = [point_for(path, r.m, r.n, r.k, r.group_size, sms, r.median_us, tile) for r in rs]
            f = fit_waves(pts, sms, peak_bw, groups=[(r.n, r.k) for r in rs])
            if best is None or f.held_rms < best[0].held_rms:
                best = (f, tile)
        fits[key], tiles[key] = best
    return fits, tiles


_FITTED = tuple(TRITON_PATHS) + LIBRARY_PATHS + ENGINE_PATHS + ("quantizer",)


def results_for(path: str, platform: str = REFERENCE_PART) -> Path | None:
    """The committed results file `path` is calibrated on for `platform`: the part's own where
    one holds the path, None where the part has none (it is scaled from another part's)."""
    if platform == REFERENCE_PART:  # every path has a file here (fp8_mm is fitted as int8_mm)
        return next((RESULTS_DIR / f for f, paths in ENGINE_FILES.items()
                     if path in paths and (RESULTS_DIR / f) in PART_FILES[platform]), H200_RESULTS)
    for f in PART_FILES.get(platform, ()):
        fitted = ENGINE_FILES.get(f.name, _FITTED)
        if path in fitted and f.is_file() and path in _paths_in(f):
            return f
    return None


def copy_gbs(platform: str) -> float | None:
    """The device copy rate (read + write, GB/s) measured on `platform` beside its timings (the
    median over its results files), None where the part was never measured."""
    rates = []
    for f in PART_FILES.get(platform, ()):
        if f.is_file():
            st = f.stat()
            rate = _copy_cached(str(f), st.st_mtime_ns, st.st_size)
            if rate:
                rates.append(rate)
    return sorted(rates)[len(rates) // 2] if rates else None


def measured_copy_bw(res) -> float | None:
    """The copy rate (read + write) a results file measured beside its timings, in bytes
    per us, or None where it has none."""
    gbs = (res.provenance.get("ceilings") or {}).get("copy_gbs_read_plus_write")
    return gbs * 1e3 if gbs else None


@lru_cache(maxsize=16)
def _copy_cached(path: str, mtime_ns: int, size: int) -> float | None:
    ceilings = load_results(path).provenance.get("ceilings") or {}
    return ceilings.get("copy_gbs_read_plus_write")


def _paths_in(f: Path) -> frozenset[str]:
    st = f.stat()
    return _paths_cached(str(f), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=16)
def _paths_cached(path: str, mtime_ns: int, size: int) -> frozenset[str]:
    """The paths a results file times, read once per version of the file."""
    return frozenset(r.path for r in load_results(path).records)


def cache_dir() -> Path | None:
    """Where fitted calibrations are cached (WORKBENCH_CACHE_DIR, else the user's cache), or
    None where it cannot be made."""
    import os

    root = os.environ.get("WORKBENCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "w4a8-workbench")
    try:
        d = Path(root) / "perf"
        d.mkdir(parents=True, exist_ok=True)
        return d
    except OSError:
        return None  # read-only home: calibrate in memory every time


def _tuplify(v):
    return tuple(_tuplify(x) for x in v) if isinstance(v, list) else v


def _from_json(doc: dict) -> GpuCalibration:
    fits = {_tuplify(k): WaveFit(**f) for k, f in doc["fits"]}
    return GpuCalibration(doc["platform"], doc["sms"], doc["source"], doc["digest"], fits,
                          {_tuplify(k): (None if t is None else tuple(t)) for k, t in doc["tiles"]}, {})


def _to_json(c: GpuCalibration) -> dict:
    return {"platform": c.platform, "sms": c.sms, "source": c.source, "digest": c.digest,
            "fits": [[k, f.to_dict()] for k, f in c.fits.items()], "tiles": [[k, t] for k, t in c.tiles.items()]}


def _tables_digest() -> str:
    """The kernels' config tables: records are grouped by the config they pick now."""
    from w4a8_kernels import triton_w4a8, triton_w4a16

    text = repr(triton_w4a8.W4A8_CONFIGS) + repr(triton_w4a16.W4A16_CONFIGS)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


_FIT_VERSION = "10"  # bump when the fit changes: cached calibrations of older fits are ignored


# The calibrations of the committed results files, written by benchmarks/validate_perf.py:
# derived data, used only while its name (results digest, tables digest, SMs, fit version)
# matches; anything else is fitted afresh.
COMMITTED_CALIBRATION = H200_RESULTS.with_name("perf_calibration.json")
COMMITTED_CALIBRATIONS = {H200_RESULTS.name: COMMITTED_CALIBRATION,
                          ENGINE_RESULTS.name: ENGINE_RESULTS.with_name("perf_calibration_engines.json"),
                          MACHETE_RESULTS.name: MACHETE_RESULTS.with_name("perf_calibration_machete.json"),
                          H100_RESULTS.name: H100_RESULTS.with_name("perf_calibration_h100.json"),
                          H100_MACHETE_RESULTS.name: H100_RESULTS.with_name("perf_calibration_h100_machete.json")}


def calibration_name(digest: str, sms: int) -> str:
    return f"gpu-{digest}-{_tables_digest()}-{sms}-{_FIT_VERSION}"


def _read_committed(name: str, results: str | Path = H200_RESULTS) -> GpuCalibration | None:
    target = COMMITTED_CALIBRATIONS.get(Path(results).name)
    if target is None:  # a results file of the user's own: no committed fit of it
        return None
    try:
        doc = json.loads(target.read_text())
        return _from_json(doc["calibration"]) if doc.get("name") == name else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_committed_calibration(path: str | Path = H200_RESULTS) -> Path:
    target = COMMITTED_CALIBRATIONS[Path(path).name]
    cal = calibrate_gpu(path)
    name = calibration_name(cal.digest, cal.sms)
    target.write_text(json.dumps({"name": name, "results": cal.source,
                                  "calibration": _to_json(cal)}) + "\n")
    return target


@lru_cache(maxsize=8)
def _calibrate_cached(path: str, digest: str, sms: int, peak_bw: float, l2_mb: float) -> GpuCalibration:
    cache = cache_dir()
    name = calibration_name(digest, sms) + ".json"
    if cache is not None and (cache / name).is_file():
        try:
            return _from_json(json.loads((cache / name).read_text()))
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache entry: fit again
    committed = _read_committed(name[:-5], path)
    if committed is not None:
        return committed
    res = load_results(path)
    fitted = ENGINE_FILES.get(Path(path).name, _FITTED)
    fits, tiles = fit_records(records_of(res, fitted), sms, peak_bw, l2_mb, measured_copy_bw(res))
    cal = GpuCalibration(res.platform or "sm90-h200", sms, Path(path).name, digest, fits, tiles, {})
    if cache is not None:
        try:
            (cache / name).write_text(json.dumps(_to_json(cal)))
        except OSError:
            pass
    return cal


def calibrate_gpu(path: str | Path = H200_RESULTS, platform: str | None = None) -> GpuCalibration:
    """The calibration of a GPU results file (cached per file content, in memory and on disk).
    `platform`: the part it is meant to fit; a file measured on another part is refused."""
    from workbench.perf.hardware import hardware_for

    p = Path(path)
    st = p.stat()
    digest, measured_on = _identity(str(p), st.st_mtime_ns, st.st_size)
    if platform is not None and hardware_for(platform).preset != measured_on:
        raise InvalidInputError(f"results file {p.name} was measured on {measured_on}; it cannot "
                                f"calibrate {platform} (accepted: a file whose provenance names "
                                f"{platform})")
    platform = measured_on
    hw = hardware_for(platform)
    return _calibrate_cached(str(p), digest, hw.units, hw.mem_gbs * 1e3, hw.llc_mb)


@lru_cache(maxsize=16)
def _identity(path: str, mtime_ns: int, size: int) -> tuple[str, str]:
    """(content digest, platform) of a results file, read once per version of the file."""
    p = Path(path)
    return hashlib.sha256(p.read_bytes()).hexdigest()[:16], load_results(p).platform or "sm90-h200"
