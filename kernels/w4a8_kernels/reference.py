"""Float64 ground truth for every W4A16 and W4A8 kernel.

Slow on purpose: plain float64 math that is exact where it can be (integer dots of
int8 x int4 stay far below 2**53), so a kernel's error against these is its own.
"""
from __future__ import annotations

import torch

from w4a8_kernels._checks import check_activations, check_weight
from w4a8_kernels.quant import dequantize_groupwise, quantize_per_token_int8

__all__ = ["w4a16_reference", "w4a8_reference", "w4a8_reference_from_quantized",
           "w4a8_asym_reference"]


def w4a16_reference(
    x: torch.Tensor,
    w_q: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    zeros: torch.Tensor | None = None,
) -> torch.Tensor:
    """x @ dequant(W).T in float64: x [M, K] floating, w_q int8 [N, K] -> float64 [M, N]."""
    n, k, g, scales = check_weight(w_q, scales, group_size, zeros)
    check_activations(x, k)
    w = dequantize_groupwise(w_q, scales, g, zeros, dtype=torch.float64)
    return x.to(torch.float64) @ w.t()


def w4a8_reference_from_quantized(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w_q: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    zeros: torch.Tensor | None = None,
) -> torch.Tensor:
    """sum over groups of (x_q . (w_q - zeros))_group * x_scale * w_scale_group, float64.

    x_q int8 [M, K], x_scale [M, 1]; each group's integer dot is exact in float64.
    """
    n, k, g, scales = check_weight(w_q, scales, group_size, zeros)
    m = x_q.shape[0]
    xq = x_q.to(torch.float64)
    w = w_q.to(torch.float64)
    if zeros is not None:
        w = (w.view(n, k // g, g) - zeros.to(torch.float64).unsqueeze(-1)).reshape(n, k)
    s = scales.to(torch.float64)
    out = torch.zeros(m, n, dtype=torch.float64)
    for j in range(k // g):
        cols = slice(j * g, (j + 1) * g)
        out += (xq[:, cols] @ w[:, cols].t()) * s[:, j]
    return out * x_scale.to(torch.float64).reshape(m, 1)


def w4a8_reference(
    x: torch.Tensor,
    w_q: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    zeros: torch.Tensor | None = None,
) -> torch.Tensor:
    """W4A8 ground truth: quantize x per token (vLLM semantics), then exact group dots.

    x [M, K] floating, w_q int8 [N, K] -> float64 [M, N].
    """
    _, k, _, _ = check_weight(w_q, scales, group_size, zeros)
    check_activations(x, k)
    x_q, x_scale = quantize_per_token_int8(x)
    return w4a8_reference_from_quantized(x_q, x_scale, w_q, scales, group_size, zeros)


def w4a8_asym_reference(
    x: torch.Tensor,
    w_q: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
) -> torch.Tensor:
    """What torch's `aten._dyn_quant_matmul_4bit` computes (KleidiAI's qai8dx activations on
    Arm, torch's portable code elsewhere), in float64: each row of x quantized to int8 with its
    own scale and zero point over [min(x, 0), max(x, 0)] (255 steps), times the dequantized
    symmetric int4 weight. Held to the op on torch 2.13 CPU within 1e-7 relative.
    """
    n, k, g, scales = check_weight(w_q, scales, group_size, None)
    check_activations(x, k)
    x32 = x.to(torch.float32)
    lo = torch.clamp(x32.amin(dim=1, keepdim=True), max=0.0)
    hi = torch.clamp(x32.amax(dim=1, keepdim=True), min=0.0)
    step = (hi - lo) / 255
    step = torch.where(step == 0, torch.ones_like(step), step)
    zp = torch.clamp(torch.round(-128 - lo / step), -128, 127)
    q = torch.clamp(torch.round(x32 / step) + zp, -128, 127)
    xd = (q.to(torch.float64) - zp.to(torch.float64)) * step.to(torch.float64)
    w = dequantize_groupwise(w_q, scales, g, None, dtype=torch.float64)
    return xd @ w.t()
