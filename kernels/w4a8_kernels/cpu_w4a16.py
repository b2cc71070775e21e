"""W4A16 on the CPU: the fallback a W4A8 checkpoint meets when no int8 path is taken.

Three paths, and a fallback that runs whichever is fastest for the M at hand:

- `tinygemm`: torch's `_weight_int4pack_mm_for_cpu` on bfloat16 activations (its fast
  dtype). Weight packed once by `_convert_weight_to_int4pack_for_cpu` from unsigned
  nibbles (w + 8); qScaleAndZeros [K / g, N, 2] holds (scale, zero) with
  w = (u - 8) * scale + zero. It accepts group sizes 32, 64, 128, 256 and N % 16 == 0;
  per-channel runs as the largest of those group sizes with the scale repeated.
  Output is bfloat16 (returned as float32), so it carries bf16 rounding (~2**-9);
  asymmetric layers also carry the bf16 rounding of the float zero (8 - z) * s.
- `dequant`: dequantize a block of output rows to float32 per call, then a float32
  GEMM. Exact dequantization (int4 x bf16/fp16 scales fits float32), float32 error only.
- `dequant_bf16`: the same blocks rounded to bfloat16 and a bf16 GEMM (float32
  accumulation), only where the CPU has bf16 arithmetic (AVX512-BF16 or AMX-BF16):
  elsewhere torch emulates bf16 and it is never faster. bf16 rounding of x and W (~2**-9).

Every path accumulates in float32 over K blocks (`K_BLOCK` columns, tinygemm
`TINYGEMM_K_BLOCK`) and adds the blocks' partial sums in float32, as vLLM's CPU W4A16
kernel keeps a float32 accumulator (csrc/cpu/cpu_wna16.cpp: a float C tile per
micro-GEMM). One float32 accumulator over the whole K drifts with K: at K = 2**22 with
constant activations the float32 GEMM was 1.4e-2 off the float64 reference and tinygemm
1.7e-2 at 2**20; blocked, both stay at their dtype's rounding (float32 ~1e-5, tinygemm's
bf16 output ~2**-9). The dequant path's smaller blocks also made it faster at K = 14336
(M = 1, one thread: 214 -> 91 ms); tinygemm is unchanged up to K = 2**14.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from w4a8_kernels import _native_lib
from w4a8_kernels._autotune import m_bucket, pick
from w4a8_kernels._checks import (all_finite, check_activations, check_float32_range, check_weight,
                                  memory_guard, scale_notes)
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError
from w4a8_kernels.quant import center_int4

__all__ = [
    "W4A16Prepared", "prepare_w4a16", "w4a16_tinygemm", "w4a16_dequant", "w4a16_dequant_bf16",
    "w4a16_fallback", "tinygemm_supports", "fallback_choice", "fallback_candidates", "bf16_is_native",
]

_TINYGEMM_GROUPS = (32, 64, 128, 256)
_DEQUANT_BLOCK_ROWS = 512  # rows of W dequantized at a time: 8 MB of float32 with K_BLOCK
# columns summed by one float32 accumulator: a multiple of every tinygemm group; at 4096
# the float32 GEMM's own error is ~4e-6 with constant data, 2**14 gave 4e-5
K_BLOCK = 4096
# tinygemm's: its bf16 output rounding (2**-9) hides its float32 drift up to K = 2**16 with
# constant data (1.7e-2 at 2**20); blocks of 4096 cost 8-12% at K = 14336, 2**14 none
TINYGEMM_K_BLOCK = 2 ** 14


def k_blocks(k: int, group_size: int, block: int = K_BLOCK) -> tuple[tuple[int, int], ...]:
    """[k0, k1) column blocks of at most `block` columns, each either whole groups or
    inside one group, so one block's scales are a plain slice of the scale columns."""
    if group_size <= block:
        step = (block // group_size) * group_size
        return tuple((k0, min(k0 + step, k)) for k0 in range(0, k, step))
    return tuple((k0, min(k0 + block, g0 + group_size))
                 for g0 in range(0, k, group_size) for k0 in range(g0, g0 + group_size, block))


def tinygemm_supports(n: int, k: int, group_size: int) -> tuple[bool, str]:
    """(ok, why) for torch's CPU int4 pack/mm with this shape and group size."""
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        return False, f"torch {torch.__version__} has no aten._weight_int4pack_mm_for_cpu"
    if n % 16:
        return False, f"_convert_weight_to_int4pack_for_cpu needs N % 16 == 0, got N = {n}"
    g = _tinygemm_group(k, group_size)
    if g is None:
        return False, (f"_weight_int4pack_mm_for_cpu takes group sizes {_TINYGEMM_GROUPS}; "
                       f"group {group_size} with K = {k} has no equivalent")
    return True, ""


def bf16_is_native() -> tuple[bool, str]:
    """(ok, why): whether this CPU has bf16 arithmetic (else torch emulates it, slowly)."""
    flags = _native_lib.cpu_flags()
    have = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    if have:
        return True, f"bf16 in hardware ({', '.join(have)})"
    return False, "no AVX512-BF16 or AMX-BF16 on this CPU: torch emulates bf16 GEMMs"


def _tinygemm_group(k: int, group_size: int) -> int | None:
    if group_size in _TINYGEMM_GROUPS:
        return group_size
    if group_size == k:  # per-channel: any supported group size that divides K, same math
        for g in reversed(_TINYGEMM_GROUPS):
            if k % g == 0:
                return g
    return None


@dataclass(eq=False)
class W4A16Prepared:
    """An int4 weight prepared for both W4A16 paths. Build it with `prepare_w4a16`."""

    n: int
    k: int
    group_size: int
    w_centered: torch.Tensor  # int8 [N, K]: w_q - zeros
    scales: torch.Tensor  # float32 [N, G]
    tinygemm_ok: bool
    tinygemm_why: str
    # tinygemm's packed weight and (scale, zero) per K block (`TINYGEMM_K_BLOCK` columns)
    tg_weight: tuple[torch.Tensor, ...] = ()
    tg_group: int = 0
    tg_scale_zeros: tuple[torch.Tensor, ...] = ()
    # fallback choice per M bucket (power of two): "tinygemm", "dequant" or "dequant_bf16"
    choices: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # accepted but unusual inputs (e.g. negative scales)


def prepare_w4a16(
    w_q: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    zeros: torch.Tensor | None = None,
) -> W4A16Prepared:
    n, k, g, scales = check_weight(w_q, scales, group_size, zeros, device="cpu")
    # the centered copy, tinygemm's int32 nibbles and its packed weight: about 7 N*K bytes
    with memory_guard(f"preparing a W4A16 layer of {n} x {k}", 7 * n * k):
        return _prepare(w_q, scales, g, zeros)


def _prepare(w_q, scales, g: int, zeros) -> W4A16Prepared:
    n, k = w_q.shape
    s32 = scales.to(torch.float32).contiguous()
    ok, why = tinygemm_supports(n, k, g)
    prepared = W4A16Prepared(n=n, k=k, group_size=g, w_centered=center_int4(w_q, zeros, g),
                             scales=s32, tinygemm_ok=ok, tinygemm_why=why,
                             notes=scale_notes(scales))
    if ok:
        tg = _tinygemm_group(k, g)
        reps = g // tg
        # tinygemm reads nibbles u in [0, 15] as (u - 8) * scale + zero. Symmetric:
        # u = w + 8, zero 0. Asymmetric (w - z) * s = (w - 8) * s + (8 - z) * s.
        if zeros is not None:
            offset = 0
            zero = ((8 - zeros.to(torch.float32)) * s32)
        else:
            offset = 8
            zero = torch.zeros_like(s32)
        sz = torch.stack([s32.repeat_interleave(reps, 1), zero.repeat_interleave(reps, 1)], -1)
        sz = sz.transpose(0, 1).to(torch.bfloat16)  # [K / tg, N, 2]
        blocks = k_blocks(k, tg, TINYGEMM_K_BLOCK)
        prepared.tg_weight = tuple(
            torch.ops.aten._convert_weight_to_int4pack_for_cpu(
                w_q[:, k0:k1].to(torch.int32) + offset, 1)
            for k0, k1 in blocks)
        prepared.tg_group = tg
        prepared.tg_scale_zeros = tuple(sz[k0 // tg:k1 // tg].contiguous() for k0, k1 in blocks)
    return prepared


def _check(x: torch.Tensor, prepared: W4A16Prepared) -> None:
    if not isinstance(prepared, W4A16Prepared):
        raise KernelInputError("prepared must come from prepare_w4a16")
    check_activations(x, prepared.k)
    check_float32_range(x)
    if not all_finite(x):
        raise KernelInputError("x holds Inf or NaN; W4A16 would spread it over whole output rows")


def w4a16_tinygemm(x: torch.Tensor, prepared: W4A16Prepared) -> torch.Tensor:
    """torch's int4 CPU GEMM on bf16 activations: x [M, K] -> float32 [M, N] (bf16-rounded)."""
    _check(x, prepared)
    return _tinygemm(x, prepared)


def _tinygemm(x: torch.Tensor, prepared: W4A16Prepared) -> torch.Tensor:
    if not prepared.tinygemm_ok:
        raise KernelUnavailableError(f"tinygemm W4A16 cannot run this layer: {prepared.tinygemm_why}")
    if x.shape[0] == 0:
        return torch.empty(0, prepared.n)
    xb = x.to(torch.bfloat16)
    out = None
    blocks = k_blocks(prepared.k, prepared.tg_group, TINYGEMM_K_BLOCK)
    for (k0, k1), w, sz in zip(blocks, prepared.tg_weight, prepared.tg_scale_zeros):
        part = torch.ops.aten._weight_int4pack_mm_for_cpu(
            xb[:, k0:k1].contiguous(), w, prepared.tg_group, sz)
        out = part.to(torch.float32) if out is None else out.add_(part)
    return out


def w4a16_dequant(x: torch.Tensor, prepared: W4A16Prepared) -> torch.Tensor:
    """Dequantize W to float32 block by block (per call), then float32 GEMM -> [M, N]."""
    _check(x, prepared)
    return _dequant(x, prepared)


def _dequant(x: torch.Tensor, prepared: W4A16Prepared,
             dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Block by block: weight rows x K columns dequantized in float32, each block's GEMM in
    `dtype` (float32 accumulation), the K blocks' partials added in float32 -> float32."""
    m = x.shape[0]
    out = torch.zeros(m, prepared.n)
    if m == 0:
        return out
    xd = x.to(dtype)
    g = prepared.group_size
    blocks = k_blocks(prepared.k, g)
    for r0 in range(0, prepared.n, _DEQUANT_BLOCK_ROWS):
        r1 = min(r0 + _DEQUANT_BLOCK_ROWS, prepared.n)
        acc = out[:, r0:r1]
        for k0, k1 in blocks:
            w = _dequant_block(prepared, r0, r1, k0, k1)
            if dtype is torch.float32:
                acc.addmm_(xd[:, k0:k1], w.t())
            else:
                acc.add_(torch.matmul(xd[:, k0:k1], w.to(dtype).t()))
    return out


def _dequant_block(prepared: W4A16Prepared, r0: int, r1: int, k0: int, k1: int) -> torch.Tensor:
    """W[r0:r1, k0:k1] in float32; [k0, k1) is whole groups or inside one (`k_blocks`)."""
    g = prepared.group_size
    w = prepared.w_centered[r0:r1, k0:k1].to(torch.float32)
    if k0 % g == 0 and (k1 - k0) % g == 0:
        rows, groups = r1 - r0, (k1 - k0) // g
        return w.view(rows, groups, g).mul_(
            prepared.scales[r0:r1, k0 // g:k1 // g].unsqueeze(-1)).view(rows, k1 - k0)
    return w.mul_(prepared.scales[r0:r1, k0 // g:k0 // g + 1])


def w4a16_dequant_bf16(x: torch.Tensor, prepared: W4A16Prepared) -> torch.Tensor:
    """Dequantize W to bfloat16 block by block, then a bf16 GEMM -> float32 [M, N].

    Only where bf16 is native (`bf16_is_native`); KernelUnavailableError elsewhere."""
    _check(x, prepared)
    ok, why = bf16_is_native()
    if not ok:
        raise KernelUnavailableError(f"w4a16_dequant_bf16 would be emulated here: {why}")
    return _dequant(x, prepared, torch.bfloat16)




def fallback_candidates(prepared: W4A16Prepared) -> dict:
    """The paths the fallback chooses among for this layer on this CPU: name -> fn(x, prepared)."""
    fns = {"dequant": _dequant}
    if prepared.tinygemm_ok:
        fns["tinygemm"] = _tinygemm
    if bf16_is_native()[0]:
        fns["dequant_bf16"] = lambda x, prepared: _dequant(x, prepared, torch.bfloat16)
    return fns


def w4a16_fallback(x: torch.Tensor, prepared: W4A16Prepared) -> torch.Tensor:
    """Whichever W4A16 path is fastest for this M (float32 [M, N]): tinygemm, dequant
    + float32 GEMM, and dequant + bf16 GEMM where bf16 is native.

    The first call in each power-of-two M bucket times the candidates on this x, three
    interleaved tries each (two when a call takes over half a second), and keeps the
    fastest by its minimum (CPU time with one torch thread, wall time with more); later
    calls in the bucket run it directly. `fallback_choice(prepared, m)` tells which path runs.
    """
    _check(x, prepared)
    m = x.shape[0]
    if m == 0:
        return torch.empty(0, prepared.n)
    fns = fallback_candidates(prepared)
    # the chosen path without checking x a second time: the fallback adds only a lookup
    return fns[pick(prepared.choices, prepared.timings, fns, x, prepared)](x, prepared)


def fallback_choice(prepared: W4A16Prepared, m: int) -> str | None:
    """The path the fallback runs for M (None until that M bucket has been tuned)."""
    return prepared.choices.get(m_bucket(m))
