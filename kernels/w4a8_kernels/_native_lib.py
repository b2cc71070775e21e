"""Build and load the C W4A8 GEMMs (kernels/w4a8_kernels/csrc/) at first use, one library per ISA variant.

Plain C shared libraries called through ctypes: they need only a C compiler (no torch
headers, so each builds in about a second) and ctypes releases the GIL during the call.
Variants (`VARIANTS`): `avx2_u8s8` (w4a8_avx2.c, int8-stored weights), `u4_avx2` and
`u4_vnni512` (w4a8_u4.c built for AVX2 or AVX-512 VNNI, packed int4 weights), `u4_amx`
(w4a8_amx.c, AMX-INT8 tiles, packed int4 weights). Each is
built only where /proc/cpuinfo lists its ISA flags: detected, never assumed. Where one
cannot build or run, `load(variant)` returns None and `why_unavailable(variant)` says
why; callers then use another engine or the pure-torch path. Every library shares its work
through w4a8_sched.h and names that pool's test hook `sched_test_stall(us)`.

A library built here, by this machine's compiler, is admitted into the process only after
its self-test (`w4a8_kernels.selftest`) passed in a child process: a build that crashes,
hangs or computes wrong bits is named unavailable ("self-test died with SIGSEGV") and the
next engine serves. The verdict is kept beside the build, keyed by its sources, flags,
compiler and the CPU's flags (`verdicts()` lists them).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["load", "why_unavailable", "cache_dir", "VARIANTS", "cpu_flags", "isa_cap", "ISA_CAP_ENV",
           "AVX2_LIBRARY_CAPS", "U4Weight", "compile_variant", "admit", "csrc_dir", "CSRC_ENV",
           "SELF_TEST_TIMEOUT_ENV", "verdicts", "bind", "compiler"]

_CSRC = Path(__file__).parent / "csrc"
CSRC_ENV = "W4A8_KERNELS_CSRC"  # build from another folder of sources (a kernel under test)
SELF_TEST_TIMEOUT_ENV = "W4A8_KERNELS_SELF_TEST_TIMEOUT"  # seconds; default 300
SELF_TEST_ENV = "W4A8_KERNELS_SELF_TEST"  # set in the self-test's child: the variant it tests
# -ffp-contract=off: no fused multiply-add, so every product rounds as the reference's does.
_COMMON = ["-O3", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC", "-pthread"]
# variant: (source, compiler flags, /proc/cpuinfo flags it needs)
VARIANTS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    # every engine's work is shared by w4a8_sched.h's pool; -fopenmp only where the
    # standalone quantizer reads the thread count torch set (omp_get_max_threads, same libgomp)
    "avx2_u8s8": ("w4a8_avx2.c", ("-mavx2", "-mfma"), ("avx2", "fma")),
    "u4_avx2": ("w4a8_u4.c", ("-mavx2", "-mfma", "-fopenmp"), ("avx2", "fma")),
    "u4_vnni512": ("w4a8_u4.c", ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni",
                                 "-DW4A8_VNNI512", "-fopenmp"),
                   ("avx512f", "avx512bw", "avx512vl", "avx512_vnni")),
    # its activations are quantized in the library (w4a8_quant.h, AVX-512 intrinsics, no OpenMP
    # runtime); VNNI is listed as every AMX part has it
    "u4_amx": ("w4a8_amx.c", ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mamx-tile", "-mamx-int8"),
               ("avx512f", "avx512bw", "avx512vl", "avx512_vnni", "amx_tile", "amx_int8")),
}
_state: dict[str, dict[str, object]] = {}


def cache_dir() -> Path:
    """Where built libraries go: $W4A8_WORKBENCH_CACHE, else the per-user cache
    ($XDG_CACHE_HOME or ~/.cache)/w4a8-workbench, never the installed package (site-packages
    may be read-only); a private temporary folder where the home has no writable cache."""
    env = os.environ.get("W4A8_WORKBENCH_CACHE")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    try:
        base.mkdir(parents=True, exist_ok=True)
        if os.access(base, os.W_OK):
            return base / "w4a8-workbench"
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / f"w4a8-workbench-{os.getuid()}"


@functools.lru_cache(maxsize=None)  # read once: the W4A16 fallback asks on every call
def cpu_flags() -> frozenset[str]:
    """The CPU's ISA flags from /proc/cpuinfo (empty where it cannot be read)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


# ISA_CAP_ENV=avx2 (or avx512) builds no variant wider than that on a wider CPU: what an
# AVX2-only machine runs, measured here (pair it with AVX2_LIBRARY_CAPS).
ISA_CAP_ENV = "W4A8_KERNELS_MAX_ISA"
# what torch's own libraries read instead (each picks its kernels from the CPU otherwise)
AVX2_LIBRARY_CAPS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                     "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}
_ISA_CAPS = {"avx2": ("avx512", "amx"), "avx512": ("amx",)}


def isa_cap() -> str | None:
    """The ISA cap in force ($W4A8_KERNELS_MAX_ISA), or None."""
    return os.environ.get(ISA_CAP_ENV) or None


def _cpu_supports(needs: tuple[str, ...]) -> tuple[bool, str]:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False, f"not an x86-64 CPU ({platform.machine()})"
    cap = isa_cap()
    if cap is not None:
        if cap not in _ISA_CAPS:
            return False, f"{ISA_CAP_ENV}={cap!r} is not one of {', '.join(_ISA_CAPS)}"
        over = [f for f in needs if f.startswith(_ISA_CAPS[cap])]
        if over:
            return False, f"{ISA_CAP_ENV}={cap} leaves out {', '.join(over)}"
    flags = cpu_flags()
    if not flags:
        return False, f"cannot read /proc/cpuinfo to check for {', '.join(needs)}"
    missing = [f for f in needs if f not in flags]
    if missing:
        return False, f"CPU lacks {', '.join(missing)}"
    return True, ""


def csrc_dir() -> Path:
    """The C sources built: $W4A8_KERNELS_CSRC where set (a changed or planted kernel under
    test), else the package's own."""
    return Path(os.environ.get(CSRC_ENV) or _CSRC)


@functools.lru_cache(maxsize=None)
def _compiler_id(cc: str) -> str:
    """The compiler's own first line of --version: part of every build's and verdict's key."""
    try:
        proc = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
        return f"{cc}: {proc.stdout.splitlines()[0] if proc.stdout else proc.stderr.strip()[:200]}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{cc}: {exc}"


def compiler() -> str | None:
    """The C compiler the engines are built with: $CC, else cc or gcc on PATH (None if none)."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def compile_variant(variant: str, *, check_cpu: bool = True) -> Path:
    """`variant`'s shared library, built into the cache on first call (keyed by the sources,
    the flags and the compiler). `check_cpu=False` builds it where the CPU cannot run it, for
    tests that read the library without running its instructions."""
    src_name, isa_flags, needs = VARIANTS[variant]
    if check_cpu:
        ok, why = _cpu_supports(needs)
        if not ok:
            raise OSError(why)
    path = csrc_dir() / src_name
    if not path.is_file():
        raise OSError(f"the C source {path} is missing from this install (package data)")
    cc = compiler()
    if not cc:
        raise OSError(f"no C compiler (cc or gcc) on PATH to build the {variant} W4A8 kernel")
    flags = [*_COMMON, *isa_flags]
    # the sources and the headers they include (the scheduler): any change rebuilds
    src = path.read_bytes() + b"".join(h.read_bytes() for h in sorted(path.parent.glob("*.h")))
    key = src + " ".join(flags).encode() + _compiler_id(cc).encode()
    out = cache_dir() / f"{variant}-{hashlib.sha256(key).hexdigest()[:16]}.so"
    out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = out.parent.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        # a library loaded from a folder others can write to would run their code
        raise OSError(f"the build cache {out.parent} is not a private folder of this user")
    if not out.exists():
        # Build to a temporary name, then rename: concurrent builders never see half a file.
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        proc = subprocess.run([cc, *flags, str(path), "-o", tmp, "-lm"], capture_output=True,
                              text=True)
        if proc.returncode != 0 and "-fopenmp" in flags:
            # a compiler without OpenMP: w4a8_u4.c keeps its own thread pool instead
            proc = subprocess.run([cc, *[f for f in flags if f != "-fopenmp"], str(path), "-o",
                                   tmp, "-lm"], capture_output=True, text=True)
        if proc.returncode != 0:
            os.unlink(tmp)
            raise OSError(f"building {src_name} for {variant} failed: {proc.stderr.strip()[:500]}")
        os.replace(tmp, out)
    return out


def _verdict_path(variant: str, lib: Path) -> Path:
    """Where the self-test's verdict on `lib` is kept: beside it, keyed by the CPU's flags too
    (the library's name already holds the sources, flags and compiler)."""
    cpu = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:12]
    return lib.with_name(f"{lib.stem}.cpu-{cpu}.verdict.json")


def admit(variant: str, lib: Path) -> tuple[bool, str]:
    """(admitted, why not): the self-test's verdict on `variant`'s built library, run in a
    child process on first use (a crash, a hang or wrong bits there cannot take this process
    down) and kept with the build. An engine under its own self-test is admitted untested."""
    if os.environ.get(SELF_TEST_ENV) == variant:
        return True, ""
    where = _verdict_path(variant, lib)
    try:
        verdict = json.loads(where.read_text())
    except (OSError, ValueError):
        verdict = _run_self_test(variant)
        if not verdict.get("hung"):  # a hang may be the machine's load: asked again next time
            fd, tmp = tempfile.mkstemp(suffix=".json", dir=where.parent)
            with os.fdopen(fd, "w") as f:
                json.dump(verdict, f)
            os.replace(tmp, where)
    return bool(verdict.get("ok")), "" if verdict.get("ok") else f"self-test {verdict.get('why', '?')}"


def _run_self_test(variant: str) -> dict:
    """The child's verdict, or what became of the child."""
    env = {**os.environ, SELF_TEST_ENV: variant}
    # the child imports this package from where this process did, installed or not
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).parent.parent),
                                                    os.environ.get("PYTHONPATH")) if p)
    timeout = float(os.environ.get(SELF_TEST_TIMEOUT_ENV) or 300)
    cmd = [sys.executable, "-m", "w4a8_kernels.selftest", variant]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"hung: no answer in {timeout:g} s", "hung": True}
    if proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = f"signal {-proc.returncode}"
        return {"ok": False, "why": f"died with {sig}"}
    lines = proc.stdout.strip().splitlines()
    try:
        verdict = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return {"ok": False, "why": f"failed (exit {proc.returncode}): {tail}"}
    if not verdict.get("ok"):
        verdict["why"] = f"failed: {verdict.get('why')}"
    return verdict


def _build(variant: str) -> ctypes.CDLL:
    out = compile_variant(variant)
    ok, why = admit(variant, out)
    if not ok:
        raise OSError(why)
    lib = ctypes.CDLL(str(out))
    if variant == "u4_amx" and lib.w4a8_amx_init() != 0:
        raise OSError("the kernel refused this process the AMX tile state (arch_prctl "
                      "ARCH_REQ_XCOMP_PERM failed)")
    return bind(variant, lib)


def bind(variant: str, lib: ctypes.CDLL) -> ctypes.CDLL:
    """`lib` (a loaded build of `variant`'s source) with its entry points typed and named as
    the engines call them: gemm, linear, sched_test_stall, and per variant tiles, quantize, nr."""
    i64, ptr, c_int = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
    if variant == "u4_amx":
        fn = lib.w4a8_amx_gemm
        fn.argtypes = [ptr, i64, i64, i64, i64, ptr, ptr, ptr, ptr, ptr, i64, i64, c_int]
        fn.restype = c_int
        lib.gemm = fn
        lib.tiles = lib.w4a8_amx_tiles  # (codes, lda, Mp, K, bt, threads)
        lib.tiles.argtypes = [ptr, i64, i64, i64, ptr, c_int]
        lib.tiles.restype = c_int
        # (x, is_bf16, M, K, ldx, g, gp, Bp, zs, sc, C, ldc, N, threads): quantize and GEMM
        lib.linear = lib.w4a8_amx_linear
        lib.linear.argtypes = [ptr, c_int, i64, i64, i64, i64, i64, ptr, ptr, ptr, ptr, i64, i64, c_int]
        lib.linear.restype = c_int
        lib.sched_test_stall = lib.w4a8_amx_sched_test_stall
        return lib
    if variant == "avx2_u8s8":
        fn = lib.w4a8_gemm_u8s8
        fn.argtypes = [ptr, i64, i64, i64, ptr, ptr, ptr, i64, i64, i64, ptr, ptr, i64, i64, c_int]
        fn.restype = c_int
        lib.sched_test_stall = lib.w4a8_u8s8_sched_test_stall
        return lib  # its activations come from w4a8_u4.c's quantizer (one rule, one place)
    # the suffixed entry points of w4a8_u4.c, under plain names
    suffix = variant.split("_", 1)[1]
    fn = lib[f"w4a8_u4_gemm_{suffix}"]  # (weight, codes, lda, M, asum, xs, C, ldc, threads)
    fn.argtypes = [ptr, ptr, i64, i64, ptr, ptr, ptr, i64, c_int]
    linear = lib[f"w4a8_u4_linear_{suffix}"]  # (weight, x, is_bf16, M, ldx, C, ldc, threads)
    linear.argtypes = [ptr, ptr, c_int, i64, i64, ptr, i64, c_int]
    q = lib[f"quantize_rows_grouped_{suffix}"]
    q.argtypes = [ptr, c_int, i64, i64, i64, i64, i64, ptr, i64, ptr, ptr]
    nr = lib[f"w4a8_u4_nr_{suffix}"]
    fn.restype = linear.restype = q.restype = nr.restype = c_int
    lib.gemm, lib.linear, lib.quantize, lib.nr = fn, linear, q, int(nr())
    lib.sched_test_stall = lib[f"w4a8_sched_test_stall_{suffix}"]
    return lib


class U4Weight(ctypes.Structure):
    """w4a8_u4.c's u4_weight_t: a packed weight's buffers and shape, filled once per layer
    (its pointers stay valid while the owner keeps the tensors)."""

    _fields_ = [("bp", ctypes.c_void_p), ("zs", ctypes.c_void_p), ("sc", ctypes.c_void_p),
                ("n", ctypes.c_int64), ("k", ctypes.c_int64), ("g", ctypes.c_int64),
                ("gp", ctypes.c_int64), ("groups", ctypes.c_int64), ("g8", ctypes.c_int64),
                ("symmetric", ctypes.c_int64)]


def load(variant: str = "avx2_u8s8") -> ctypes.CDLL | None:
    """The loaded library of `variant`, built on first call; None where it cannot be had."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown C kernel variant {variant!r}; known: {', '.join(VARIANTS)}")
    if variant not in _state:
        try:
            _state[variant] = {"lib": _build(variant), "why": ""}
        except OSError as exc:
            _state[variant] = {"lib": None, "why": str(exc)}
    return _state[variant]["lib"]  # type: ignore[return-value]


def verdicts() -> dict[str, str]:
    """Each variant's standing here: "admitted (self-test passed)" or why it is not."""
    return {v: why_unavailable(v) or "admitted (self-test passed)" for v in VARIANTS}


def why_unavailable(variant: str = "avx2_u8s8") -> str:
    """Empty when the variant's library loads, else the reason it does not."""
    load(variant)
    return str(_state[variant]["why"])
