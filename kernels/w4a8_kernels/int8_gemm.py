"""Exact int8 x int4 GEMM engines: integer dot products, whichever way this CPU does them best.

Every engine returns, for one weight block, the exact integer sums of int8 activation
codes times int4 weights (as float32 values, exact below 2**24 like an int32 -> float32
epilogue, or int32). They differ only in speed, which depends on the CPU:

- `avx2_u8s8`: our C kernel (kernels/w4a8_kernels/csrc/w4a8_avx2.c), vpmaddubsw + vpmaddwd with
  int32 accumulation per group and the group scales folded in registers.
- `u4_avx2`, `u4_vnni512`: our C kernel on packed int4 weights (kernels/w4a8_kernels/csrc/w4a8_u4.c,
  half the weight bytes: decode streams 4 bits a weight), unsigned nibbles times int8
  codes with the zero point removed through the activations' group sums; built for
  AVX2 (vpmaddubsw) or AVX-512 VNNI (vpdpbusd) where the CPU has it. Any group size.
- `u4_amx`: the same arithmetic on AMX-INT8 tiles (kernels/w4a8_kernels/csrc/w4a8_amx.c), where the CPU
  has AMX and the kernel grants the process its tile state.
- `fbgemm`: torch's quantized linear (FBGEMM's u8 x s8 kernels, AVX2/AVX-512) run with
  unit scales and zero point 128, so its float output is the exact integer sum.
- `int_mm`: `torch._int_mm` (oneDNN; fast only with AVX512-VNNI or AMX, otherwise a
  plain loop in this torch build).
- `fp32_exact`: float32 BLAS on integer-valued operands: exact while every partial
  sum stays below 2**24 (K is chunked to keep it so).
"""
from __future__ import annotations

import warnings
from enum import Enum

import torch

from w4a8_kernels import _native_lib
from w4a8_kernels.errors import KernelInputError

__all__ = ["Int8Engine", "engine_available", "fbgemm_pack", "check_accumulator_range", "C_ENGINES",
           "FP32_EXACT_MAX_TERMS", "INT32_MAX", "int_mm"]


class Int8Engine(str, Enum):
    """How the integer part of a W4A8 GEMM is computed on the CPU."""

    AVX2_U8S8 = "avx2_u8s8"
    """Our C kernel: u8 x s8 via vpmaddubsw, int32 per group, scales folded in registers."""
    U4_AVX2 = "u4_avx2"
    """Our C kernel on packed int4 (w4a8_u4.c), AVX2 vpmaddubsw."""
    U4_VNNI512 = "u4_vnni512"
    """Our C kernel on packed int4 (w4a8_u4.c), AVX-512 VNNI vpdpbusd."""
    U4_AMX = "u4_amx"
    """Our C kernel on packed int4 (w4a8_amx.c), AMX-INT8 tdpbssd tiles."""
    FBGEMM = "fbgemm"
    """FBGEMM u8 x s8 through torch.ops.quantized with unit scales (exact float output)."""
    INT_MM = "int_mm"
    """torch._int_mm, int8 x int8 -> int32 (oneDNN with VNNI/AMX, else a slow loop)."""
    FP32_EXACT = "fp32_exact"
    """float32 GEMM on integer values; exact while partial sums stay below 2**24."""


# |x_q| <= 127 and |w - z| <= 15: any sum of up to this many products stays below
# 2**24, so float32 accumulation of them is exact whatever order BLAS uses.
FP32_EXACT_MAX_TERMS = (1 << 24) // (127 * 15)
INT32_MAX = (1 << 31) - 1
# Largest activation operand each engine multiplies: the u8 engines add 128 to the int8
# code (|code| <= 127), so they see up to 255; the others the code itself.
_ACT_MAX = {"avx2_u8s8": 255, "fbgemm": 255, "int_mm": 127, "u4_avx2": 127, "u4_vnni512": 127,
            "u4_amx": 127}
# The packed-int4 engines multiply the unsigned nibble (AMX: the nibble less its zero point),
# at most 15 in magnitude whatever the weight's sign.
_W_MAX = {"u4_avx2": 15, "u4_vnni512": 15, "u4_amx": 15}
C_ENGINES = ("avx2_u8s8", "u4_avx2", "u4_vnni512", "u4_amx")  # engine value = _native_lib variant


def _fbgemm_available() -> tuple[bool, str]:
    engines = torch.backends.quantized.supported_engines
    if "fbgemm" not in engines and "x86" not in engines:
        return False, f"this torch build has no FBGEMM quantized engine (has {engines})"
    if not hasattr(torch.ops.quantized, "linear_with_input_q_dq_qweight_dq_output_fp32"):
        return False, "torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32 is missing"
    return True, ""


def engine_available(engine: Int8Engine | str) -> tuple[bool, str]:
    """(ok, why): whether this engine can run here, and why not."""
    engine = Int8Engine(engine)
    if engine.value in C_ENGINES:
        why = _native_lib.why_unavailable(engine.value)
        return (not why), why
    if engine is Int8Engine.FBGEMM:
        return _fbgemm_available()
    if engine is Int8Engine.INT_MM:
        if not hasattr(torch, "_int_mm"):
            return False, f"torch {torch.__version__} has no torch._int_mm"
        return True, ""
    return True, ""


def check_accumulator_range(engine: Int8Engine | str, terms: int, w_absmax: int) -> None:
    """Refuse a layer whose int32 dot could overflow in `engine`.

    One int32 sum runs over `terms` products (the group length; K when per-channel) of
    an activation operand up to the engine's maximum and a weight up to `w_absmax`
    (8 for signed int4, 15 for w - zero). `fp32_exact` has no limit: it sums exact
    float32 chunks in float64.
    """
    engine = Int8Engine(engine)
    a_max = _ACT_MAX.get(engine.value)
    w_absmax = _W_MAX.get(engine.value, w_absmax)
    if a_max is None or w_absmax == 0:
        return
    limit = INT32_MAX // (a_max * w_absmax)
    if terms > limit:
        raise KernelInputError(
            f"int8 engine {engine.value}: a group of {terms} terms of |a| <= {a_max} times "
            f"|w| <= {w_absmax} can reach {terms * a_max * w_absmax:,}, beyond int32's "
            f"{INT32_MAX:,}; this engine takes groups of at most {limit:,} terms for this "
            f"weight (engine fp32_exact has no such limit)")


def fbgemm_pack(block: torch.Tensor, scales: torch.Tensor | None = None):
    """FBGEMM-packed int8 block [N, K]; with `scales` [N] float32 its output is acc * scale[n]
    (one float32 product, as in our own epilogue), else the plain integer sums."""
    with warnings.catch_warnings():
        # torch marks quantized-tensor creation deprecated; FBGEMM's prepack still needs it.
        warnings.simplefilter("ignore", UserWarning)
        if scales is None:
            qw = torch._make_per_tensor_quantized_tensor(block.contiguous(), 1.0, 0)
        else:
            qw = torch._make_per_channel_quantized_tensor(
                block.contiguous(), scales.to(torch.float64).contiguous(),
                torch.zeros(block.shape[0], dtype=torch.int64), 0)
    prev = torch.backends.quantized.engine
    try:
        if "fbgemm" in torch.backends.quantized.supported_engines:
            torch.backends.quantized.engine = "fbgemm"
        return torch.ops.quantized.linear_prepack(qw, None)
    finally:
        torch.backends.quantized.engine = prev


# torch._int_mm's documented envelope (its CUDA checks) is K >= 16 and a multiple of 8; on CPU
# its oneDNN route (VNNI/AMX hosts) returned unset memory at K = 1. Zero columns add nothing
# to a dot product, so shorter or ragged K is padded up to the envelope: exact, and normal
# shapes (K a multiple of 8, >= 16) are passed through untouched.
INT_MM_MIN_K = 16
INT_MM_K_MULTIPLE = 8


def int_mm(a: torch.Tensor, w_rows: torch.Tensor) -> torch.Tensor:
    """Exact int32 a [M, K] @ w_rows [N, K]^T through torch._int_mm, K padded to its envelope."""
    k = a.shape[1]
    kp = max(INT_MM_MIN_K, -(-k // INT_MM_K_MULTIPLE) * INT_MM_K_MULTIPLE)
    if kp != k:
        a = torch.nn.functional.pad(a, (0, kp - k))
        w_rows = torch.nn.functional.pad(w_rows, (0, kp - k))
    return torch._int_mm(a.contiguous(), w_rows.contiguous().t())
