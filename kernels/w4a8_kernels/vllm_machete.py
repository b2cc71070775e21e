"""the pinned vLLM's Machete (W4A16 on Hopper) as an execution path, through the library built
from the sdist's own headers (csrc/quantization/machete/, benchmarks/build_machete.sh) and its
ctypes wrapper.

This module only adapts that wrapper to the kernel-path contract. The wrapper is the module
`w4a8_kernels.machete_lib` and offers:

    ok, why = available()                              # library built and loadable, a CUDA device
    handle = prepack(weight_q, scales, group_size)     # int8 [N, K] signed int4 (uint4b8 on disk),
                                                       # scales [N, K / g], on the GPU
    y = mm(x, handle)                                  # x bf16 [M, K] -> bf16 [M, N]
    schedule(m, handle) -> str                         # the schedule vLLM's heuristic picks at M

Where the library is not built, or there is no Hopper GPU, the path says so instead of failing.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from importlib.util import find_spec
from typing import Any

import torch

from w4a8_kernels._checks import check_weight
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError

__all__ = ["WRAPPER", "machete_available", "MachetePrepared", "prepare_machete", "machete_mm",
           "machete_schedule"]

WRAPPER = "w4a8_kernels.machete_lib"


def _wrapper():
    return import_module(WRAPPER)


def machete_available() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    if find_spec(WRAPPER) is None:
        return False, (f"{WRAPPER} (the Machete library built from the vLLM sdist) is not in "
                       "this build")
    try:
        return _wrapper().available()
    except Exception as exc:  # a missing or stale .so names itself, it does not sink the run
        return False, f"the Machete library does not load: {type(exc).__name__}: {exc}"


@dataclass(eq=False)
class MachetePrepared:
    n: int
    k: int
    handle: Any


def prepare_machete(w_q: torch.Tensor, scales: torch.Tensor, group_size: int,
                    zeros: torch.Tensor | None = None) -> MachetePrepared:
    """The built type is bf16 x uint4b8 with bf16 group scales and no zero points (the W4A16
    case vLLM sends to Machete on Hopper)."""
    if zeros is not None:
        raise KernelInputError("the built Machete type takes symmetric uint4b8 weights; this "
                               "layer has zero points")
    ok, why = machete_available()
    if not ok:
        raise KernelUnavailableError(f"vllm_machete cannot run here: {why}")
    n, k, g, scales = check_weight(w_q, scales, group_size, zeros)
    handle = _wrapper().prepack(w_q.to("cuda"), scales.to(device="cuda", dtype=torch.bfloat16), g)
    return MachetePrepared(n, k, handle)


def machete_mm(x: torch.Tensor, prepared: MachetePrepared) -> torch.Tensor:
    return _wrapper().mm(x, prepared.handle)


def machete_schedule(m: int, prepared: MachetePrepared) -> str | None:
    """The schedule that runs at M, where the wrapper tells it."""
    fn = getattr(_wrapper(), "schedule", None)
    return None if fn is None else str(fn(m, prepared.handle))
