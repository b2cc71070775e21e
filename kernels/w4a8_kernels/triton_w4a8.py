"""W4A8 on int8 tensor cores with Triton: int4 weights, dynamic per-token int8 activations.

Public API (CUDA tensors; CPU tensors only under TRITON_INTERPRET=1):

    ok, why = triton_available()                    # from w4a8_kernels.triton_runtime
    packed = prepare_w4a8(w_q, scales, group_size)  # once, at load time
    out = w4a8_matmul(x, packed)                    # x bf16/fp16 [M, K] -> [M, N], x's dtype
    x_q, x_scale = quantize_per_token_int8_triton(x)
    out = w4a8_matmul_quantized(x_q, x_scale, packed, out_dtype=torch.bfloat16)

w_q int8 [N, K] holds signed int4 [-8, 7]; scales [N, K // g]; group_size -1
(per-channel), 32, 64, 128 or 256. `prepare_w4a8` repacks into the half-split layout
(kernels.triton_pack) so the kernel unpacks with two shifts and no permute.

Math, per output element: x_scale[m] * sum over groups of w_scale[n, g] * int32 dot of
the group. The int32 dot of one group is exact; the per-group scaling and the sum over
groups are float32; the output is rounded once to bf16/fp16. Activations are quantized
like vLLM's `per_token_quant_int8` (kernels.quant.quantize_per_token_int8), bit for bit.

Launch configs come from `W4A8_CONFIGS`, one table of M buckets per weight kind
("channel" or "group"), tuned on an H200 by benchmarks/gpu_bench.py (its sweep phase);
pass `config=` to override.

Integer rescale (`prepare_w4a8_int_rescale`): grouped weights whose scales are turned into
integers as vLLM's Marlin W4A8-int8 route does (marlin_act_int8_process_scales,
vllm/model_executor/layers/quantization/utils/marlin_utils.py:544-548): each group's
int32 dot times its integer scale is summed in int32 (wrapping, as there) and converted
to float once; the factor max(s) / 4096 multiplies the per-token scale
(marlin_utils.py:785-786); the kernel side is csrc/quantization/marlin/marlin_template.h:
1127-1156 (int32 multiply-add per group) and 1636-1645 (one int -> float conversion, times
the token's scale). `w4a8_int_rescale_emulated` is the same arithmetic in torch.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.triton_pack import HalfSplitInt4, marlin_int_scales, pack_half_split
from w4a8_kernels.triton_runtime import (
    ConfigTable,
    TileConfig,
    fit_block_k,
    next_pow2,
    require_triton,
    resolve_split_k,
    split_k_buffers,
    table_config,
    triton_available,
)

__all__ = [
    "prepare_w4a8",
    "prepare_w4a8_int_rescale",
    "w4a8_int_rescale_emulated",
    "w4a8_matmul",
    "w4a8_matmul_quantized",
    "quantize_per_token_int8_triton",
    "triton_available",
    "W4A8_CONFIGS",
    "w4a8_config",
]

_OUT_DTYPES = (torch.bfloat16, torch.float16)

T = TileConfig
S0 = {"split_k": 0, "num_warps": 4, "num_stages": 4, "swap_ab": True}  # split K to fill the SMs
# "channel" | "group" -> M buckets (m_max, config). Grouped launches use block_k = group size.
# Tuned on an H200 over a dense M grid, 6 shapes (benchmarks/results/h200_sweep.json): the
# best geometric mean over the shapes at each M, adjacent winners within a few percent
# merged by hand into buckets (h200_NOTES.md). Split-K up to M = 1024: a 64- or 128-row
# tile grid leaves most of the 132 SMs idle on N = 4096 (the old M = 16 -> 32 cliff).
W4A8_CONFIGS: dict[str, ConfigTable] = {
    "channel": (
        (8, T(16, 64, 128, **S0)),
        (96, T(32, 64, 128, **S0)),
        (128, T(64, 64, 128, **S0)),
        (1024, T(64, 128, 128, **S0)),
        (None, T(256, 128, 128, num_warps=8, num_stages=3, swap_ab=True)),
    ),
    "group": (
        (16, T(16, 64, 128, **S0, variant=2, programs_per_sm=4)),
        (32, T(32, 64, 128, **S0, variant=2)),
        (256, T(64, 64, 128, **S0, variant=2)),
        (None, T(128, 128, 128, num_warps=8, num_stages=3, swap_ab=True, variant=2)),
    ),
}


# The load-time repack: int8 [N, K] int4 values + scales -> half-split layout.
prepare_w4a8 = pack_half_split


def w4a8_config(m: int, packed: HalfSplitInt4) -> TileConfig:
    """The tuned config for this M and weight; grouped weights force block_k = g."""
    cfg = table_config(W4A8_CONFIGS["channel" if packed.per_channel else "group"], m)
    if not packed.per_channel:
        return replace(cfg, block_k=packed.group_size)
    return fit_block_k(cfg, packed.half_k)


def prepare_w4a8_int_rescale(w_q: torch.Tensor, scales: torch.Tensor, group_size: int,
                             scale_dtype: torch.dtype = torch.bfloat16,
                             device: torch.device | str | None = None) -> HalfSplitInt4:
    """Grouped weight for the integer-rescale route: Marlin's integer group scales
    (triton_pack.marlin_int_scales, from scales rounded to the checkpoint's scale_dtype).
    vLLM applies them only to layers with more than one group
    (vllm/model_executor/kernels/linear/mixed_precision/marlin.py:135-136)."""
    if group_size in (-1, w_q.shape[-1]):
        raise KernelInputError(
            "group_size = -1: integer rescale is for grouped weights (vLLM applies it only "
            "when a layer has more than one group); accepted: 32, 64, 128, 256")
    int_s, factor = marlin_int_scales(scales, scale_dtype)
    return pack_half_split(w_q, int_s, group_size, device=device, int_rescale=factor)


def w4a8_int_rescale_emulated(x_q: torch.Tensor, x_scale: torch.Tensor, w_q: torch.Tensor,
                              int_scales: torch.Tensor, factor: float, group_size: int,
                              out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Marlin's W4A8-int8 arithmetic in torch (any device): int64 group dots times the
    integer scales, summed with int32 wrap-around, one int -> float32 conversion, times
    float32(x_scale * factor), rounded to out_dtype."""
    m, k = x_q.shape
    n = w_q.shape[0]
    g = group_size
    # float64 sums of integers below 2**53 are exact in any order: the group dots are exact.
    dots = torch.einsum("mGg,nGg->mnG", x_q.to(torch.float64).reshape(m, k // g, g),
                        w_q.to(torch.float64).reshape(n, k // g, g)).to(torch.int64)
    acc = (dots * int_scales.to(torch.int64).reshape(1, n, k // g)).sum(-1)
    acc = ((acc + 2 ** 31) % 2 ** 32 - 2 ** 31).to(torch.int32)  # int32 wrap, as in Marlin
    a_s = x_scale.reshape(m, 1).to(torch.float32) * torch.tensor(factor, dtype=torch.float32)
    return (acc.to(torch.float32) * a_s).to(out_dtype)


def _check_x(x: torch.Tensor, k: int, name: str, dtypes: tuple[torch.dtype, ...]) -> None:
    if x.dtype not in dtypes:
        raise KernelInputError(f"{name} has dtype {x.dtype}; accepted: {dtypes}")
    if x.dim() != 2 or x.shape[1] != k:
        raise KernelInputError(
            f"{name} has shape {tuple(x.shape)}; the weight needs [M, K] with K = {k}")


def _check_device(t: torch.Tensor, name: str, packed: HalfSplitInt4) -> None:
    if t.device != packed.device:
        raise KernelInputError(
            f"{name} is on {t.device} but the packed weight is on {packed.device}")


def quantize_per_token_int8_triton(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic symmetric per-token int8 on the GPU: (x_q int8 [M, K], x_scale fp32 [M, 1])."""
    require_triton()
    from w4a8_kernels.triton_jit import quant_per_token_int8_kernel

    if x.dim() != 2 or not x.dtype.is_floating_point:
        raise KernelInputError(f"x must be a floating [M, K] tensor, got {x.dtype} {tuple(x.shape)}")
    x = x if x.stride(1) == 1 else x.contiguous()
    m, k = x.shape
    x_q = torch.empty((m, k), dtype=torch.int8, device=x.device)
    x_scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    if m == 0:
        return x_q, x_scale
    block = min(max(next_pow2(k), 128), 8192)
    # No FMA contraction: v = x * inv must be rounded before frac = v - trunc(v), as in
    # the reference; a fused multiply-subtract flips ties that rounding creates.
    quant_per_token_int8_kernel[(m,)](x, x_q, x_scale, k, x.stride(0), x_q.stride(0),
                                      BLOCK=block, num_warps=8 if block >= 4096 else 4,
                                      enable_fp_fusion=False)
    return x_q, x_scale


def w4a8_matmul_quantized(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    packed: HalfSplitInt4,
    out_dtype: torch.dtype = torch.bfloat16,
    config: TileConfig | None = None,
) -> torch.Tensor:
    """The GEMM alone, on pre-quantized activations: x_q int8 [M, K], x_scale [M] or [M, 1]."""
    require_triton()
    from w4a8_kernels.triton_jit import w4a8_kernel

    _check_x(x_q, packed.k, "x_q", (torch.int8,))
    _check_device(x_q, "x_q", packed)
    if out_dtype not in _OUT_DTYPES:
        raise KernelInputError(f"out_dtype = {out_dtype}; accepted: {_OUT_DTYPES}")
    m = x_q.shape[0]
    if x_scale.numel() != m:
        raise KernelInputError(f"x_scale has {x_scale.numel()} values; x_q has M = {m} rows")
    x_q = x_q if x_q.stride(1) == 1 else x_q.contiguous()
    x_scale = x_scale.reshape(m).to(torch.float32).contiguous()
    n = packed.n
    out = torch.empty((m, n), dtype=out_dtype, device=x_q.device)
    if m == 0:
        return out
    cfg = config or w4a8_config(m, packed)
    g = 0 if packed.per_channel else packed.group_size
    if g and cfg.block_k != g:
        raise KernelInputError(
            f"config.block_k = {cfg.block_k}; a W4A8 weight with group_size {g} needs block_k == {g}")
    if packed.half_k % cfg.block_k:
        raise KernelInputError(
            f"config.block_k = {cfg.block_k} does not divide Kp/2 = {packed.half_k}")
    if cfg.variant not in (0, 2):
        raise KernelInputError(f"config.variant = {cfg.variant}; the W4A8 kernel accepts 0 and 2")
    int_rescale = packed.int_rescale is not None
    steps = packed.half_k // cfg.block_k
    split = resolve_split_k(cfg, m, n, steps, x_q.device)
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    part, locks = split_k_buffers(m, n, split, tiles, x_q.device)
    w4a8_kernel[(tiles, split)](
        x_q, x_scale, packed.packed, packed.scales, out, part, locks,
        m, n, packed.k, packed.half_k,
        x_q.stride(0), packed.packed.stride(0), packed.scales.stride(0), out.stride(0),
        GROUP_K=g, EVEN_K=packed.k == packed.k_padded,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        SPLIT_K=split, GROUP_M=cfg.group_m, USE_SPLIT=split > 1, SWAP_AB=cfg.swap_ab,
        SCHEDULE=cfg.variant if g else 0, INT_RESCALE=int_rescale,
        RESCALE=packed.int_rescale if int_rescale else 1.0,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out


def w4a8_matmul(
    x: torch.Tensor,
    packed: HalfSplitInt4,
    out_dtype: torch.dtype | None = None,
    config: TileConfig | None = None,
) -> torch.Tensor:
    """x bf16/fp16 [M, K] -> quantize per token -> int8 GEMM -> [M, N] in out_dtype (x's)."""
    _check_x(x, packed.k, "x", _OUT_DTYPES + (torch.float32,))
    _check_device(x, "x", packed)
    out_dtype = out_dtype or (x.dtype if x.dtype in _OUT_DTYPES else torch.bfloat16)
    x_q, x_scale = quantize_per_token_int8_triton(x)
    return w4a8_matmul_quantized(x_q, x_scale, packed, out_dtype, config)
