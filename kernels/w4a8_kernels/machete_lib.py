"""ctypes binding of the Machete library: the pinned vLLM's Machete W4A16 kernels and weight
prepack (csrc/quantization/machete/), built for sm_90a by benchmarks/build_machete.sh into
`.machete/libmachete_w4a16.so` (or the file W4A8_MACHETE_LIB names). The library has a plain C
ABI (kernels/machete/machete_capi.cu): it takes raw device pointers and torch's current stream,
so it links no torch and matches any torch's ABI.

    ok, why = available()
    handle = prepack(w_q, scales, group_size)   # int8 [N, K] in [-8, 7], scales [N, K / g]
    y = mm(x, handle)                           # x bf16 [M, K] -> bf16 [M, N]
    schedule(m, handle) -> str                  # the schedule vLLM's heuristic runs at M

What vLLM does around the kernels is repeated here step by step: MacheteLinearKernel
(model_executor/kernels/linear/mixed_precision/machete.py) prepacks `weight_packed` as
`machete_prepack_B(x.t().contiguous().t())` and makes the scales [K / g, N] contiguous;
`machete_mm` allocates D and the workspace on every call (machete_mm_launcher.cuh run_impl).
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from w4a8_kernels.errors import KernelInputError, KernelUnavailableError
from w4a8_kernels.machete_schedule import machete_schedule, schedule_name
from w4a8_kernels.packing import pack_int4_ct

__all__ = ["LIB_ENV", "library_path", "available", "built_schedules", "layer_refused",
           "MacheteHandle", "prepack", "mm", "schedule", "GROUP_SIZES", "PREPACKED_BLOCK_NK"]

LIB_ENV = "W4A8_MACHETE_LIB"
# query_machete_supported_group_sizes for bf16 activations (utils/machete_utils.py:19-34).
GROUP_SIZES = (-1, 64, 128)
# MACHETE_PREPACKED_BLOCK_SHAPE (utils/machete_utils.py:9): K a multiple of 64, N of 128.
PREPACKED_BLOCK_NK = (128, 64)
_LIB: ctypes.CDLL | None = None
_BUILT: frozenset | None = None


def library_path() -> Path:
    env = os.environ.get(LIB_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".machete" / "libmachete_w4a16.so"


def _load() -> ctypes.CDLL:
    global _LIB
    if _LIB is not None:
        return _LIB
    path = library_path()
    if not path.is_file():
        raise KernelUnavailableError(
            f"the Machete library is not built: {path} is missing (benchmarks/build_machete.sh "
            f"builds it; {LIB_ENV} may name another file)")
    lib = ctypes.CDLL(str(path))
    c_int, vp, sz = ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)
    ip = ctypes.POINTER(ctypes.c_int)
    lib.machete_last_error.restype = ctypes.c_char_p
    lib.machete_last_error.argtypes = []
    lib.machete_num_schedules.restype = c_int
    lib.machete_num_schedules.argtypes = []
    lib.machete_schedule_at.restype = c_int
    lib.machete_schedule_at.argtypes = [c_int, ip, ip, ip]
    lib.machete_workspace_size.restype = c_int
    lib.machete_workspace_size.argtypes = [c_int] * 3 + [vp] * 4 + [c_int] * 5 + [sz]
    lib.machete_mm.restype = c_int
    lib.machete_mm.argtypes = [c_int] * 3 + [vp] * 4 + [c_int] * 4 + [vp, c_int, vp]
    lib.machete_prepack_B.restype = c_int
    lib.machete_prepack_B.argtypes = [vp, vp, c_int, c_int, c_int, vp]
    _LIB = lib
    return lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        msg = (_load().machete_last_error() or b"").decode(errors="replace")
        raise RuntimeError(f"machete {what} failed ({rc}): {msg}")


def available() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    if torch.cuda.get_device_capability() != (9, 0):  # MacheteLinearKernel.can_implement
        return False, "Machete requires compute capability of 90 (Hopper)"
    try:
        _load()
    except KernelUnavailableError as exc:
        return False, str(exc)
    except (OSError, AttributeError) as exc:  # not a shared library, or one missing a symbol
        return False, f"the Machete library does not load: {type(exc).__name__}: {exc}"
    return True, ""


def built_schedules() -> list[tuple[tuple[int, int], tuple[int, int, int]]]:
    """(tile MN, cluster MNK) of each schedule the library holds."""
    lib = _load()
    out = []
    for i in range(lib.machete_num_schedules()):
        tm, tn, cm = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        _check(lib.machete_schedule_at(i, ctypes.byref(tm), ctypes.byref(tn), ctypes.byref(cm)),
               "schedule_at")
        out.append(((tm.value, tn.value), (cm.value, 1, 1)))
    return out


def layer_refused(n: int, k: int, group_size: int) -> str | None:
    """Why MacheteLinearKernel.can_implement refuses a bf16 x uint4b8 layer [N, K] (its
    group-size and check_machete_supports_shape messages), or None."""
    g = -1 if group_size in (-1, k) else group_size
    if g not in GROUP_SIZES:
        return (f"Group size ({group_size}) not supported by Machete, supported group sizes "
                f"are: {list(GROUP_SIZES)}")
    if k % PREPACKED_BLOCK_NK[1]:
        return f"Input features size must be divisible by {PREPACKED_BLOCK_NK[1]} (K = {k})"
    if n % PREPACKED_BLOCK_NK[0]:
        return f"Output features size must be divisible by {PREPACKED_BLOCK_NK[0]} (N = {n})"
    return None


@dataclass(eq=False)
class MacheteHandle:
    n: int
    k: int
    group_size: int  # -1 for per-channel, as vLLM passes it
    b: torch.Tensor  # int32 [K / 8, N]: machete_prepack_B's output
    scales: torch.Tensor  # bf16 [K / g, N] contiguous (transform_w_s)


def prepack(w_q: torch.Tensor, scales: torch.Tensor, group_size: int) -> MacheteHandle:
    """w_q int8 [N, K] signed (stored as uint4b8, u = q + 8), scales [N, K / g] (checked by
    the caller), on one CUDA device."""
    n, k = w_q.shape
    why = layer_refused(n, k, group_size)
    if why:
        raise KernelInputError(why)
    g = -1 if group_size in (-1, k) else group_size
    lib = _load()
    dev = w_q.device
    # The checkpoint's weight_packed [N, K / 8] is the memory of x.t().contiguous().t().
    packed = pack_int4_ct(w_q).to(dev).contiguous()
    out = torch.empty_like(packed)
    with torch.cuda.device(dev):
        _check(lib.machete_prepack_B(packed.data_ptr(), out.data_ptr(), n, k, dev.index or 0,
                                     torch.cuda.current_stream(dev).cuda_stream), "prepack_B")
    s = scales.to(device=dev, dtype=torch.bfloat16).reshape(n, -1).t().contiguous()
    # vLLM's tensor is [K / 8, N] int32 (it reads only B.size(1) = N from it).
    return MacheteHandle(n, k, g, out.view(k // 8, n), s)


def mm(x: torch.Tensor, handle: MacheteHandle,
       sched: tuple[tuple[int, int], tuple[int, int, int]] | None = None) -> torch.Tensor:
    """x bf16 [M, K] contiguous on the handle's device -> bf16 [M, N], with the schedule vLLM's
    heuristic picks (or `sched`)."""
    if x.dtype != torch.bfloat16 or x.dim() != 2 or x.shape[1] != handle.k:
        raise KernelInputError(f"x must be bf16 [M, {handle.k}], got {x.dtype} "
                               f"{tuple(x.shape)}")
    if x.device != handle.b.device:
        raise KernelInputError(f"x is on {x.device}, the weight on {handle.b.device}")
    x = x.contiguous()
    m, n, k = x.shape[0], handle.n, handle.k
    d = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    if m == 0:
        return d
    sched = sched or machete_schedule(m, n, k)
    global _BUILT
    if _BUILT is None:
        _BUILT = frozenset(built_schedules())
    if sched not in _BUILT:
        raise KernelUnavailableError(
            f"the Machete library was built without schedule {schedule_name(*sched)} "
            f"(picked at M = {m}, N = {n}, K = {k}); benchmarks/build_machete.sh builds every one")
    (tm, tn), (cm, _, _) = sched
    lib = _load()
    ptrs = (x.data_ptr(), handle.b.data_ptr(), handle.scales.data_ptr(), d.data_ptr())
    nbytes = ctypes.c_size_t()
    dev = x.device.index or 0
    _check(lib.machete_workspace_size(tm, tn, cm, *ptrs, m, n, k, handle.group_size, dev,
                                      ctypes.byref(nbytes)), "workspace_size")
    ws = torch.empty(nbytes.value, dtype=torch.uint8, device=x.device)
    _check(lib.machete_mm(tm, tn, cm, *ptrs, m, n, k, handle.group_size,
                          ws.data_ptr() if nbytes.value else None, dev,
                          torch.cuda.current_stream(x.device).cuda_stream), "mm")
    return d


def schedule(m: int, handle: MacheteHandle) -> str:
    return schedule_name(*machete_schedule(m, handle.n, handle.k))
