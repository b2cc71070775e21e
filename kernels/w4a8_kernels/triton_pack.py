"""The load-time int4 weight layout of the Triton kernels: K split in halves, one byte per pair.

Input (project convention): w_q int8 [N, K] holding signed int4 in [-8, 7], scales
[N, K // g] (g = group size, -1 = per-channel).

Layout ("half-split"), done once when a layer is loaded:

    K is padded with zero weights to Kp, a multiple of 2 * max(128, g).
    packed int8 [N, Kp / 2]:  byte[n, j] = (w[n, j] & 0xF) | (w[n, j + Kp/2] << 4)
    scales float32 [Kp / g, N]: scale / 16, transposed so one K step reads N-contiguous
    scales; the groups of the padding hold 0.

So the low nibbles of a packed row are the first half of K and the high nibbles the
second half, each in order. In the kernel one int8 tile yields two int8 operand tiles
with no interleave, join, permute or sign extension: `b << 4` and `b & 0xF0` put each
nibble in the top of its byte, where the byte reads as 16 * w in two's complement. On a
GPU both run on four bytes per 32-bit register (one shift and one mask). Each tile feeds
its own `tl.dot` against the matching activation columns (j and Kp/2 + j), and the
stored scale / 16 undoes the factor exactly (a power of two). Since Kp/2 is a multiple
of g, a K step of at most g bytes never straddles a group in either half.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from w4a8_kernels._checks import check_weight
from w4a8_kernels.errors import KernelInputError

__all__ = ["HalfSplitInt4", "pack_half_split", "unpack_half_split", "marlin_int_scales",
           "SUPPORTED_GROUPS", "padded_k"]

# Group sizes with a power-of-two K step that tiles them; -1 is per-channel.
SUPPORTED_GROUPS = (-1, 32, 64, 128, 256)
# Per-channel W4A8 sums K products of |x_q| <= 128 and |16 w| <= 128 in int32.
_MAX_K = (2 ** 31 - 1) // (128 * 128)


@dataclass(frozen=True)
class HalfSplitInt4:
    """An int4 weight in the half-split layout, ready for the Triton kernels.

    packed: int8 [N, k_padded // 2]; scales: float32 scale / 16, [k_padded // g, N] (one
    row of N when per-channel); group_size: g, or -1 for per-channel.
    int_rescale: None, or the float32 factor max(s) / 4096 of integer group scales (then
    scales holds int32 round(s / max(s) * 4096), not divided by 16: see marlin_int_scales).
    """

    packed: torch.Tensor
    scales: torch.Tensor
    group_size: int
    n: int
    k: int
    k_padded: int
    int_rescale: float | None = None

    @property
    def half_k(self) -> int:
        return self.k_padded // 2

    @property
    def per_channel(self) -> bool:
        return self.group_size == -1

    @property
    def nbytes(self) -> int:
        """Bytes a GEMM streams for the weight: the packed nibbles plus the scales."""
        return self.packed.numel() + self.scales.numel() * self.scales.element_size()

    @property
    def device(self) -> torch.device:
        return self.packed.device


def padded_k(k: int, g: int) -> int:
    """K padded to whole half-split steps: a multiple of 2 * max(128, g)."""
    unit = 2 * max(128, g)
    return -(-k // unit) * unit


def pack_half_split(
    w_q: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    zeros: torch.Tensor | None = None,
    device: torch.device | str | None = None,
    int_rescale: float | None = None,
) -> HalfSplitInt4:
    """Repack a symmetric int4 weight into the half-split layout (see module docstring).

    int_rescale: scales are marlin_int_scales' integers and this their factor (grouped only).

    Raises KernelInputError for asymmetric weights (zeros), and for group sizes other
    than -1 (per-channel, or g == K), 32, 64, 128, 256.
    """
    if zeros is not None:
        raise KernelInputError(
            "zeros: the Triton W4A8/W4A16 kernels take symmetric int4 weights only "
            "(signed [-8, 7], zeros=None)")
    n, k, g, scales2d = check_weight(w_q, scales, group_size)
    per_channel = g == k
    if not per_channel and g not in SUPPORTED_GROUPS:
        raise KernelInputError(
            f"group_size = {group_size}; the Triton kernels accept {SUPPORTED_GROUPS} "
            f"(-1 = per-channel) or group_size == K")
    if k > _MAX_K:
        raise KernelInputError(
            f"w_q has K = {k} columns; the W4A8 kernel's int32 accumulator holds K <= {_MAX_K}")
    dev = torch.device(device) if device is not None else w_q.device
    w = w_q.to(dev)
    kp = padded_k(k, 128 if per_channel else g)
    if kp != k:
        w = torch.nn.functional.pad(w, (0, kp - k))
    half = kp // 2
    lo = w[:, :half].to(torch.int16) & 0xF
    hi = w[:, half:].to(torch.int16) << 4
    # (hi | lo) lies in [-128, 127] as int16 (hi carries the sign), so the int8 cast is exact.
    packed = (hi | lo).to(torch.int8).contiguous()

    # The kernels' int8 operands are 16 * w (see module docstring); / 16 is exact. Integer
    # scales stay integers: the kernel divides its int32 group dot by 16 instead (exact).
    if int_rescale is not None:
        if per_channel:
            raise KernelInputError("int_rescale: integer group scales need a grouped weight; "
                                   "accepted: group_size 32, 64, 128 or 256")
        s = scales2d.to(device=dev, dtype=torch.int32)
    else:
        s = scales2d.to(device=dev, dtype=torch.float32) / 16
    if per_channel:
        s_t = s.reshape(1, n).contiguous()
    else:
        s_t = torch.zeros(kp // g, n, dtype=s.dtype, device=dev)
        s_t[: k // g] = s.t()
    return HalfSplitInt4(packed=packed, scales=s_t, group_size=-1 if per_channel else g,
                         n=n, k=k, k_padded=kp, int_rescale=int_rescale)


def marlin_int_scales(scales: torch.Tensor, scale_dtype: torch.dtype = torch.bfloat16
                      ) -> tuple[torch.Tensor, float]:
    """vLLM's marlin_act_int8_process_scales (marlin_utils.py:544-548) on scales stored in
    scale_dtype: (round(s / max(s) * 4096), computed in scale_dtype as there, and the
    float32 factor max(s) / 4096 that vLLM folds into the per-token scale)."""
    if scale_dtype not in (torch.bfloat16, torch.float16):
        raise KernelInputError(f"scale_dtype = {scale_dtype}; accepted: torch.bfloat16, "
                               "torch.float16 (the checkpoint dtypes Marlin takes)")
    s = scales.to(scale_dtype)
    if not bool((s > 0).all()):
        raise KernelInputError("scales: integer rescale needs positive scales (Marlin reads "
                               "them as unsigned 16-bit integers)")
    factor = float(1 / 4096 * s.max().float())
    # Integers 0..4096, held in float32 (exact) so they pass the usual weight checks.
    return (s / s.max() * 4096).round().to(torch.float32), factor


def unpack_half_split(w: HalfSplitInt4) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of pack_half_split: (w_q int8 [N, K], scales float32 [N, K // g])."""
    p = w.packed.to(torch.int16)
    lo = ((p & 0xF) ^ 8) - 8
    hi = p >> 4
    w_q = torch.cat([lo, hi], dim=1)[:, : w.k].to(torch.int8)
    if w.per_channel:
        return w_q, w.scales.reshape(w.n, 1) * 16
    return w_q, w.scales[: w.k // w.group_size].t().contiguous() * 16
