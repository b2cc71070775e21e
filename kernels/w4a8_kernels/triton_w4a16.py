"""W4A16 with Triton: int4 weights dequantized in registers to bf16/fp16, then a bf16 dot.

Public API (CUDA tensors; CPU tensors only under TRITON_INTERPRET=1):

    ok, why = triton_available()                     # from w4a8_kernels.triton_runtime
    packed = prepare_w4a16(w_q, scales, group_size)  # once, at load time
    out = w4a16_matmul(x, packed)                    # x bf16/fp16 [M, K] -> [M, N], x's dtype

Same weight convention and half-split layout as kernels.triton_w4a8 (one packed weight
serves both kernels). Grouped weights are dequantized as q * scale rounded to x's dtype
(on the GPU the scale itself is first rounded to x's dtype, as in checkpoints that store
bf16/fp16 scales), as Marlin and the other W4A16 kernels do; per-channel weights enter
the dot as exact integers and their scale multiplies the float32 accumulator at the end.
On the GPU the nibbles become bf16/fp16 by integer bit tricks (inline PTX), not by
int -> float conversions, which run at a quarter of the FMA rate. Small M uses
split-K (float32 partials, reduced in a fixed order).

Launch configs come from `W4A16_CONFIGS`, one table of M buckets per weight kind, tuned on
an H200 by benchmarks/gpu_bench.py (its sweep phase); pass `config=` to override.
"""
from __future__ import annotations

from dataclasses import replace
from enum import IntFlag

import torch

from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.triton_pack import HalfSplitInt4, pack_half_split
from w4a8_kernels.triton_runtime import (
    ConfigTable,
    TileConfig,
    fit_block_k,
    require_triton,
    resolve_split_k,
    split_k_buffers,
    table_config,
    triton_available,
)

__all__ = ["prepare_w4a16", "w4a16_matmul", "triton_available", "W4A16_CONFIGS", "w4a16_config",
           "W4A16Variant", "INT_DQ"]

_X_DTYPES = (torch.bfloat16, torch.float16)

class W4A16Variant(IntFlag):
    """The code paths `TileConfig.variant` switches on in the W4A16 kernel (any combination)."""

    SCALE_MUL = 1
    """Grouped weights only: dequantize to exact integers, multiply by the scale as a separate op
    (needs block_k <= group_size)."""
    TWO_ACC = 2
    """Chain each K step's two dots into two accumulators (all wgmmas stay asynchronous)."""
    INT_DQ = 4
    """Per-channel weights only: exact integers enter the dot and the scale multiplies the fp32
    accumulator at the end (else n * scale is rounded to x's dtype, as for grouped weights)."""


INT_DQ = W4A16Variant.INT_DQ
_TWO_ACC = W4A16Variant.TWO_ACC

T = TileConfig
S0 = {"split_k": 0, "num_warps": 4, "num_stages": 4}  # split K to fill the SMs
# Tuned on an H200 like W4A8_CONFIGS (benchmarks/results/h200_sweep.json). Per-channel
# prefill takes the scaled path (variant 0): the integer path's 256x128 three-stage tiles
# gave wrong outputs on the H200 for N = 40 (err / bound up to 115; right for N >= 256).
W4A16_CONFIGS: dict[str, ConfigTable] = {
    "channel": (
        (16, T(16, 128, 64, **S0)),
        (32, T(32, 64, 64, **S0, swap_ab=True, variant=INT_DQ | _TWO_ACC, programs_per_sm=4)),
        (128, T(64, 64, 64, **S0, swap_ab=True, variant=INT_DQ | _TWO_ACC, programs_per_sm=4)),
        (512, T(128, 128, 64, num_warps=8, num_stages=4, swap_ab=True, variant=INT_DQ)),
        (None, T(256, 128, 64, num_warps=8, num_stages=3, swap_ab=True)),
    ),
    "group": (
        (8, T(16, 128, 128, **S0)),
        (16, T(16, 128, 64, **S0)),
        (32, T(32, 128, 64, **S0)),
        (128, T(64, 128, 64, **S0, swap_ab=True, variant=_TWO_ACC)),
        (256, T(128, 128, 64, split_k=0, num_warps=8, num_stages=4, swap_ab=True, variant=_TWO_ACC)),
        (None, T(256, 128, 64, num_warps=8, num_stages=3, swap_ab=True, variant=W4A16Variant.SCALE_MUL)),
    ),
}


# The load-time repack: int8 [N, K] int4 values + scales -> half-split layout.
prepare_w4a16 = pack_half_split


def w4a16_config(m: int, packed: HalfSplitInt4) -> TileConfig:
    """The tuned config for this M and weight, block_k fitted to Kp/2 and, for grouped
    weights, to at most g (one scale vector per step; wider steps gather scales)."""
    cfg = table_config(W4A16_CONFIGS["channel" if packed.per_channel else "group"], m)
    if not packed.per_channel and cfg.block_k > packed.group_size:
        cfg = replace(cfg, block_k=packed.group_size)
    return fit_block_k(cfg, packed.half_k)


def w4a16_matmul(
    x: torch.Tensor,
    packed: HalfSplitInt4,
    config: TileConfig | None = None,
    int_dequant: bool | None = None,
) -> torch.Tensor:
    """x bf16/fp16 [M, K] @ dequant(W)^T -> [M, N] in x's dtype.

    int_dequant (per-channel weights only): True feeds exact integers to the dot and
    scales the fp32 accumulator, False dequantizes to n * scale; None takes the config's
    INT_DQ bit.
    """
    require_triton()
    from w4a8_kernels.triton_jit import w4a16_kernel

    if x.dtype not in _X_DTYPES:
        raise KernelInputError(f"x has dtype {x.dtype}; accepted: {_X_DTYPES}")
    if x.dim() != 2 or x.shape[1] != packed.k:
        raise KernelInputError(
            f"x has shape {tuple(x.shape)}; the weight needs [M, K] with K = {packed.k}")
    if x.device != packed.device:
        raise KernelInputError(f"x is on {x.device} but the packed weight is on {packed.device}")
    if packed.int_rescale is not None:
        raise KernelInputError("packed weight has integer group scales (prepare_w4a8_int_rescale), "
                               "which only the W4A8 kernel takes; accepted: prepare_w4a16's weight")
    x = x if x.stride(1) == 1 else x.contiguous()
    m, n = x.shape[0], packed.n
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    cfg = config or w4a16_config(m, packed)
    if cfg.variant not in range(8):
        raise KernelInputError(f"config.variant = {cfg.variant}; the W4A16 kernel accepts 0 to 7")
    flags = W4A16Variant(cfg.variant)
    if int_dequant is None:
        int_dequant = W4A16Variant.INT_DQ in flags
    int_dq = bool(int_dequant) and packed.per_channel
    two_acc = W4A16Variant.TWO_ACC in flags
    scale_mul = W4A16Variant.SCALE_MUL in flags and not int_dq
    if scale_mul and packed.per_channel:
        # Checked on the H200 (Triton 3.6): per-channel scales multiplied as a separate op
        # gave wrong outputs at 256x128 swap_ab tiles (error up to 115x the rounding bound).
        raise KernelInputError(f"config.variant = {cfg.variant} (scale multiply) is for grouped "
                               "weights; per-channel weights take variant 0 or 2")
    if scale_mul and cfg.block_k > packed.group_size:
        raise KernelInputError(f"config.variant = {cfg.variant} needs block_k <= group_size "
                               f"({cfg.block_k} > {packed.group_size})")
    if packed.half_k % cfg.block_k:
        raise KernelInputError(
            f"config.block_k = {cfg.block_k} does not divide Kp/2 = {packed.half_k}")
    steps = packed.half_k // cfg.block_k
    split = resolve_split_k(cfg, m, n, steps, x.device)
    if int_dq and two_acc and split > 1 and cfg.num_warps == 8:
        # Checked on the H200 (Triton 3.6): wrong outputs on every shape tried (err / bound
        # 4 to 20), where 4 warps, one accumulator or no split checked right.
        raise KernelInputError(
            f"config.variant = {cfg.variant} (integer dequant, two accumulators) with split-K "
            f"({split}) and 8 warps; accepted: 4 warps, variant 4, or split_k = 1")
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    part, locks = split_k_buffers(m, n, split, tiles, x.device)
    w4a16_kernel[(tiles, split)](
        x, packed.packed, packed.scales, out, part, locks,
        m, n, packed.k, packed.half_k,
        x.stride(0), packed.packed.stride(0), packed.scales.stride(0), out.stride(0),
        GROUP_K=0 if packed.per_channel else packed.group_size,
        EVEN_K=packed.k == packed.k_padded,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        SPLIT_K=split, GROUP_M=cfg.group_m, USE_SPLIT=split > 1, SWAP_AB=cfg.swap_ab,
        INT_DQ=int_dq, SCALE_MUL=scale_mul, TWO_ACC=two_acc,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out
