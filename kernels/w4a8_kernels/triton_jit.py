"""Triton JIT kernels: per-token int8 quantization, W4A8 (int8 tensor cores) and W4A16.

Imported only through kernels.triton_w4a8 / kernels.triton_w4a16, after the
availability probe, because importing it imports triton.

Weight operand: the half-split layout of kernels.triton_pack. Packed int8 [N, Kp/2];
byte j of row n holds w[n, j] (low nibble) and w[n, Kp/2 + j] (high nibble). A K step of
BLOCK_K bytes thus covers activation columns [k0, k0 + BLOCK_K) with the low nibbles and
[Kp/2 + k0, Kp/2 + k0 + BLOCK_K) with the high nibbles: two dots per step, no permute.
The unpacked operands are 16 * w (nibble at the top of the byte); the stored scales are
scale / 16.

Orientation: with SWAP_AB = False the tile is acc[BM, BN] = X[BM, BK] @ W^T[BK, BN];
with SWAP_AB = True it is acc[BN, BM] = W[BN, BK] @ X^T[BK, BM], which lets Triton feed
the unpacked weight to the tensor cores from registers and makes M the narrow side.

Split-K: each split writes its scaled float32 partial to a workspace, then bumps a
per-tile counter; the split that arrives last sums the partials in split order (so the
result does not depend on arrival order), writes the output and resets the counter.
"""
from __future__ import annotations

import os

import triton
import triton.language as tl


# %% per-token int8 quantization

@triton.jit
def quant_per_token_int8_kernel(
    x_ptr, xq_ptr, xs_ptr,
    K, stride_xm, stride_qm,
    BLOCK: tl.constexpr,
):
    """One program per row: amax = max(|x|, 1e-10), scale = amax / 127,
    x_q = round_half_away(x * (127 / amax)), with correctly rounded divisions so the
    result matches kernels.quant.quantize_per_token_int8 bit for bit."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    q_row = xq_ptr + row * stride_qm
    cols = tl.arange(0, BLOCK)
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        v = tl.load(x_row + k0 + cols, mask=k0 + cols < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(v))
    a = tl.maximum(tl.max(amax, axis=0), 1e-10).to(tl.float64)
    # A float64 quotient rounded to float32 is the correctly rounded float32 quotient
    # (53 >= 2 * 24 + 2), on the GPU and in the interpreter alike. The reference
    # computes 127 / amax the way torch evaluates `127.0 / tensor`: a rounded
    # reciprocal times 127, so the same two roundings happen here.
    inv = (1.0 / a).to(tl.float32) * 127.0
    tl.store(xs_ptr + row, (a / 127.0).to(tl.float32))
    for k0 in range(0, K, BLOCK):
        mask = k0 + cols < K
        v = tl.load(x_row + k0 + cols, mask=mask, other=0.0).to(tl.float32) * inv
        # Ties away from zero, exactly: v - trunc(v) is exact in binary floating point.
        t = v.to(tl.int32)
        frac = v - t.to(tl.float32)
        q = t + (frac >= 0.5).to(tl.int32) - (frac <= -0.5).to(tl.int32)
        q = tl.minimum(tl.maximum(q, -128), 127)
        tl.store(q_row + k0 + cols, q.to(tl.int8), mask=mask)


# %% shared pieces

@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped ordering: GROUP_M row-tiles share each weight column-tile while in L2."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_n
    group_id = pid // width
    first_m = group_id * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % width) % size_m)
    pid_n = (pid % width) // size_m
    return pid_m, pid_n, pid_m * num_n + pid_n


@triton.jit
def _k_range(HALF_K, BLOCK_K: tl.constexpr, SPLIT_K):
    """[start, end) of this split's K steps (BLOCK_K bytes each) over Kp/2."""
    steps = HALF_K // BLOCK_K
    per = tl.cdiv(steps, SPLIT_K)
    start = tl.program_id(1) * per
    end = tl.minimum(start + per, steps)
    return start, end


# Orientation (module docstring): the accumulator is [BN, BM] with SWAP_AB, else [BM, BN];
# the activation tile is [BK, BM] with SWAP_AB, else [BM, BK]. These place a vector along
# the weight (or K) axis, or along the token axis, of either.

@triton.jit
def _per_n(v, SWAP_AB: tl.constexpr):
    """v along dim 0 with SWAP_AB, else dim 1: weight rows of the accumulator, K of the
    activation tile."""
    if SWAP_AB:
        return v[:, None]
    else:
        return v[None, :]


@triton.jit
def _per_m(v, SWAP_AB: tl.constexpr):
    """v along the token axis: dim 1 with SWAP_AB, else dim 0."""
    if SWAP_AB:
        return v[None, :]
    else:
        return v[:, None]


@triton.jit
def _acc_tile(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DTYPE: tl.constexpr,
              SWAP_AB: tl.constexpr):
    if SWAP_AB:
        return tl.zeros([BLOCK_N, BLOCK_M], dtype=DTYPE)
    else:
        return tl.zeros([BLOCK_M, BLOCK_N], dtype=DTYPE)


@triton.jit
def _operand_ptrs(wp_ptr, x_ptr, an, am, rk, stride_wn, stride_xm, SWAP_AB: tl.constexpr):
    """Pointers to the first K step of the packed weight tile and the activation tile."""
    if SWAP_AB:
        return (wp_ptr + an[:, None] * stride_wn + rk[None, :],
                x_ptr + am[None, :] * stride_xm + rk[:, None])
    else:
        return (wp_ptr + an[None, :] * stride_wn + rk[:, None],
                x_ptr + am[:, None] * stride_xm + rk[None, :])


@triton.jit
def _load_x_pair(x_ptrs, k0, HALF_K, K, rk, row_ok, EVEN_K: tl.constexpr, SWAP_AB: tl.constexpr):
    """The step's activations for the low and high halves of K (half-split layout); rows
    past M, and columns past K unless EVEN_K, read as 0."""
    rows = _per_m(row_ok, SWAP_AB)
    if EVEN_K:
        a_lo = tl.load(x_ptrs + k0, mask=rows, other=0)
        a_hi = tl.load(x_ptrs + (HALF_K + k0), mask=rows, other=0)
    else:
        a_lo = tl.load(x_ptrs + k0, mask=_per_n(k0 + rk < K, SWAP_AB) & rows, other=0)
        a_hi = tl.load(x_ptrs + (HALF_K + k0), mask=_per_n(HALF_K + k0 + rk < K, SWAP_AB) & rows,
                       other=0)
    return a_lo, a_hi


@triton.jit
def _dot(w, a, acc, SWAP_AB: tl.constexpr, OUT: tl.constexpr):
    """acc (None: zero) + the dot of a weight tile and an activation tile, in the kernel's
    orientation."""
    if SWAP_AB:
        return tl.dot(w, a, acc, out_dtype=OUT)
    else:
        return tl.dot(a, w, acc, out_dtype=OUT)


@triton.jit
def _out_offsets(rm, rn, M, N, stride_om, SWAP_AB: tl.constexpr):
    """Output offsets and mask of the accumulator tile."""
    offs = _per_m(rm.to(tl.int64), SWAP_AB) * stride_om + _per_n(rn, SWAP_AB)
    mask = _per_m(rm < M, SWAP_AB) & _per_n(rn < N, SWAP_AB)
    return offs, mask


# Inline PTX needs a GPU; the interpreter takes the plain-Triton form of the same ops.
_PTX: tl.constexpr = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"))


@triton.jit
def _unpack_lo(p):
    """int8 tile of packed bytes -> 16 * low nibble, as int8 (the nibble moved to the top
    of its byte is its two's complement value times 16: no sign extension needed; the
    1/16 is folded into the stored scales, see triton_pack)."""
    if _PTX:
        # Four bytes per 32-bit register: one shift and one mask for four weights.
        # Plain `p << 4` on int8 compiles to 16-bit shifts plus byte permutes.
        return tl.inline_asm_elementwise(
            "{ .reg .b32 t; shl.b32 t, $1, 4; and.b32 $0, t, 0xF0F0F0F0; }",
            "=r,r", [p], dtype=tl.int8, is_pure=True, pack=4)
    else:
        return p << 4


@triton.jit
def _unpack_hi(p):
    """int8 tile of packed bytes -> 16 * high nibble, as int8: the high nibble in place."""
    if _PTX:
        return tl.inline_asm_elementwise(
            "and.b32 $0, $1, 0xF0F0F0F0;", "=r,r", [p], dtype=tl.int8, is_pure=True, pack=4)
    else:
        return p & -16


@triton.jit
def _small_i32_to_f32(d):
    """Exact int32 -> float32 for |d| <= 2**22 (one group's dot: |d| <= 2**14 * g, g <= 256)
    by integer add + float subtract: int->float conversion runs at a quarter of the FMA
    rate on Hopper and would cost more than the group's tensor-core work."""
    return (d + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0


@triton.jit
def _store_tile(acc, out_ptr, part_ptr, lock_ptr, offs, mask, tile_id, MN, SPLIT_K,
                USE_SPLIT: tl.constexpr):
    """Write a finished float32 tile, or reduce split-K partials (see module docstring)."""
    if not USE_SPLIT:
        tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        pid_k = tl.program_id(1)
        tl.store(part_ptr + pid_k * MN + offs, acc, mask=mask)
        # Every thread's partial is issued before the counter moves (release below).
        tl.debug_barrier()
        arrived = tl.atomic_add(lock_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.zeros_like(acc)
            for s in range(SPLIT_K):
                # .cg reads from L2: other multiprocessors wrote these partials.
                total += tl.load(part_ptr + s * MN + offs, mask=mask, cache_modifier=".cg")
            tl.store(out_ptr + offs, total.to(out_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(lock_ptr + tile_id, 0, sem="relaxed", scope="gpu")


# %% W4A8: int8 activations x int4 weights on int8 tensor cores

@triton.jit
def _idot(w, a, SWAP_AB: tl.constexpr):
    """One group's int32 dot."""
    return _dot(w, a, None, SWAP_AB, tl.int32)


@triton.jit
def _scaled(d, s, SWAP_AB: tl.constexpr):
    """One group's int32 dot in float32 (exact) times its scales, one per weight row."""
    return _small_i32_to_f32(d) * _per_n(s, SWAP_AB)


@triton.jit
def _grouped_step(acc, d_late, s_late, p, a_lo, a_hi, s_lo, s_hi, SCHEDULE: tl.constexpr,
                  SWAP_AB: tl.constexpr):
    """One K step of grouped weights: two group dots, each scaled into acc.

    SCHEDULE 2 scales the high half's dot one dot later (carried in d_late / s_late): on
    the H200 the scaling then interleaves with the next tensor-core op, 7% faster at
    prefill than scaling each dot as soon as it is done (SCHEDULE 0).
    """
    if SCHEDULE == 0:
        acc += _scaled(_idot(_unpack_lo(p), a_lo, SWAP_AB), s_lo, SWAP_AB)
        acc += _scaled(_idot(_unpack_hi(p), a_hi, SWAP_AB), s_hi, SWAP_AB)
    else:
        d_lo = _idot(_unpack_lo(p), a_lo, SWAP_AB)
        acc += _scaled(d_late, s_late, SWAP_AB)
        d_late = _idot(_unpack_hi(p), a_hi, SWAP_AB)
        s_late = s_hi
        acc += _scaled(d_lo, s_lo, SWAP_AB)
    return acc, d_late, s_late


@triton.jit(do_not_specialize=["M", "SPLIT_K"])
def w4a8_kernel(
    # pointers
    xq_ptr, xs_ptr, wp_ptr, ws_ptr, out_ptr, part_ptr, lock_ptr,
    # dimensions: K is the activation width, HALF_K = Kp / 2 the packed row length
    M, N, K, HALF_K,
    # strides (elements)
    stride_xm, stride_wn, stride_sg, stride_om,
    # meta
    GROUP_K: tl.constexpr,  # 0 = per-channel; else the group size, equal to BLOCK_K
    EVEN_K: tl.constexpr,   # K == Kp: no activation column needs masking
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K,  # K splits (grid axis 1); USE_SPLIT is SPLIT_K > 1
    GROUP_M: tl.constexpr, USE_SPLIT: tl.constexpr, SWAP_AB: tl.constexpr,
    SCHEDULE: tl.constexpr = 0,  # grouped: 0 scale each dot when done, 2 one dot later
    INT_RESCALE: tl.constexpr = False,  # grouped: int32 scales, summed in int32 (Marlin's)
    RESCALE=1.0,  # INT_RESCALE: float32 factor of the integer scales, times xs
):
    """out[M, N] = xs[m] * sum_groups s[g, n] * (xq[m, group] . w[n, group]), int32 dots.

    xq int8 [M, K], xs float32 [M], wp int8 [N, Kp/2] (half-split), ws float32
    [Kp/g, N] (or [1, N] per-channel), out bf16/fp16 [M, N].
    INT_RESCALE: ws int32 [Kp/g, N]; acc_i += (dot >> 4) * s (the operands are 16 * w, so
    the shift is exact) wraps like Marlin's int32 accumulator; one conversion to float32 at
    the end, times float32(xs * RESCALE).
    """
    pid_m, pid_n, tile_id = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    start, end = _k_range(HALF_K, BLOCK_K, SPLIT_K)

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Columns past N wrap (loads stay unmasked; the store masks). Rows past M are masked
    # instead: wrapped rows of a small M would re-load one activation row many times.
    row_ok = rm < M
    am = (rm % M).to(tl.int64)
    an = (rn % N).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    groups_half = HALF_K // (GROUP_K if GROUP_K > 0 else 1)

    w_ptrs, x_ptrs = _operand_ptrs(wp_ptr, xq_ptr, an, am, rk, stride_wn, stride_xm, SWAP_AB)
    acc_i = _acc_tile(BLOCK_M, BLOCK_N, tl.int32, SWAP_AB)
    acc = _acc_tile(BLOCK_M, BLOCK_N, tl.float32, SWAP_AB)
    d_late = _acc_tile(BLOCK_M, BLOCK_N, tl.int32, SWAP_AB)
    s_late = tl.zeros([BLOCK_N], dtype=tl.float32)
    for it in range(start, end):
        k0 = it * BLOCK_K
        p = tl.load(w_ptrs + k0)
        a_lo, a_hi = _load_x_pair(x_ptrs, k0, HALF_K, K, rk, row_ok, EVEN_K, SWAP_AB)
        if GROUP_K == 0:
            acc_i = _dot(_unpack_lo(p), a_lo, acc_i, SWAP_AB, tl.int32)
            acc_i = _dot(_unpack_hi(p), a_hi, acc_i, SWAP_AB, tl.int32)
        elif INT_RESCALE:
            s_lo = tl.load(ws_ptr + it * stride_sg + an)
            s_hi = tl.load(ws_ptr + (groups_half + it) * stride_sg + an)
            acc_i += (_idot(_unpack_lo(p), a_lo, SWAP_AB) >> 4) * _per_n(s_lo, SWAP_AB)
            acc_i += (_idot(_unpack_hi(p), a_hi, SWAP_AB) >> 4) * _per_n(s_hi, SWAP_AB)
        else:
            s_lo = tl.load(ws_ptr + it * stride_sg + an)
            s_hi = tl.load(ws_ptr + (groups_half + it) * stride_sg + an)
            acc, d_late, s_late = _grouped_step(acc, d_late, s_late, p, a_lo, a_hi, s_lo, s_hi,
                                                SCHEDULE, SWAP_AB)
    if GROUP_K != 0 and SCHEDULE == 2 and not INT_RESCALE:
        acc += _scaled(d_late, s_late, SWAP_AB)
    if GROUP_K == 0:
        acc = acc_i.to(tl.float32) * _per_n(tl.load(ws_ptr + an), SWAP_AB)
    if INT_RESCALE:
        acc = acc_i.to(tl.float32) * _per_m(tl.load(xs_ptr + am) * RESCALE, SWAP_AB)
    else:
        acc = acc * _per_m(tl.load(xs_ptr + am), SWAP_AB)
    offs, mask = _out_offsets(rm, rn, M, N, stride_om, SWAP_AB)

    _store_tile(acc, out_ptr, part_ptr, lock_ptr, offs, mask, tile_id,
                tl.cast(M, tl.int64) * N, SPLIT_K, USE_SPLIT)


# %% W4A16: bf16/fp16 activations x int4 weights dequantized in registers

# Nibble -> 16-bit float with integer bit tricks (no int->float conversion, which runs at
# a quarter of the FMA rate): the offset nibble n + 8 becomes the low mantissa bits of
# 128 + (n + 8) in bf16 (1024 + (n + 8) in fp16), one fma then subtracts 136 (1032)
# exactly; a second fma multiplies by the scale (times 1, plus -0: rounded once). Four
# weights per instance: one byte each in, two 16-bit halves per register out.
# Outputs are written last, from temporaries: "=r" outputs may share registers with the
# inputs ($2 bytes, $3 $4 scales, two per register).
_NIB_TO_F16 = """{
.reg .b32 t, u0, u1, hi, one, off, z, r0, r1;
EXTRACT
xor.b32 t, t, 0x08080808;
mov.b32 hi, MAGIC;
prmt.b32 u0, t, hi, 0x4140;
prmt.b32 u1, t, hi, 0x4342;
mov.b32 one, ONE;
mov.b32 off, OFFSET;
fma.rn.TY u0, u0, one, off;
fma.rn.TY u1, u1, one, off;
mov.b32 z, 0x80008000;
fma.rn.TY r0, u0, $3, z;
fma.rn.TY r1, u1, $4, z;
mov.b32 $0, r0;
mov.b32 $1, r1;
}"""
_EXTRACT = {False: "and.b32 t, $2, 0x0F0F0F0F;", True: "shr.u32 t, $2, 4;\nand.b32 t, t, 0x0F0F0F0F;"}
_FMT = {"bf16": ("0x43434343", "0x3F803F80", "0xC308C308", "bf16x2"),
        "fp16": ("0x64646464", "0x3C003C00", "0xE408E408", "f16x2")}


def _nib_asm(high: bool, fmt: str) -> str:
    magic, one, off, ty = _FMT[fmt]
    src = _NIB_TO_F16.replace("EXTRACT", _EXTRACT[high]).replace("MAGIC", magic)
    return src.replace("ONE", one).replace("OFFSET", off).replace("TY", ty)


# Per-channel variant: n only (the scale multiplies the accumulator), one input and two
# weights per instance, so the compiler may move the int8 tile into the dot-operand layout
# before converting (a single-input four-weight variant gave wrong values there).
_NIB_TO_F16_INT = """{
.reg .b32 t, u, hi, one, off;
EXTRACT
xor.b32 t, t, 0x00000808;
mov.b32 hi, MAGIC;
prmt.b32 u, t, hi, 0x4140;
mov.b32 one, ONE;
mov.b32 off, OFFSET;
fma.rn.TY $0, u, one, off;
}"""
_EXTRACT_INT = {False: "and.b32 t, $1, 0x00000F0F;",
                True: "shr.u32 t, $1, 4;\nand.b32 t, t, 0x00000F0F;"}


def _nib_int_asm(high: bool, fmt: str) -> str:
    magic, one, off, ty = _FMT[fmt]
    src = _NIB_TO_F16_INT.replace("EXTRACT", _EXTRACT_INT[high]).replace("MAGIC", magic)
    return src.replace("ONE", one).replace("OFFSET", off).replace("TY", ty)


_ASM_INT_LO_BF16: tl.constexpr = tl.constexpr(_nib_int_asm(False, "bf16"))
_ASM_INT_HI_BF16: tl.constexpr = tl.constexpr(_nib_int_asm(True, "bf16"))
_ASM_INT_LO_FP16: tl.constexpr = tl.constexpr(_nib_int_asm(False, "fp16"))
_ASM_INT_HI_FP16: tl.constexpr = tl.constexpr(_nib_int_asm(True, "fp16"))
_ASM_LO_BF16: tl.constexpr = tl.constexpr(_nib_asm(False, "bf16"))
_ASM_HI_BF16: tl.constexpr = tl.constexpr(_nib_asm(True, "bf16"))
_ASM_LO_FP16: tl.constexpr = tl.constexpr(_nib_asm(False, "fp16"))
_ASM_HI_FP16: tl.constexpr = tl.constexpr(_nib_asm(True, "fp16"))


@triton.jit
def _nibbles_to_f16(p, s, HIGH: tl.constexpr, DTYPE: tl.constexpr):
    """GPU only: int4 nibbles of packed bytes -> DTYPE n * s (s: DTYPE, same shape).

    inline_asm_elementwise does not unwrap a constexpr dtype: each one is spelled out.
    """
    if DTYPE == tl.bfloat16:
        if HIGH:
            w = tl.inline_asm_elementwise(_ASM_HI_BF16, "=r,=r,r,r,r", [p, s],
                                          dtype=tl.bfloat16, is_pure=True, pack=4)
        else:
            w = tl.inline_asm_elementwise(_ASM_LO_BF16, "=r,=r,r,r,r", [p, s],
                                          dtype=tl.bfloat16, is_pure=True, pack=4)
    else:
        if HIGH:
            w = tl.inline_asm_elementwise(_ASM_HI_FP16, "=r,=r,r,r,r", [p, s],
                                          dtype=tl.float16, is_pure=True, pack=4)
        else:
            w = tl.inline_asm_elementwise(_ASM_LO_FP16, "=r,=r,r,r,r", [p, s],
                                          dtype=tl.float16, is_pure=True, pack=4)
    return w


@triton.jit
def _nibbles_to_int_f16(p, HIGH: tl.constexpr, DTYPE: tl.constexpr):
    """GPU only: int4 nibbles of packed bytes -> DTYPE integers n (exact)."""
    if DTYPE == tl.bfloat16:
        if HIGH:
            w = tl.inline_asm_elementwise(_ASM_INT_HI_BF16, "=r,r", [p], dtype=tl.bfloat16,
                                          is_pure=True, pack=2)
        else:
            w = tl.inline_asm_elementwise(_ASM_INT_LO_BF16, "=r,r", [p], dtype=tl.bfloat16,
                                          is_pure=True, pack=2)
    else:
        if HIGH:
            w = tl.inline_asm_elementwise(_ASM_INT_HI_FP16, "=r,r", [p], dtype=tl.float16,
                                          is_pure=True, pack=2)
        else:
            w = tl.inline_asm_elementwise(_ASM_INT_LO_FP16, "=r,r", [p], dtype=tl.float16,
                                          is_pure=True, pack=2)
    return w


@triton.jit
def _dequant_int(p, HIGH: tl.constexpr, DTYPE: tl.constexpr):
    """Per-channel INT_DQ path: packed bytes -> DTYPE integers n (scale applied later)."""
    if _PTX:
        w = _nibbles_to_int_f16(p, HIGH, DTYPE)
    else:
        if HIGH:
            q = _unpack_hi(p)
        else:
            q = _unpack_lo(p)
        w = (q.to(tl.float32) * 0.0625).to(DTYPE)
    return w


@triton.jit
def _dequant(p, HIGH: tl.constexpr, s_ptr, idx, stride_sg, an, GROUP_K: tl.constexpr,
             BLOCK_K: tl.constexpr, SWAP_AB: tl.constexpr, DTYPE: tl.constexpr):
    """Packed bytes -> DTYPE weights n * s of the low or high nibbles.

    s is the column's scale (per-channel, GROUP_K == 0) or its group's, rounded to DTYPE
    first as a bf16/fp16 checkpoint stores it; the product is rounded once.
    idx: K index (packed coordinates, 0..Kp) of the tile's first column.
    Per-channel weights take the same path as grouped ones: a single-input inline-asm
    variant (integer n, scale on the accumulator) returned wrong values for about 1% of
    outputs with swap_ab on the H200 (Triton 3.6), where this path checked exact.
    """
    # Stored scales are scale / 16 (triton_pack): x16 is exact.
    if GROUP_K == 0:
        sv = tl.load(s_ptr + an) * 16.0
    elif BLOCK_K <= GROUP_K:
        sv = tl.load(s_ptr + (idx // GROUP_K) * stride_sg + an) * 16.0
    if GROUP_K == 0 or BLOCK_K <= GROUP_K:
        if SWAP_AB:
            s = tl.broadcast_to(sv[:, None], p.shape)
        else:
            s = tl.broadcast_to(sv[None, :], p.shape)
    else:
        # A tile spans several groups: gather each column's scale (L1-resident).
        g = (idx + tl.arange(0, BLOCK_K)) // GROUP_K
        if SWAP_AB:
            s = tl.load(s_ptr + g[None, :] * stride_sg + an[:, None]) * 16.0
        else:
            s = tl.load(s_ptr + g[:, None] * stride_sg + an[None, :]) * 16.0
    if _PTX:
        w = _nibbles_to_f16(p, s.to(DTYPE), HIGH, DTYPE)
    else:
        if HIGH:
            q = _unpack_hi(p)
        else:
            q = _unpack_lo(p)
        # Same roundings as the PTX path: scale to DTYPE, then n * scale once.
        w = ((q.to(tl.float32) * 0.0625) * s.to(DTYPE).to(tl.float32)).to(DTYPE)
    return w


@triton.jit
def _scale_tile(s_ptr, idx, stride_sg, an, GROUP_K: tl.constexpr, SWAP_AB: tl.constexpr,
                DTYPE: tl.constexpr):
    """SCALE_MUL: the step's scale vector in DTYPE (the checkpoint's rounding), shaped to
    broadcast over the weight tile. A step lies in one group (BLOCK_K <= GROUP_K); x16
    undoes the stored 1/16, exactly."""
    if GROUP_K == 0:
        sv = tl.load(s_ptr + an) * 16.0
    else:
        sv = tl.load(s_ptr + (idx // GROUP_K) * stride_sg + an) * 16.0
    return _per_n(sv.to(DTYPE), SWAP_AB)


@triton.jit
def _weights(p, HIGH: tl.constexpr, s_ptr, idx, stride_sg, an, GROUP_K: tl.constexpr,
             BLOCK_K: tl.constexpr, SWAP_AB: tl.constexpr, DTYPE: tl.constexpr,
             INT_DQ: tl.constexpr, SCALE_MUL: tl.constexpr):
    """The low or high weight tile of a step in DTYPE, by the kernel's dequant path."""
    if INT_DQ:
        w = _dequant_int(p, HIGH, DTYPE)
    elif SCALE_MUL:
        w = _dequant_int(p, HIGH, DTYPE) * _scale_tile(s_ptr, idx, stride_sg, an, GROUP_K, SWAP_AB,
                                                       DTYPE)
    else:
        w = _dequant(p, HIGH, s_ptr, idx, stride_sg, an, GROUP_K, BLOCK_K, SWAP_AB, DTYPE)
    return w


@triton.jit
def _w4a16_step(acc, acc_hi, p, a_lo, a_hi, s_ptr, k0, HALF_K, stride_sg, an,
                GROUP_K: tl.constexpr, BLOCK_K: tl.constexpr, SWAP_AB: tl.constexpr,
                DTYPE: tl.constexpr, INT_DQ: tl.constexpr, SCALE_MUL: tl.constexpr,
                TWO_ACC: tl.constexpr):
    """One K step: dequantize both halves of the packed tile, two dots."""
    w_lo = _weights(p, False, s_ptr, k0, stride_sg, an, GROUP_K, BLOCK_K, SWAP_AB, DTYPE,
                    INT_DQ, SCALE_MUL)
    w_hi = _weights(p, True, s_ptr, HALF_K + k0, stride_sg, an, GROUP_K, BLOCK_K, SWAP_AB,
                    DTYPE, INT_DQ, SCALE_MUL)
    acc = _dot(w_lo, a_lo, acc, SWAP_AB, tl.float32)
    if TWO_ACC:
        acc_hi = _dot(w_hi, a_hi, acc_hi, SWAP_AB, tl.float32)
    else:
        acc = _dot(w_hi, a_hi, acc, SWAP_AB, tl.float32)
    return acc, acc_hi


@triton.jit(do_not_specialize=["M", "SPLIT_K"])
def w4a16_kernel(
    # pointers
    x_ptr, wp_ptr, ws_ptr, out_ptr, part_ptr, lock_ptr,
    # dimensions
    M, N, K, HALF_K,
    # strides (elements)
    stride_xm, stride_wn, stride_sg, stride_om,
    # meta
    GROUP_K: tl.constexpr,  # 0 = per-channel, else the group size
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K,
    GROUP_M: tl.constexpr, USE_SPLIT: tl.constexpr, SWAP_AB: tl.constexpr,
    INT_DQ: tl.constexpr = False,  # per-channel only: exact integers, scale on the accumulator
    SCALE_MUL: tl.constexpr = False,  # integer dequant, then n * s as a plain Triton multiply
    TWO_ACC: tl.constexpr = False,  # low and high halves in separate accumulators (see below)
):
    """out[M, N] = x[M, K] @ (w * s)^T with w * s rounded to x's dtype, fp32 accumulation.

    With INT_DQ (per-channel weights) the dot takes the exact integers and the fp32
    accumulator is scaled at the end instead. With TWO_ACC the two dots of a step chain
    into separate accumulators, summed once at the end: with one accumulator Triton waits
    for the first wgmma before issuing the second; with two, every wgmma stays in flight
    while the next step's weights are dequantized.
    """
    DTYPE: tl.constexpr = x_ptr.dtype.element_ty
    pid_m, pid_n, tile_id = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    start, end = _k_range(HALF_K, BLOCK_K, SPLIT_K)

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rm < M  # rows past M: masked loads (see w4a8_kernel)
    am = (rm % M).to(tl.int64)
    an = (rn % N).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)

    w_ptrs, x_ptrs = _operand_ptrs(wp_ptr, x_ptr, an, am, rk, stride_wn, stride_xm, SWAP_AB)
    acc = _acc_tile(BLOCK_M, BLOCK_N, tl.float32, SWAP_AB)
    acc_hi = _acc_tile(BLOCK_M, BLOCK_N, tl.float32, SWAP_AB)
    for it in range(start, end):
        k0 = it * BLOCK_K
        p = tl.load(w_ptrs + k0)
        a_lo, a_hi = _load_x_pair(x_ptrs, k0, HALF_K, K, rk, row_ok, EVEN_K, SWAP_AB)
        acc, acc_hi = _w4a16_step(acc, acc_hi, p, a_lo, a_hi, ws_ptr, k0, HALF_K, stride_sg, an,
                                  GROUP_K, BLOCK_K, SWAP_AB, DTYPE, INT_DQ, SCALE_MUL, TWO_ACC)
    if TWO_ACC:
        acc += acc_hi
    if INT_DQ:
        acc = acc * _per_n(tl.load(ws_ptr + an) * 16.0, SWAP_AB)
    offs, mask = _out_offsets(rm, rn, M, N, stride_om, SWAP_AB)

    _store_tile(acc, out_ptr, part_ptr, lock_ptr, offs, mask, tile_id,
                tl.cast(M, tl.int64) * N, SPLIT_K, USE_SPLIT)
