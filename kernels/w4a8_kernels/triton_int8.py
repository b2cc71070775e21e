"""Baseline for the W4A8 kernel: a plain Triton W8A8 GEMM on already-unpacked int8 weights.

Imports triton at load: import it after `triton_runtime.triton_available()` says yes.

Same epilogue as the W4A8 kernel (per-token x per-channel scales, bf16 out) and the
tutorial's structure, with no unpacking: the gap between this and W4A8 per-channel is
the price of the int4 unpack. x_q int8 [M, K] and w int8 [N, K], both K-contiguous,
which is the layout int8 tensor cores want for both operands.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from w4a8_kernels.triton_runtime import ConfigTable, TileConfig, table_config

__all__ = ["int8_gemm", "INT8_CONFIGS"]

# Tuned like the W4A8 table (benchmarks/gpu_bench.py sweeps these); block_k in bytes of K.
INT8_CONFIGS: ConfigTable = (
    (16, TileConfig(16, 64, 256, num_warps=4, num_stages=4)),
    (512, TileConfig(64, 128, 128, num_warps=4, num_stages=4)),
    (None, TileConfig(128, 256, 128, num_warps=8, num_stages=3)),
)


@triton.jit(do_not_specialize=["M"])
def _int8_gemm_kernel(
    x_ptr, xs_ptr, w_ptr, ws_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_n
    first_m = (pid // width) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % width) % size_m)
    pid_n = (pid % width) // size_m

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    am = (rm % M).to(tl.int64)
    an = (rn % N).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + am[:, None] * stride_xm + rk[None, :]
    w_ptrs = w_ptr + an[None, :] * stride_wn + rk[:, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(x_ptrs + k0)
            b = tl.load(w_ptrs + k0)
        else:
            a = tl.load(x_ptrs + k0, mask=(k0 + rk)[None, :] < K, other=0)
            b = tl.load(w_ptrs + k0, mask=(k0 + rk)[:, None] < K, other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
    out = acc.to(tl.float32) * tl.load(ws_ptr + an)[None, :] * tl.load(xs_ptr + am)[:, None]
    offs = rm[:, None].to(tl.int64) * stride_om + rn[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def int8_gemm(x_q: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
              config: TileConfig | None = None, out_dtype: torch.dtype = torch.bfloat16
              ) -> torch.Tensor:
    """x_q int8 [M, K], x_scale fp32 [M], w int8 [N, K], w_scale fp32 [N] -> [M, N]."""
    m, k = x_q.shape
    config = config or table_config(INT8_CONFIGS, m)
    n = w.shape[0]
    out = torch.empty((m, n), dtype=out_dtype, device=x_q.device)
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    _int8_gemm_kernel[grid](
        x_q, x_scale, w, w_scale, out, m, n, k,
        x_q.stride(0), w.stride(0), out.stride(0),
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        GROUP_M=config.group_m, EVEN_K=k % config.block_k == 0,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out
