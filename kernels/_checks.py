"""Input checks shared by every kernel entry point.

Each check raises `KernelInputError` naming the tensor, what it holds and what is
accepted, so a bad call never turns into a silently wrong result.
"""
from __future__ import annotations

import torch

from w4a8_kernels.errors import KernelInputError

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def check_activations(x: torch.Tensor, k: int | None = None, name: str = "x") -> None:
    """x must be a 2-D floating tensor [M, K] with K == k when given."""
    if not isinstance(x, torch.Tensor):
        raise KernelInputError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_DTYPES:
        raise KernelInputError(
            f"{name} has dtype {x.dtype}; accepted: float32, float16, bfloat16, float64")
    if x.dim() != 2:
        raise KernelInputError(f"{name} must be 2-D [M, K], got shape {tuple(x.shape)}")
    if k is not None and x.shape[1] != k:
        raise KernelInputError(
            f"{name} has K = {x.shape[1]} columns but the weight has K = {k} (in_features)")


def check_finite_rows(amax: torch.Tensor, name: str = "x") -> None:
    """A row whose absolute max is Inf or NaN cannot be quantized to int8."""
    bad = ~torch.isfinite(amax.reshape(-1))
    if bool(bad.any()):
        rows = bad.nonzero().reshape(-1)[:8].tolist()
        raise KernelInputError(
            f"{name} holds Inf or NaN in rows {rows} (showing up to 8); dynamic int8 "
            "quantization needs finite activations")


def check_weight(
    w_q: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    zeros: torch.Tensor | None = None,
    *,
    check_range: bool = True,
) -> tuple[int, int, int, torch.Tensor]:
    """Validate an int4 weight in the project's convention; return (N, K, g, scales_2d).

    w_q: int8 [N, K], signed [-8, 7] without zeros, unsigned [0, 15] with zeros.
    scales: floating [N, K // g] ([N] is read as [N, 1] for per-channel).
    zeros: None or integer [N, K // g] in [0, 15].
    group_size: -1 or K for per-channel, else a divisor of K.
    """
    if not isinstance(w_q, torch.Tensor) or w_q.dtype != torch.int8:
        got = w_q.dtype if isinstance(w_q, torch.Tensor) else type(w_q).__name__
        raise KernelInputError(f"w_q must be a torch.int8 tensor holding int4 values, got {got}")
    if w_q.dim() != 2:
        raise KernelInputError(f"w_q must be 2-D [N, K], got shape {tuple(w_q.shape)}")
    n, k = w_q.shape
    if n == 0 or k == 0:
        raise KernelInputError(f"w_q has an empty dimension: shape {(n, k)}")
    g = k if group_size in (-1, k) else int(group_size)
    if g <= 0 or k % g != 0:
        raise KernelInputError(
            f"group_size = {group_size} does not divide K = {k}; accepted: -1 (per-channel), "
            f"K, or a positive divisor of K")
    n_groups = k // g
    if not isinstance(scales, torch.Tensor) or scales.dtype not in _FLOAT_DTYPES:
        got = scales.dtype if isinstance(scales, torch.Tensor) else type(scales).__name__
        raise KernelInputError(
            f"scales must be a floating tensor (float32, float16, bfloat16), got {got}")
    if scales.dim() == 1 and n_groups == 1:
        scales = scales.reshape(-1, 1)
    if tuple(scales.shape) != (n, n_groups):
        raise KernelInputError(
            f"scales has shape {tuple(scales.shape)}; for w_q {(n, k)} and group_size "
            f"{group_size} it must be [N, K // g] = {(n, n_groups)}")
    if zeros is not None:
        if zeros.dtype not in _INT_DTYPES:
            raise KernelInputError(f"zeros must be an integer tensor, got {zeros.dtype}")
        if tuple(zeros.shape) != (n, n_groups):
            raise KernelInputError(
                f"zeros has shape {tuple(zeros.shape)}; it must match scales {(n, n_groups)}")
    if check_range:
        lo, hi = (0, 15) if zeros is not None else (-8, 7)
        w_min, w_max = int(w_q.min()), int(w_q.max())
        if w_min < lo or w_max > hi:
            kind = "unsigned [0, 15] (zeros given)" if zeros is not None else "signed [-8, 7]"
            raise KernelInputError(
                f"w_q holds values in [{w_min}, {w_max}], outside int4 {kind}")
        if zeros is not None and (int(zeros.min()) < 0 or int(zeros.max()) > 15):
            raise KernelInputError(
                f"zeros holds values in [{int(zeros.min())}, {int(zeros.max())}]; accepted [0, 15]")
    if not bool(torch.isfinite(scales).all()):
        raise KernelInputError("scales holds Inf or NaN")
    return n, k, g, scales
