"""The dense baseline: the fastest float GEMM this CPU has, per M.

float32 (sgemm) everywhere; bfloat16 (float32 accumulation) as well where the CPU has
bf16 arithmetic. Timed per M bucket on the caller's input, like the W4A16 fallback.
`bf16_dense` in the registry stays what it is (bf16 whether native or emulated).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from w4a8_kernels._autotune import m_bucket, pick
from w4a8_kernels._checks import check_activations, check_device, check_float32_range
from w4a8_kernels.cpu_w4a16 import bf16_is_native
from w4a8_kernels.errors import KernelInputError

__all__ = ["DensePrepared", "prepare_dense", "dense", "dense_choice"]


@dataclass(eq=False)
class DensePrepared:
    w32: torch.Tensor  # float32 [N, K]
    w16: torch.Tensor | None  # bfloat16 [N, K] where bf16 is native
    choices: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    @property
    def k(self) -> int:
        return self.w32.shape[1]


def prepare_dense(w: torch.Tensor) -> DensePrepared:
    """w: floating [N, K] (the dequantized weight)."""
    if not isinstance(w, torch.Tensor) or not w.is_floating_point() or w.dim() != 2:
        raise KernelInputError(f"the dense weight must be a floating [N, K] tensor, got "
                               f"{getattr(w, 'dtype', type(w).__name__)} {tuple(getattr(w, 'shape', ()))}")
    check_device(w, "w", "cpu")
    w32 = w.to(torch.float32).contiguous()
    return DensePrepared(w32, w32.to(torch.bfloat16) if bf16_is_native()[0] else None)


def _fp32(x, p: DensePrepared) -> torch.Tensor:
    return x.to(torch.float32) @ p.w32.t()


def _bf16(x, p: DensePrepared) -> torch.Tensor:
    return (x.to(torch.bfloat16) @ p.w16.t()).to(torch.float32)


def dense(x: torch.Tensor, prepared: DensePrepared) -> torch.Tensor:
    """x [M, K] -> float32 [M, N] by the faster of fp32 and native bf16 for this M."""
    if not isinstance(prepared, DensePrepared):
        raise KernelInputError("prepared must come from prepare_dense")
    check_activations(x, prepared.k)
    check_float32_range(x)
    if x.shape[0] == 0:
        return torch.empty(0, prepared.w32.shape[0])
    fns = {"fp32": _fp32} if prepared.w16 is None else {"fp32": _fp32, "bf16": _bf16}
    return fns[pick(prepared.choices, prepared.timings, fns, x, prepared)](x, prepared)


def dense_choice(prepared: DensePrepared, m: int) -> str | None:
    """"fp32" or "bf16" for M (None until that M bucket has been timed)."""
    return prepared.choices.get(m_bucket(m))
