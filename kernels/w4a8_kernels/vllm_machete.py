"""the pinned vLLM's Machete (W4A16 on Hopper) as an execution path, through the library built
from the sdist's own headers (csrc/quantization/machete/, benchmarks/build_machete.sh) and its
ctypes wrapper, `w4a8_kernels.machete_lib`. This module only adapts that wrapper to the
kernel-path contract. Where the library is not built, or there is no Hopper GPU, the path says
so instead of failing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from w4a8_kernels import machete_lib
from w4a8_kernels._checks import check_weight
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError

__all__ = ["machete_available", "MachetePrepared", "prepare_machete", "machete_mm", "machete_schedule"]


def machete_available() -> tuple[bool, str]:
    return machete_lib.available()


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
    handle = machete_lib.prepack(w_q.to("cuda"), scales.to(device="cuda", dtype=torch.bfloat16), g)
    return MachetePrepared(n, k, handle)


def machete_mm(x: torch.Tensor, prepared: MachetePrepared) -> torch.Tensor:
    return machete_lib.mm(x, prepared.handle)


def machete_schedule(m: int, prepared: MachetePrepared) -> str:
    """The schedule vLLM's heuristic runs at M."""
    return machete_lib.schedule(m, prepared.handle)
