"""Quantization primitives: dynamic per-token int8 activations, group-wise int4 dequantization.

Weight convention (the whole project): `w_q` is torch.int8 [N, K] (out_features,
in_features) holding int4 values, signed [-8, 7] when symmetric, unsigned [0, 15] with
`zeros` when asymmetric; `scales` is [N, K // g]; `zeros` is None or [N, K // g].
Dequantized weight = (w_q - zeros) * scales, group-wise along K.
"""
from __future__ import annotations

import torch

from w4a8_kernels._checks import (check_activations, check_finite_rows, check_float32_range,
                                  check_weight)

__all__ = [
    "quantize_per_token_int8",
    "quantize_per_token_int8_codes",
    "quantize_per_token_uint8_zp128",
    "dequantize_groupwise",
    "round_half_away_from_zero",
    "center_int4",
]

# vLLM's per-token int8 quantizer (`_per_token_quant_int8` in
# vllm/model_executor/layers/quantization/utils/int8_utils.py, used by Marlin W4A8-INT)
# clamps the row's absolute max at 1e-10 before dividing, so an all-zero row gets a
# tiny positive scale and quantizes to zeros instead of NaN.
_VLLM_INT8_AMAX_FLOOR = 1e-10
# csrc/cpu/sgl-kernels/vec.h `quantize_row_int8` (int4_scaled_mm_cpu) uses eps = 1e-7.
_SGL_INT8_AMAX_FLOOR = 1e-7


def round_half_away_from_zero(v: torch.Tensor) -> torch.Tensor:
    """C `roundf` / libdevice `round`: ties go away from zero (torch.round goes to even).

    floor(|v| + c) with c the largest float below 0.5 rounds |v| half-up exactly in
    round-to-nearest arithmetic: below a tie the sum stays more than half an ulp under
    the next integer, at or above a tie it rounds up to it. Four passes, no masks.
    """
    if v.dtype not in (torch.float32, torch.float64):
        v = v.to(torch.float32)
    c = 0.5 - torch.finfo(v.dtype).eps / 4  # 0.5 - 2**-25 (float32), 0.5 - 2**-54 (float64)
    return v.abs().add_(c).floor_().copysign_(v)


def _row_amax(x32: torch.Tensor) -> torch.Tensor:
    if not x32.shape[0] or not x32.shape[1]:
        return x32.new_zeros(x32.shape[0], 1)
    # One pass and no |x| temporary; Inf and NaN propagate, so bad rows are caught.
    return torch.linalg.vector_norm(x32, ord=float("inf"), dim=1, keepdim=True)


def quantize_per_token_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric dynamic per-token int8, as vLLM's `per_token_quant_int8`.

    x: floating [M, K]. Returns x_q int8 [M, K] and x_scale float32 [M, 1] with
    x ~= x_q * x_scale. Math in float32 like the Triton kernel: amax = max(|x|, 1e-10),
    scale = amax / 127, x_q = round(x * (127 / amax)) with ties away from zero.
    Rows holding Inf or NaN raise KernelInputError.

    Bit-level convention of this project: 127 / amax is evaluated as torch evaluates
    `127.0 / tensor`, a rounded reciprocal times 127 (two roundings), and every kernel
    here (C, Triton) reproduces exactly that. vLLM's backends differ among themselves at
    this last bit (Triton's fp32 `/` on CUDA is approximate, the CPU op inverts amax / 127
    in double), which moves a code by one step only for values within an ulp of a tie.
    """
    codes, x_scale = quantize_per_token_int8_codes(x)
    return codes.to(torch.int8), x_scale


def quantize_per_token_int8_codes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`quantize_per_token_int8` with the codes left as float32 integers in [-127, 127].

    For engines that take float input (FBGEMM, float32 BLAS): saves the int8 round trip.
    """
    check_activations(x)
    check_float32_range(x)
    x32 = x.to(torch.float32)
    amax = _row_amax(x32)
    check_finite_rows(amax)
    amax = amax.clamp_min(_VLLM_INT8_AMAX_FLOOR)
    x_scale = amax / 127.0
    inv = 127.0 / amax
    # |x * inv| <= 127 * (1 + 2**-24), so the rounded codes need no clamp.
    return round_half_away_from_zero(x32 * inv), x_scale


def quantize_per_token_uint8_zp128(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The activation quantizer of vLLM's CPU `int4_scaled_mm_cpu` (sgl-kernels vec.h).

    Symmetric per row with scale = max(amax, 1e-7) / 127, stored as uint8 with +128
    (a fixed zero point of 128). Returns x_u8 uint8 [M, K] and x_scale float32 [M, 1]
    with x ~= (x_u8 - 128) * x_scale. The AVX-512 bf16 specialization rounds ties to
    even (`_mm512_roundscale_ps`); the generic template (fp16 input) uses `std::round`,
    ties away from zero. Both are reproduced by input dtype. The inverse scale is one
    float32 division, `127 / amax` (not torch's `127.0 / tensor`, a rounded reciprocal
    times 127): the real op, run here, differs in about 1 code in 1500 otherwise.
    """
    check_activations(x)
    check_float32_range(x)
    x32 = x.to(torch.float32)
    amax = _row_amax(x32)
    check_finite_rows(amax)
    amax = amax.clamp_min(_SGL_INT8_AMAX_FLOOR)
    x_scale = amax / 127.0
    v = x32 * torch.full_like(amax, 127.0).div_(amax)
    r = torch.round(v) if x.dtype == torch.bfloat16 else round_half_away_from_zero(v)
    x_u8 = (r.to(torch.int32) + 128).to(torch.uint8)
    return x_u8, x_scale


def dequantize_groupwise(
    w_q: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    zeros: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(w_q - zeros) * scales, each scale applied to its group of g columns along K.

    Returns dtype [N, K]. group_size -1 (or K) means one scale per output channel.
    """
    n, k, g, scales = check_weight(w_q, scales, group_size, zeros)
    w = w_q.to(dtype).view(n, k // g, g)
    if zeros is not None:
        w = w - zeros.to(dtype).unsqueeze(-1)
    return (w * scales.to(dtype).unsqueeze(-1)).reshape(n, k)


def center_int4(w_q: torch.Tensor, zeros: torch.Tensor | None, group_size: int) -> torch.Tensor:
    """w_q - zeros as int8 [N, K] in [-15, 15] (w_q itself when symmetric), contiguous.

    The integer weight every kernel multiplies; group_size is the effective g (K when
    per-channel), the caller has checked the weight.
    """
    if zeros is None:
        return w_q.contiguous()
    z = zeros.to(torch.int16).repeat_interleave(group_size, dim=1)
    return (w_q.to(torch.int16) - z).to(torch.int8).contiguous()
