"""W4A8 native on the CPU: int8 activations x int4 weights, integer dots, float scales.

    x [M, K] float --quantize_per_token_int8--> x_q int8 [M, K], x_scale [M, 1]
    out[m, n] = x_scale[m] * sum_g w_scale[n, g] * sum_{k in g} x_q[m, k] * (w_q[n, k] - z[n, g])

The integer sums are exact (int32 semantics), each group's sum is scaled in float32 and
summed, so the result equals `w4a8_reference` up to float32 rounding. Weights are
prepared once (`prepare_w4a8`) into the chosen engine's layout (`engine=` forces one of
`Int8Engine`, else the fastest here); no float copy of the weight is made per call.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from w4a8_kernels import _native_lib
from w4a8_kernels._checks import (check_activations, check_device, check_token_scales, check_weight,
                                  memory_guard, scale_notes)
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError
from w4a8_kernels.int8_gemm import (FP32_EXACT_MAX_TERMS, Int8Engine,
                                    check_accumulator_range, engine_available, fbgemm_pack, int_mm)
from w4a8_kernels.quant import center_int4, quantize_per_token_int8, quantize_per_token_int8_codes

__all__ = ["W4A8Prepared", "prepare_w4a8", "w4a8_native", "w4a8_native_from_quantized",
           "rank_engines", "LARGE_M"]

_NR = 8  # columns per tile of the AVX2 kernel
# "auto" ranks the engines twice: at _SMALL_M_TIMED tokens (decode: memory-bound, where the
# VNNI kernel streams the packed weight) and at _LARGE_M_TIMED (compute-bound, where AMX
# tiles do several times the multiply-adds). Where the two winners differ, calls of at
# least LARGE_M tokens run the second on its own copy of the weight (at N = K = 4096 on an
# AMX host, 2 threads, per-channel / g128: AMX 1.0 / 1.19x VNNI's time at M = 16, 0.75 / 0.89x
# at 24, 0.58 / 0.65x at 32; AMX pads the tokens to 32, so 24 costs it what 32 does).
_SMALL_M_TIMED, _LARGE_M_TIMED, LARGE_M = 4, 128, 24


@dataclass(eq=False)
class W4A8Prepared:
    """An int4 weight laid out for one integer engine. Build it with `prepare_w4a8`."""

    n: int
    k: int
    group_size: int  # effective: K when per-channel
    engine: Int8Engine
    scales: torch.Tensor  # float32 [N, G]
    asymmetric: bool
    blocks: list = field(default_factory=list)  # engine-specific per-group weight blocks
    avx2: dict = field(default_factory=dict)  # AVX2 kernel buffers
    u4: dict = field(default_factory=dict)  # packed-int4 C kernel buffers
    amx: dict = field(default_factory=dict)  # AMX kernel buffers
    notes: tuple[str, ...] = ()  # accepted but unusual inputs (e.g. negative scales)
    large_m: "W4A8Prepared | None" = None  # the same weight for calls of >= LARGE_M tokens
    scale_absmax: float = field(init=False)  # bounds the output for check_token_scales

    def __post_init__(self):
        self.scale_absmax = float(self.scales.abs().max()) if self.scales.numel() else 0.0

    @property
    def n_groups(self) -> int:
        return self.k // self.group_size

    def for_m(self, m: int) -> "W4A8Prepared":
        """The layout that runs a call of m tokens."""
        return self.large_m if self.large_m is not None and m >= LARGE_M else self

    def engine_for(self, m: int) -> Int8Engine:
        """The integer engine a call of m tokens runs."""
        return self.for_m(m).engine


def _prepare_avx2(wc: torch.Tensor, scales: torch.Tensor, g: int) -> dict:
    """Lay the centered weight out as the C kernel reads it (see w4a8_avx2.c)."""
    n, k = wc.shape
    n_pad = -(-n // _NR) * _NR
    k4 = -(-k // 4)
    groups = k // g
    # Per-channel K is padded to the kernel's step of 4 with zero weights (and code-0
    # activations, see w4a8_native_from_quantized): the dot and the correction term then
    # cover the same K columns. Grouped weights need g % 4 == 0 (checked by the caller).
    g4 = k4 if groups == 1 else g // 4
    if g4 * groups != k4:
        raise KernelInputError(f"the avx2_u8s8 engine needs a group size that is a multiple "
                               f"of 4 (or per-channel), got {g} with K = {k}")
    w = torch.zeros(n_pad, k4 * 4, dtype=torch.int8)
    w[:n, :k] = wc
    # [N/8, 8, K/4, 4] -> [N/8, K/4, 8, 4]
    bp = w.view(n_pad // _NR, _NR, k4, 4).permute(0, 2, 1, 3).contiguous()
    comp = torch.zeros(n_pad, groups, dtype=torch.int32)
    comp[:n] = 128 * wc.to(torch.int32).view(n, groups, g).sum(-1)
    sc = torch.zeros(n_pad, groups, dtype=torch.float32)
    sc[:n] = scales
    # [N/8, 8, G] -> [N/8, G, 8]
    comp = comp.view(n_pad // _NR, _NR, groups).transpose(1, 2).contiguous()
    sc = sc.view(n_pad // _NR, _NR, groups).transpose(1, 2).contiguous()
    # 32-byte aligned loads in the kernel: keep a 64-byte aligned copy of bp.
    flat = torch.empty(bp.numel() + 64, dtype=torch.int8)
    off = (-flat.data_ptr()) % 64
    bp_aligned = flat[off:off + bp.numel()].view_as(bp)
    bp_aligned.copy_(bp)
    # int16 partial sums of `ch` vpmaddubsw results stay exact: 8 when |w| <= 8, else 4
    ch = 8 if int(wc.abs().max()) <= 8 else 4
    return {"bp": bp_aligned, "bp_storage": flat, "comp": comp, "sc": sc, "k4": k4, "g4": g4,
            "n_pad": n_pad, "ch": ch}


def _nibbles(w_q: torch.Tensor, zeros: torch.Tensor | None, scales: torch.Tensor, g: int,
             gp: int, n_pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The packed engines' common start: unsigned nibbles uint8 [n_pad, G, gp] (each group
    padded with zeros to gp, rows to n_pad), zero points int32 and scales float32 [n_pad, G]."""
    n, k = w_q.shape
    groups = k // g
    u = torch.zeros(n_pad, groups, gp, dtype=torch.uint8)
    # symmetric w in [-8, 7] is the nibble w + 8 with zero point 8; asymmetric: as stored
    u[:n, :, :g] = (w_q if zeros is not None else w_q + 8).view(torch.uint8).view(n, groups, g)
    zs = torch.zeros(n_pad, groups, dtype=torch.int32)
    zs[:n] = zeros.to(torch.int32) if zeros is not None else 8
    sc = torch.zeros(n_pad, groups, dtype=torch.float32)
    sc[:n] = scales
    return u, zs, sc


def _prepare_u4(w_q: torch.Tensor, zeros: torch.Tensor | None, scales: torch.Tensor, g: int,
                lib) -> dict:
    """Pack the weight's unsigned nibbles as w4a8_u4.c reads them; each group padded to 8.
    "weight" is the C descriptor of these buffers and "linear" the library's one-call
    entry, both looked up once: a decode call is ~0.2 ms, and each Python step after the
    weight stream has emptied the caches costs a few us."""
    (n, k), groups, gp, nr = w_q.shape, w_q.shape[1] // g, -(-g // 8) * 8, lib.nr
    n_pad = -(-n // nr) * nr
    k8 = groups * gp // 8
    u, zs, sc = _nibbles(w_q, zeros, scales, g, gp, n_pad)
    u = u.view(n_pad, k8, 2, 4)  # k = 8 s + 4 h + j
    packed = (u[:, :, 0] | (u[:, :, 1] << 4)).view(n_pad // nr, nr, k8, 4).permute(0, 2, 1, 3)
    # every zero point 8 (symmetric, or asymmetric that happens to be): the kernel then
    # reads no zero points
    symmetric = bool((zs[:n] == 8).all())
    buffers = {"bp": packed.contiguous(), "g8": gp // 8, "gp": gp,
               "zs": zs.view(n_pad // nr, nr, groups).transpose(1, 2).contiguous(),
               "sc": sc.view(n_pad // nr, nr, groups).transpose(1, 2).contiguous()}
    weight = _native_lib.U4Weight(buffers["bp"].data_ptr(), buffers["zs"].data_ptr(),
                                  buffers["sc"].data_ptr(), n, k, g, gp, groups, gp // 8,
                                  int(symmetric))
    return {**buffers, "weight": weight, "weight_ptr": ctypes.addressof(weight),
            "linear": lib.linear}


def _prepare_amx(w_q: torch.Tensor, zeros: torch.Tensor | None, scales: torch.Tensor,
                 g: int) -> dict:
    """Pack the weight's unsigned nibbles as w4a8_amx.c reads them; groups padded to 64."""
    groups, gp = w_q.shape[1] // g, -(-g // 64) * 64
    n_pad = -(-w_q.shape[0] // 32) * 32
    k64 = groups * gp // 64
    u, zs, sc = _nibbles(w_q, zeros, scales, g, gp, n_pad)
    u = u.view(n_pad // 16, 16, k64, 2, 32)  # k = 64 kb + 32 h + j
    packed = (u[:, :, :, 0] | (u[:, :, :, 1] << 4)).permute(0, 2, 1, 3)  # [N/16, K64, 16, 32]
    return {"bp": packed.contiguous(), "gp": gp, "kpg": gp // 64, "zs": zs, "sc": sc}


def prepare_w4a8(
    w_q: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    zeros: torch.Tensor | None = None,
    *,
    engine: Int8Engine | str = "auto",
) -> W4A8Prepared:
    """Check the weight once and lay it out for an integer engine.

    engine "auto" takes the fastest engine this CPU has for per-channel or grouped
    weights (timed once per process, see `rank_engines`), and where another is faster
    for many tokens, that one too for calls of at least LARGE_M tokens (`for_m`); a named
    engine is used or refused with the reason. `avx2_u8s8` needs a group size that is a multiple of 4 (or
    per-channel); auto then takes the next engine. An engine whose int32 sums could
    overflow for this group length is never used (`check_accumulator_range`).
    """
    n, k, g, scales = check_weight(w_q, scales, group_size, zeros, device="cpu")
    grouped = g != k
    if engine == "auto":
        small, large = (_first_fitting([Int8Engine(e) for e, _ in rank_engines(grouped, m)], g, k, zeros)
                        for m in (_SMALL_M_TIMED, _LARGE_M_TIMED))
        prepared = _guarded_prepare(w_q, zeros, scales, g, small)
        if large is not small:
            prepared.large_m = _guarded_prepare(w_q, zeros, scales, g, large)
        return prepared
    try:
        chosen = Int8Engine(engine)
    except ValueError:
        raise KernelInputError(f"unknown int8 engine {engine!r}; known: auto, "
                               f"{', '.join(e.value for e in Int8Engine)}") from None
    ok, why = engine_available(chosen)
    if not ok:
        raise KernelUnavailableError(f"int8 engine {chosen.value} cannot run here: {why}")
    if grouped and g % 4 and chosen is Int8Engine.AVX2_U8S8:  # its groups step by 4 columns
        raise KernelInputError(
            f"the avx2_u8s8 engine needs a group size that is a multiple of 4, got {g}")
    check_accumulator_range(chosen, g, _w_absmax(zeros))  # padding adds zeros
    return _guarded_prepare(w_q, zeros, scales, g, chosen)


def _w_absmax(zeros) -> int:
    """The largest |w - z| an engine multiplies: 15 with zero points, 8 when symmetric."""
    return 15 if zeros is not None else 8


def _first_fitting(order: list, g: int, k: int, zeros) -> Int8Engine:
    """The first engine of `order` that runs this layer exactly (fp32_exact always can)."""
    for e in order:
        if e is Int8Engine.AVX2_U8S8 and g != k and g % 4:
            continue  # its groups step by 4 columns
        try:
            check_accumulator_range(e, g, _w_absmax(zeros))
        except KernelInputError:
            continue  # an engine whose int32 sums could overflow never runs this layer
        return e
    return Int8Engine.FP32_EXACT


def _guarded_prepare(w_q, zeros, scales, g: int, chosen: Int8Engine) -> W4A8Prepared:
    n, k = w_q.shape
    # int8 copies of the weight (centered, padded or packed per group), float32 for fp32_exact
    nbytes = (5 if chosen is Int8Engine.FP32_EXACT else 3) * n * k
    with memory_guard(f"preparing a W4A8 layer of {n} x {k} for engine {chosen.value}", nbytes):
        return _prepare(w_q, zeros, scales, g, chosen)


def _prepare(w_q, zeros, scales, g: int, chosen: Int8Engine) -> W4A8Prepared:
    n, k = w_q.shape
    packed_int4 = chosen in (Int8Engine.U4_AVX2, Int8Engine.U4_VNNI512, Int8Engine.U4_AMX)
    wc = None if packed_int4 else center_int4(w_q, zeros, g)
    prepared = W4A8Prepared(n=n, k=k, group_size=g, engine=chosen,
                            scales=scales.to(torch.float32).contiguous(),
                            asymmetric=zeros is not None, notes=scale_notes(scales))
    if chosen is Int8Engine.AVX2_U8S8:
        prepared.avx2 = _prepare_avx2(wc, prepared.scales, g)
        return prepared
    if chosen is Int8Engine.U4_AMX:
        _c_lib(chosen)
        prepared.amx = _prepare_amx(w_q, zeros, prepared.scales, g)
        return prepared
    if packed_int4:
        prepared.u4 = _prepare_u4(w_q, zeros, prepared.scales, g, _c_lib(chosen))
        return prepared
    # Other engines run one integer GEMM per group (per-channel: one in all).
    for j in range(k // g):
        block = wc[:, j * g:(j + 1) * g]
        if chosen is Int8Engine.FBGEMM:
            # the group's scales ride in FBGEMM's per-channel requantization
            prepared.blocks.append(fbgemm_pack(block, prepared.scales[:, j]))
        elif chosen is Int8Engine.INT_MM:
            # _int_mm is fastest with the transposed view of a row-major [N, K] block.
            prepared.blocks.append(block.contiguous())
        else:
            prepared.blocks.append(block.to(torch.float32).contiguous())
    return prepared


def _group_sums(x_qf: torch.Tensor, x_q: torch.Tensor, prepared: W4A8Prepared, j: int) -> torch.Tensor:
    """Exact integer sums of group j as float32 [M, N] (FBGEMM: already times the scales)."""
    g = prepared.group_size
    cols = slice(j * g, (j + 1) * g)
    block = prepared.blocks[j]
    if prepared.engine is Int8Engine.FBGEMM:
        a = x_qf[:, cols].contiguous()
        return torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(a, 1.0, 128, block)
    if prepared.engine is Int8Engine.INT_MM:
        return int_mm(x_q[:, cols], block).to(torch.float32)
    a = x_qf[:, cols]
    if g <= FP32_EXACT_MAX_TERMS:
        return a @ block.t()
    # Longer dots: exact float32 chunks, summed in float64 (exact), rounded once.
    acc = torch.zeros(a.shape[0], block.shape[0], dtype=torch.float64)
    for c in range(0, g, FP32_EXACT_MAX_TERMS):
        acc += (a[:, c:c + FP32_EXACT_MAX_TERMS] @ block[:, c:c + FP32_EXACT_MAX_TERMS].t()).double()
    return acc.to(torch.float32)


def w4a8_native_from_quantized(x_q: torch.Tensor, x_scale: torch.Tensor,
                               prepared: W4A8Prepared) -> torch.Tensor:
    """The GEMM on already-quantized activations: x_q int8 [M, K], x_scale [M, 1] -> float32 [M, N]."""
    if not isinstance(prepared, W4A8Prepared):
        raise KernelInputError("prepared must come from prepare_w4a8")
    if isinstance(x_q, torch.Tensor) and x_q.dim() == 2:
        prepared = prepared.for_m(x_q.shape[0])
    if not isinstance(x_q, torch.Tensor) or x_q.dtype != torch.int8 or x_q.dim() != 2:
        raise KernelInputError(f"x_q must be int8 [M, K], got "
                               f"{getattr(x_q, 'dtype', type(x_q).__name__)} {tuple(getattr(x_q, 'shape', ()))}")
    check_device(x_q, "x_q", "cpu")
    if x_q.shape[1] != prepared.k:
        raise KernelInputError(f"x_q has K = {x_q.shape[1]} columns but the weight has K = {prepared.k}")
    m = x_q.shape[0]
    if not isinstance(x_scale, torch.Tensor) or not x_scale.is_floating_point():
        raise KernelInputError(f"x_scale must be a floating tensor of {m} per-token scales, got "
                               f"{getattr(x_scale, 'dtype', type(x_scale).__name__)}")
    check_device(x_scale, "x_scale", "cpu")
    if x_scale.numel() != m or not bool(torch.isfinite(x_scale).all()):
        raise KernelInputError(f"x_scale must hold {m} finite per-token scales, got shape "
                               f"{tuple(x_scale.shape)}")
    if m == 0:
        return torch.empty(0, prepared.n, dtype=torch.float32)
    check_token_scales(x_scale, prepared.k, prepared.scale_absmax)
    x_scale = x_scale.to(torch.float32).reshape(m).contiguous()
    if prepared.amx:
        g, gp, groups = prepared.group_size, prepared.amx["gp"], prepared.n_groups
        codes = x_q.reshape(m, groups, g)
        a = torch.zeros(-(-m // 32) * 32, groups, gp, dtype=torch.int8)
        a[:m, :, :g] = codes
        return _amx_gemm(a.view(a.shape[0], groups * gp), m, x_scale, prepared)
    if prepared.u4:
        g, gp, groups = prepared.group_size, prepared.u4["gp"], prepared.n_groups
        codes = x_q.reshape(m, groups, g)
        a = torch.zeros(m, groups, gp, dtype=torch.int8)
        a[:, :, :g] = codes
        asum = codes.sum(-1, dtype=torch.int32).contiguous()
        return _u4_gemm(a.view(m, groups * gp), asum, x_scale, prepared)
    if prepared.engine is Int8Engine.AVX2_U8S8:
        lib = _native_lib.load()
        if lib is None:
            raise KernelUnavailableError(f"AVX2 W4A8 kernel unavailable: {_native_lib.why_unavailable()}")
        a = prepared.avx2
        # int8 code + 128 as uint8 is the code with its sign bit flipped.
        a_u8 = (x_q.contiguous().view(torch.uint8) ^ 128)
        if a["k4"] * 4 != prepared.k:
            a_u8 = torch.nn.functional.pad(a_u8, (0, a["k4"] * 4 - prepared.k), value=128)
        return _avx2_gemm(lib, a_u8.contiguous(), x_scale, prepared)
    x_qf = x_q.to(torch.float32) if prepared.engine is not Int8Engine.INT_MM else x_q
    return _grouped(x_qf, x_q, x_scale, prepared)


def _c_lib(engine: Int8Engine):
    lib = _native_lib.load(engine.value)
    if lib is None:
        raise KernelUnavailableError(
            f"{engine.value} W4A8 kernel unavailable: {_native_lib.why_unavailable(engine.value)}")
    return lib


def _amx_gemm(a: torch.Tensor, m: int, x_scale: torch.Tensor, prepared: W4A8Prepared) -> torch.Tensor:
    """w4a8_amx.c on group-padded codes [Mp, G * gp] (Mp a multiple of 32, pad rows zero)
    of m real rows, and their scales [m]."""
    u = prepared.amx
    mp, kp = a.shape
    lib = _c_lib(prepared.engine)
    # B tiles: [Mp / 16][K / 64][16 k-quads][16 tokens][4 codes], laid out on the GEMM's own
    # thread pool (a torch permute woke a second pool that fought it for the cores)
    a = a.contiguous()
    bt = torch.empty(mp * kp, dtype=torch.int8)
    if lib.tiles(a.data_ptr(), a.stride(0), mp, kp, bt.data_ptr(), torch.get_num_threads()) != 0:
        raise KernelInputError(f"AMX tiles need M padded to 16 and K to 64, got {mp} x {kp}")
    out = torch.empty(m, prepared.n, dtype=torch.float32)
    rc = lib.gemm(
        bt.data_ptr(), mp, m, prepared.n_groups, u["kpg"], u["bp"].data_ptr(), u["zs"].data_ptr(),
        u["sc"].data_ptr(), x_scale.data_ptr(), out.data_ptr(), out.stride(0), prepared.n,
        torch.get_num_threads())
    if rc != 0:
        raise KernelUnavailableError(f"{prepared.engine.value} W4A8 kernel failed with code {rc}")
    return out


def _amx_linear(x: torch.Tensor, m: int, prepared: W4A8Prepared) -> torch.Tensor:
    """w4a8_amx.c's one call: x float32 or bfloat16 [m, K] (unit column stride) quantized
    straight into the GEMM's B tiles and multiplied, all on the AMX library's pool (its
    codes from the u4 library's quantizer woke that library's pool too, and a torch zero
    fill woke torch's: three pools on the same cores)."""
    u = prepared.amx
    out = torch.empty(m, prepared.n, dtype=torch.float32)
    rc = _c_lib(prepared.engine).linear(
        x.data_ptr(), int(x.dtype == torch.bfloat16), m, prepared.k, x.stride(0),
        prepared.group_size, u["gp"], u["bp"].data_ptr(), u["zs"].data_ptr(), u["sc"].data_ptr(),
        out.data_ptr(), out.stride(0), prepared.n, torch.get_num_threads())
    if rc > 1:  # 2-4: a layout this module prepared wrongly, or no unpack buffer
        raise KernelUnavailableError(f"{prepared.engine.value} W4A8 kernel failed with code {rc}")
    _raise_bad_row(rc)
    return out


def _u4_gemm(a: torch.Tensor, asum: torch.Tensor, x_scale: torch.Tensor,
             prepared: W4A8Prepared) -> torch.Tensor:
    """w4a8_u4.c on group-padded int8 codes [M, G * gp], their group sums and scales [M]."""
    m = a.shape[0]
    out = torch.empty(m, prepared.n, dtype=torch.float32)
    _c_lib(prepared.engine).gemm(prepared.u4["weight_ptr"], a.data_ptr(), a.stride(0), m,
                                 asum.data_ptr(), x_scale.data_ptr(), out.data_ptr(), prepared.n,
                                 torch.get_num_threads())
    return out


def _u4_linear(x: torch.Tensor, m: int, prepared: W4A8Prepared) -> torch.Tensor:
    """w4a8_u4.c's one call: x float32 or bfloat16 [m, K] (unit column stride) quantized and
    multiplied in C; only the output is allocated here."""
    u = prepared.u4
    out = torch.empty(m, prepared.n, dtype=torch.float32)
    rc = u["linear"](u["weight_ptr"], x.data_ptr(), x.dtype is torch.bfloat16, m, x.stride(0),
                     out.data_ptr(), prepared.n, torch.get_num_threads())
    if rc:
        _raise_bad_row(rc)
    return out


def _avx2_gemm(lib, a_u8: torch.Tensor, x_scale: torch.Tensor, prepared: W4A8Prepared) -> torch.Tensor:
    """The C kernel on uint8 codes [M, K padded to 4] (code + 128) and float32 scales [M]."""
    a = prepared.avx2
    m = a_u8.shape[0]
    out = torch.empty(m, prepared.n, dtype=torch.float32)
    rc = lib.w4a8_gemm_u8s8(
        a_u8.data_ptr(), a_u8.stride(0), m, a["k4"], a["bp"].data_ptr(), a["comp"].data_ptr(),
        a["sc"].data_ptr(), prepared.n_groups, a["g4"], a["ch"], x_scale.data_ptr(),
        out.data_ptr(), out.stride(0), prepared.n, torch.get_num_threads())
    if rc != 0:
        raise KernelUnavailableError(f"AVX2 W4A8 kernel failed with code {rc}")
    return out


def _grouped(x_qf, x_q, x_scale: torch.Tensor, prepared: W4A8Prepared) -> torch.Tensor:
    s = prepared.scales
    scaled = prepared.engine is Int8Engine.FBGEMM
    for j in range(prepared.n_groups):
        part = _group_sums(x_qf, x_q, prepared, j)
        if not scaled:
            part = part.mul_(s[:, j])
        out = part if j == 0 else out.add_(part)
    return out.mul_(x_scale.unsqueeze(1))


@lru_cache(maxsize=None)  # a library loads once per process (or never): ask once
def _quantizer():
    """The C per-token quantizer (w4a8_u4.c, either build), or None where neither loads."""
    for variant in (Int8Engine.U4_VNNI512.value, Int8Engine.U4_AVX2.value):
        if not _native_lib.why_unavailable(variant):
            return _native_lib.load(variant)
    return None


def _c_codes(x: torch.Tensor, g: int, gp: int, rows: int):
    """x quantized in one C pass per row: int8 codes [rows, G * gp] (group j's codes at
    j * gp, pads and rows beyond M zero) and scales float32 [M], without the group sums
    (none of these engines corrects for zero points). None where the C quantizer does
    not load."""
    lib = _quantizer()
    if lib is None:
        return None
    m, k = x.shape
    groups = k // g
    padded = gp != g or rows != m
    a = (torch.zeros if padded else torch.empty)(rows, groups * gp, dtype=torch.int8)
    x_scale = torch.empty(m, dtype=torch.float32)
    rc = lib.quantize(x.data_ptr(), int(x.dtype == torch.bfloat16), m, k, x.stride(0), g, gp,
                      a.data_ptr(), a.stride(0), None, x_scale.data_ptr())
    _raise_bad_row(rc)
    return a, x_scale


def _fused_quantize(x: torch.Tensor, prepared: W4A8Prepared) -> torch.Tensor | None:
    """Quantize in one C pass per row (same bits as quantize_per_token_int8) into the
    engine's activation layout and run the GEMM; None where the C quantizer or the input
    layout does not allow it."""
    m, k = x.shape
    if m == 0 or x.dtype not in (torch.float32, torch.bfloat16) or x.stride(1) != 1:
        return None
    if prepared.u4:  # first: decode's path, where every step before the C call shows
        return _u4_linear(x, m, prepared)
    g = prepared.group_size
    if prepared.amx:
        return _amx_linear(x, m, prepared)
    if prepared.engine is Int8Engine.AVX2_U8S8:
        # per-channel K padded to the kernel's step of 4 with code 0 (u8 128)
        got = _c_codes(x, g, prepared.avx2["g4"] * 4, m)
        lib = _native_lib.load()
        if got is None or lib is None:
            return None
        return _avx2_gemm(lib, got[0].view(torch.uint8) ^ 128, got[1], prepared)
    if prepared.engine is Int8Engine.FBGEMM:
        got = _c_codes(x, k, k, m)
        return None if got is None else _grouped(got[0].to(torch.float32), None, got[1], prepared)
    return None


def _raise_bad_row(rc: int) -> None:
    if rc > 0:  # memory_guard names the sizes
        raise MemoryError("the C quantizer found no memory for its codes or a bfloat16 row's "
                          "float32 copy")
    if rc < 0:
        raise KernelInputError(f"x holds Inf or NaN in rows [{-rc - 1}] (the first one); dynamic "
                               "int8 quantization needs finite activations")


def w4a8_native(x: torch.Tensor, prepared: W4A8Prepared) -> torch.Tensor:
    """W4A8 GEMM: x [M, K] (float32, bfloat16 or float16) -> float32 [M, N].

    Activations are quantized per token with vLLM's semantics; Inf or NaN in x raise
    KernelInputError; M = 0 gives an empty [0, N] result.
    """
    if not isinstance(prepared, W4A8Prepared):
        raise KernelInputError("prepared must come from prepare_w4a8")
    check_activations(x, prepared.k)
    m = x.shape[0]
    prepared = prepared.for_m(m)
    try:
        return _native_call(x, prepared)
    except (MemoryError, RuntimeError) as exc:
        # the guard's message is built only on failure: a decode call is ~0.2 ms, and
        # formatting it every call, after the weight stream emptied the caches, cost ~0.01
        # codes (up to 4 bytes each), a float32 copy of x and the float32 output
        with memory_guard(f"running W4A8 on x {tuple(x.shape)} x a {prepared.n} x {prepared.k} layer",
                          8 * m * prepared.k + 4 * m * prepared.n):
            raise exc


def _native_call(x: torch.Tensor, prepared: W4A8Prepared) -> torch.Tensor:
    fused = _fused_quantize(x, prepared)
    if fused is not None:
        return fused
    if prepared.engine in (Int8Engine.FBGEMM, Int8Engine.FP32_EXACT) and x.shape[0]:
        # these engines take float codes: skip the int8 round trip
        codes, x_scale = quantize_per_token_int8_codes(x)
        return _grouped(codes, None, x_scale.reshape(-1).contiguous(), prepared)
    x_q, x_scale = quantize_per_token_int8(x)
    return w4a8_native_from_quantized(x_q, x_scale, prepared)


# Tie-break order: where two engines time within _TIE of each other, the one listed first
# wins (the wider ISA, then fewer weight bytes): a loaded machine then cannot flip the choice.
_PREFERENCE = (Int8Engine.U4_AMX, Int8Engine.U4_VNNI512, Int8Engine.U4_AVX2, Int8Engine.AVX2_U8S8, Int8Engine.FBGEMM,
               Int8Engine.INT_MM, Int8Engine.FP32_EXACT)
_TIE = 1.15


@lru_cache(maxsize=None)
def rank_engines(grouped: bool, m: int = 64) -> tuple[tuple[str, float], ...]:
    """Available engines, fastest first, timed once per process on an m-token W4A8 problem.

    The timing is the whole native call (N = K = 1024, group 128 when
    `grouped`), five interleaved rounds on one thread, each engine's minimum CPU time;
    engines within 15% of the fastest are ordered by `_PREFERENCE`. `_int_mm` is timed only where AVX512-VNNI or
    AMX give it oneDNN's int8 kernels (elsewhere it is orders of magnitude slower and
    ranked last untimed).
    """
    gen = torch.Generator().manual_seed(0)
    n = k = 1024
    w = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    g = 128 if grouped else -1
    scales = torch.rand(n, k // (g if grouped else k), generator=gen) + 0.5
    x = torch.randn(m, k, generator=gen)
    fast_int_mm = bool(getattr(torch.cpu, "_is_vnni_supported", lambda: False)()
                       or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
    candidates = {}
    untimed = []
    for engine in _PREFERENCE:
        if engine is Int8Engine.INT_MM and not fast_int_mm:
            untimed.append((engine.value, float("inf")))
            continue
        if engine_available(engine)[0]:
            candidates[engine.value] = prepare_w4a8(w, scales, g, engine=engine)
            w4a8_native(x, candidates[engine.value])  # warm-up: library load, first allocations
    best = {name: float("inf") for name in candidates}
    # Interleaved rounds on one thread, each engine's minimum of the thread's CPU time:
    # time other processes held the core is left out (a loaded machine does not flip the
    # choice the way wall time did), and no OpenMP worker spinning in a barrier is counted.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(5):
            for name, prepared in candidates.items():
                t0 = time.thread_time()
                w4a8_native(x, prepared)
                best[name] = min(best[name], time.thread_time() - t0)
    finally:
        torch.set_num_threads(threads)
    fastest = min(best.values())
    order = [e.value for e in _PREFERENCE]
    ranked = sorted(best.items(), key=lambda item: (0, order.index(item[0]))
                    if item[1] <= fastest * _TIE else (1, item[1]))
    return tuple(ranked) + tuple(untimed)
