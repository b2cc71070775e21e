"""Build and load the AVX2 W4A8 GEMM (kernels/csrc/w4a8_avx2.c) at first use.

A plain C shared library called through ctypes: it needs only a C compiler (no torch
headers, so it builds in about a second) and ctypes releases the GIL during the call.
Where it cannot build or run (no compiler, no AVX2/FMA, not x86-64), `load()` returns
None and `why_unavailable()` says why; callers then use the pure-torch path.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["load", "why_unavailable", "cache_dir"]

_SRC = Path(__file__).parent / "csrc" / "w4a8_avx2.c"
# -ffp-contract=off: no fused multiply-add, so every product rounds as the reference's does.
_FLAGS = ["-O3", "-mavx2", "-mfma", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC",
          "-pthread"]
_state: dict[str, object] = {}


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


def _cpu_has_avx2_fma() -> tuple[bool, str]:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False, f"not an x86-64 CPU ({platform.machine()})"
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False, "cannot read /proc/cpuinfo to check for AVX2 and FMA"
    missing = [f for f in ("avx2", "fma") if f not in flags]
    if missing:
        return False, f"CPU lacks {', '.join(missing)}"
    return True, ""


def _build() -> ctypes.CDLL:
    ok, why = _cpu_has_avx2_fma()
    if not ok:
        raise OSError(why)
    if not _SRC.is_file():
        raise OSError(f"the C source {_SRC} is missing from this install (package data)")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise OSError("no C compiler (cc or gcc) on PATH to build the AVX2 W4A8 kernel")
    src = _SRC.read_bytes()
    tag = hashlib.sha256(src + " ".join(_FLAGS).encode()).hexdigest()[:16]
    out = cache_dir() / f"w4a8_avx2-{tag}.so"
    out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = out.parent.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        # a library loaded from a folder others can write to would run their code
        raise OSError(f"the build cache {out.parent} is not a private folder of this user")
    if not out.exists():
        # Build to a temporary name, then rename: concurrent builders never see half a file.
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        proc = subprocess.run([cc, *_FLAGS, str(_SRC), "-o", tmp, "-lm"], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            os.unlink(tmp)
            raise OSError(f"building {_SRC.name} failed: {proc.stderr.strip()[:500]}")
        os.replace(tmp, out)
    lib = ctypes.CDLL(str(out))
    fn = lib.w4a8_gemm_u8s8
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [ptr, i64, i64, i64, ptr, ptr, ptr, i64, i64, i64, ptr, ptr, i64, i64, ctypes.c_int]
    fn.restype = ctypes.c_int
    q = lib.quantize_rows_int8
    q.argtypes = [ptr, ctypes.c_int, i64, i64, i64, ptr, ptr, i64, ptr]
    q.restype = ctypes.c_int
    return lib


def load() -> ctypes.CDLL | None:
    """The loaded library, building it on first call; None where it cannot be had."""
    if "lib" not in _state:
        try:
            _state["lib"] = _build()
            _state["why"] = ""
        except OSError as exc:
            _state["lib"] = None
            _state["why"] = str(exc)
    return _state["lib"]  # type: ignore[return-value]


def why_unavailable() -> str:
    """Empty when the library loads, else the reason it does not."""
    load()
    return str(_state["why"])
