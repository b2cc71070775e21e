"""Error metrics between a kernel's output and a reference, all computed in float64.

Two questions, two references (see `kernels.reference`):
- quantization error: against the float reference (x @ W_float^T, the unquantized
  layer when it is known, else x @ dequant(W)^T); what W4A8 or W4A16 costs the model.
- kernel error: against the quantized reference of what the path computes (the exact
  W4A8 or W4A16 math); what the kernel adds on top, float rounding for a correct one.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from workbench.errors import InvalidInputError

__all__ = [
    "ErrorReport", "compare", "rel_frobenius", "max_abs", "cosine_similarity", "sqnr_db",
    "per_token_rel_error",
]


def _pair(out: torch.Tensor, ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if tuple(out.shape) != tuple(ref.shape):
        raise InvalidInputError(f"output shape {tuple(out.shape)} does not match the "
                                f"reference shape {tuple(ref.shape)}")
    return out.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)


def rel_frobenius(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref||_F / ||ref||_F (0 when both are zero, inf when only ref is)."""
    o, r = _pair(out, ref)
    num, den = (o - r).norm().item(), r.norm().item()
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def max_abs(out: torch.Tensor, ref: torch.Tensor) -> float:
    o, r = _pair(out, ref)
    return (o - r).abs().max().item() if o.numel() else 0.0


def cosine_similarity(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Cosine of the angle between the flattened tensors (1.0 when both are zero)."""
    o, r = _pair(out, ref)
    no, nr = o.norm().item(), r.norm().item()
    if no == 0 or nr == 0:
        return 1.0 if no == nr else 0.0
    return (o.flatten() @ r.flatten()).item() / (no * nr)


def sqnr_db(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Signal to quantization-noise ratio, 10 log10(||ref||^2 / ||out - ref||^2); inf if exact."""
    rel = rel_frobenius(out, ref)
    if rel == 0:
        return math.inf
    return -20.0 * math.log10(rel) if math.isfinite(rel) else -math.inf


def per_token_rel_error(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """float64 [M]: each row's relative error (0 for an all-zero row computed exactly)."""
    o, r = _pair(out, ref)
    if o.dim() != 2:
        raise InvalidInputError(f"per-token error needs [M, N] tensors, got {tuple(o.shape)}")
    num, den = (o - r).norm(dim=1), r.norm(dim=1)
    rel = num / den
    return torch.where(den == 0, torch.where(num == 0, 0.0, math.inf), rel)


@dataclass(frozen=True)
class ErrorReport:
    """Every metric of one output against one reference."""

    rel_error: float
    max_abs_error: float
    cosine: float
    sqnr_db: float
    worst_token_rel_error: float
    median_token_rel_error: float

    def to_dict(self) -> dict:
        return asdict(self)


def compare(out: torch.Tensor, ref: torch.Tensor) -> ErrorReport:
    """All metrics at once; `out` and `ref` are [M, N] (any float dtype, any device)."""
    tok = per_token_rel_error(out, ref)
    finite = tok[torch.isfinite(tok)]
    return ErrorReport(
        rel_error=rel_frobenius(out, ref),
        max_abs_error=max_abs(out, ref),
        cosine=cosine_similarity(out, ref),
        sqnr_db=sqnr_db(out, ref),
        worst_token_rel_error=tok.max().item() if tok.numel() else 0.0,
        median_token_rel_error=finite.median().item() if finite.numel() else 0.0,
    )
