"""Exact int8 x int4 GEMM engines: integer dot products, whichever way this CPU does them best.

Every engine returns, for one weight block, the exact integer sums of int8 activation
codes times int4 weights (as float32 values, exact below 2**24 like an int32 -> float32
epilogue, or int32). They differ only in speed, which depends on the CPU:

- `avx2_u8s8`: our C kernel (kernels/csrc/w4a8_avx2.c), vpmaddubsw + vpmaddwd with
  int32 accumulation per group and the group scales folded in registers.
- `fbgemm`: torch's quantized linear (FBGEMM's u8 x s8 kernels, AVX2/AVX-512) run with
  unit scales and zero point 128, so its float output is the exact integer sum.
- `int_mm`: `torch._int_mm` (oneDNN; fast only with AVX512-VNNI or AMX, otherwise a
  plain loop in this torch build).
- `fp32_exact`: float32 BLAS on integer-valued operands: exact while every partial
  sum stays below 2**24 (K is chunked to keep it so).
"""
from __future__ import annotations

import time
from enum import Enum
from functools import lru_cache

import torch

from w4a8_kernels import _native_lib

__all__ = ["Int8Engine", "engine_available", "rank_engines", "FP32_EXACT_MAX_TERMS"]


class Int8Engine(str, Enum):
    """How the integer part of a W4A8 GEMM is computed on the CPU."""

    AVX2_U8S8 = "avx2_u8s8"
    """Our C kernel: u8 x s8 via vpmaddubsw, int32 per group, scales folded in registers."""
    FBGEMM = "fbgemm"
    """FBGEMM u8 x s8 through torch.ops.quantized with unit scales (exact float output)."""
    INT_MM = "int_mm"
    """torch._int_mm, int8 x int8 -> int32 (oneDNN with VNNI/AMX, else a slow loop)."""
    FP32_EXACT = "fp32_exact"
    """float32 GEMM on integer values; exact while partial sums stay below 2**24."""


# |x_q| <= 127 and |w - z| <= 15: any sum of up to this many products stays below
# 2**24, so float32 accumulation of them is exact whatever order BLAS uses.
FP32_EXACT_MAX_TERMS = (1 << 24) // (127 * 15)


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
    if engine is Int8Engine.AVX2_U8S8:
        why = _native_lib.why_unavailable()
        return (not why), why
    if engine is Int8Engine.FBGEMM:
        return _fbgemm_available()
    if engine is Int8Engine.INT_MM:
        if not hasattr(torch, "_int_mm"):
            return False, f"torch {torch.__version__} has no torch._int_mm"
        return True, ""
    return True, ""


@lru_cache(maxsize=None)
def rank_engines(grouped: bool) -> tuple[tuple[str, float], ...]:
    """Available engines, fastest first, timed once per process on a mid-size W4A8 problem.

    The timing is the whole native call (M = 64, N = K = 1024, group 128 when
    `grouped`), so the choice follows the CPU: `_int_mm` is timed only where AVX512-VNNI
    or AMX give it oneDNN's int8 kernels (elsewhere it is orders of magnitude slower and
    ranked last untimed); FBGEMM or the AVX2 kernel win on AVX2-only hosts.
    """
    from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native  # local: avoids a cycle

    gen = torch.Generator().manual_seed(0)
    n, k, m = 1024, 1024, 64
    w = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    g = 128 if grouped else -1
    scales = torch.rand(n, k // (g if grouped else k), generator=gen) + 0.5
    x = torch.randn(m, k, generator=gen)
    fast_int_mm = bool(getattr(torch.cpu, "_is_vnni_supported", lambda: False)()
                       or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
    candidates = {}
    untimed = []
    for engine in Int8Engine:
        if engine is Int8Engine.INT_MM and not fast_int_mm:
            untimed.append((engine.value, float("inf")))
            continue
        if engine_available(engine)[0]:
            candidates[engine.value] = prepare_w4a8(w, scales, g, engine=engine)
            w4a8_native(x, candidates[engine.value])  # warm-up: library load, first allocations
    best = {name: float("inf") for name in candidates}
    # Interleaved rounds and the minimum: robust to other processes taking the CPU.
    for _ in range(3):
        for name, prepared in candidates.items():
            t0 = time.perf_counter()
            w4a8_native(x, prepared)
            best[name] = min(best[name], time.perf_counter() - t0)
    return tuple(sorted(best.items(), key=lambda item: item[1])) + tuple(untimed)
