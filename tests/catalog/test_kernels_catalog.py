"""Bad input to the kernels' Python API: each row a named error, or the correct result."""
from __future__ import annotations

import re

import pytest
import torch

from w4a8_kernels.cpu_dense import dense, prepare_dense
from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native, w4a8_native_from_quantized
from w4a8_kernels.cpu_w4a16 import (fallback_choice, prepare_w4a16, w4a16_dequant, w4a16_dequant_bf16,
                                    w4a16_fallback, w4a16_tinygemm)
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError
from w4a8_kernels.int8_gemm import Int8Engine, engine_available
from w4a8_kernels.quant import quantize_per_token_int8
from w4a8_kernels.reference import w4a8_reference, w4a16_reference

SURFACE = "kernels"

_GEN = torch.Generator().manual_seed(7)
W = torch.randint(-8, 8, (16, 64), generator=_GEN, dtype=torch.int8)
S = torch.rand(16, 1, generator=_GEN) + 0.1
X = torch.randn(3, 64, generator=_GEN)


def _raises(exc, pattern, fn):
    def run():
        with pytest.raises(exc, match=pattern):
            fn()
    return run


def _close(out, ref, rtol=1e-6):
    assert out.shape == ref.shape, (out.shape, ref.shape)
    err = ((out.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()
    assert err <= rtol, err


def _w4a8(x, w=W, s=S, g=-1, zeros=None, engine="auto"):
    return w4a8_native(x, prepare_w4a8(w, s, g, zeros, engine=engine))


def _odd_k_every_engine():
    w, s, x = W[:, :61], S, X[:, :61]
    for e in Int8Engine:
        if engine_available(e)[0]:
            _close(_w4a8(x, w, s, engine=e), w4a8_reference(x, w, s, -1))


def _negative_scales_noted():
    p = prepare_w4a8(W, -S, -1)
    assert any("negative" in n for n in p.notes), p.notes
    _close(w4a8_native(X, p), w4a8_reference(X, W, -S, -1))
    assert any("negative" in n for n in prepare_w4a16(W, -S, -1).notes)


def _strided_x():
    x = torch.randn(64, 5, generator=_GEN).t()  # column-major view
    _close(_w4a8(x), w4a8_reference(x, W, S, -1))
    x2 = torch.randn(3, 128, generator=_GEN)[:, ::2]  # every other column
    _close(_w4a8(x2), w4a8_reference(x2, W, S, -1))
    x3 = torch.randn(1, 64, generator=_GEN).expand(4, 64)  # stride 0 rows
    _close(_w4a8(x3), w4a8_reference(x3, W, S, -1))


def _empty_m():
    out = _w4a8(torch.empty(0, 64))
    assert out.shape == (0, 16) and out.dtype == torch.float32
    assert w4a16_fallback(torch.empty(0, 64), prepare_w4a16(W, S, -1)).shape == (0, 16)


def _all_zero_rows():
    x = torch.zeros(2, 64)
    assert torch.equal(_w4a8(x), torch.zeros(2, 16))


def _tinygemm_refuses_n():
    p = prepare_w4a16(W[:15], S[:15], -1)
    with pytest.raises(KernelUnavailableError, match=re.escape("N % 16 == 0, got N = 15")):
        w4a16_tinygemm(X, p)
    out = w4a16_fallback(X, p)
    # the faster dequantize path serves: float32, or bf16 where bf16 is native (its inputs round
    # to bf16); which one is timed per machine (this Xeon and an AMX host have each picked bf16)
    run, rtol = {"dequant": (w4a16_dequant, 1e-6), "dequant_bf16": (w4a16_dequant_bf16, 1e-2)}[fallback_choice(p, 3)]
    assert torch.equal(out, run(X, p))
    _close(out, w4a16_reference(X, W[:15], S[:15], -1), rtol)


def _huge_k_int32():
    w = torch.full((8, 1_100_000), -8, dtype=torch.int8)
    prepare_w4a8(w, torch.ones(8, 1), -1, engine="avx2_u8s8")


def _x_scale_range(value, dtype, pattern):
    x_q = quantize_per_token_int8(X)[0]
    scale = torch.full((3, 1), value, dtype=dtype)
    return _raises(KernelInputError, pattern,
                   lambda: w4a8_native_from_quantized(x_q, scale, prepare_w4a8(W, S, -1)))


def _avx2_ok():
    return engine_available(Int8Engine.AVX2_U8S8)[0]


def _w4a16_fallback_at_k_2_22():
    # every term of one sign, x exact in bf16: one float32 accumulator over K drifted 1.5e-2
    k, g = 2 ** 22, 128
    w = torch.full((16, k), 7, dtype=torch.int8)
    s = torch.full((16, k // g), 0.01).to(torch.bfloat16)
    x = torch.ones(1, k)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 1024 small block ops: a loaded pool's barriers cost seconds each
    try:
        p = prepare_w4a16(w, s, g)
        ref = w4a16_reference(x, w, s, g)
        _close(w4a16_dequant(x, p), ref, 1e-5)
        _close(w4a16_fallback(x, p), ref, 2.0 ** -8)
    finally:
        torch.set_num_threads(threads)


def _c_engines_finish_beside_a_stalled_worker():
    import time

    from w4a8_kernels import _native_lib
    from w4a8_kernels.int8_gemm import C_ENGINES

    w = torch.randint(-8, 8, (512, 1024), generator=_GEN, dtype=torch.int8)
    s, x = torch.rand(512, 8, generator=_GEN) + 0.1, torch.randn(9, 1024, generator=_GEN)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    try:
        for engine in C_ENGINES:
            if not engine_available(Int8Engine(engine))[0]:
                continue
            lib, p = _native_lib.load(engine), prepare_w4a8(w, s, 128, engine=engine)
            quiet = w4a8_native(x, p)
            lib.sched_test_stall(2_000_000)
            try:
                t0 = time.perf_counter()
                stalled = w4a8_native(x, p)
                took = time.perf_counter() - t0
            finally:
                lib.sched_test_stall(0)
            assert torch.equal(quiet, stalled) and took < 0.5, (engine, took)
    finally:
        torch.set_num_threads(threads)



def _int_mm_short_k_exact():
    seen = []
    real = torch._int_mm
    try:
        torch._int_mm = lambda a, b: seen.append(a.shape[1]) or real(a, b)
        for k, g in ((1, -1), (7, -1), (9, 1)):
            w, x = W[:, :k], X[:, :k]
            s = S if g == -1 else S.expand(16, k).contiguous()
            _close(_w4a8(x, w, s, g, engine="int_mm"), w4a8_reference(x, w, s, g))
    finally:
        torch._int_mm = real
    assert seen and all(kk >= 16 and kk % 8 == 0 for kk in seen), seen

CATALOG = [
    ("x on the meta device (W4A8 native)",
     "KernelInputError: x is on the meta device, the kernels need real values",
     _raises(KernelInputError, "meta device", lambda: _w4a8(torch.empty(3, 64, device="meta")))),
    ("w_q on the meta device",
     "KernelInputError: w_q is on the meta device",
     _raises(KernelInputError, "w_q is on the meta device",
             lambda: prepare_w4a8(torch.empty(16, 64, dtype=torch.int8, device="meta"), S, -1))),
    ("x_q on the meta device (pre-quantized entry)",
     "KernelInputError: x_q is on the meta device",
     _raises(KernelInputError, "x_q is on the meta device", lambda: w4a8_native_from_quantized(
         torch.empty(3, 64, dtype=torch.int8, device="meta"), torch.ones(3, 1),
         prepare_w4a8(W, S, -1)))),
    ("float64 x holding 1e300",
     "KernelInputError: values up to 1e+300, outside float32's finite range (not 'Inf or NaN')",
     _raises(KernelInputError, r"1e\+300.*outside float32's finite range",
             lambda: _w4a8(torch.full((2, 64), 1e300, dtype=torch.float64)))),
    ("float64 x holding 1e300 (W4A16 fallback)",
     "KernelInputError: outside float32's finite range",
     _raises(KernelInputError, "outside float32's finite range", lambda: w4a16_fallback(
         torch.full((2, 64), 1e300, dtype=torch.float64), prepare_w4a16(W, S, -1)))),
    ("x holding Inf in row 1",
     "KernelInputError: holds Inf or NaN in rows [1]",
     _raises(KernelInputError, r"Inf or NaN in rows \[1\]",
             lambda: _w4a8(torch.stack([X[0], X[1] / 0.0, X[2]])))),
    ("x holding NaN (W4A16 dequant)",
     "KernelInputError: x holds Inf or NaN",
     _raises(KernelInputError, "Inf or NaN",
             lambda: w4a16_dequant(X * float("nan"), prepare_w4a16(W, S, -1)))),
    ("per-channel K = 61 (K % 4 != 0), every int8 engine forced",
     "ok: each engine equals the float64 W4A8 reference (rel <= 1e-6)", _odd_k_every_engine),
    ("per-channel K = 1.1M at the extremes, avx2_u8s8 forced",
     "KernelInputError: int32 accumulator limit, at most 1,052,688 terms",
     (_raises(KernelInputError, "at most 1,052,688 terms", _huge_k_int32) if _avx2_ok()
      else lambda: pytest.skip("the C engine does not load here"))),
    ("negative weight scales",
     "ok: accepted, equals the reference, and prepared.notes says 16 scales are negative",
     _negative_scales_noted),
    ("x column-major, every other column, stride-0 rows",
     "ok: equals the reference (rel <= 1e-6)", _strided_x),
    ("M = 0 activations",
     "ok: an empty float32 [0, N] result", _empty_m),
    ("all-zero activation rows",
     "ok: exact zeros (vLLM's amax floor 1e-10, no NaN)", _all_zero_rows),
    ("w_q of shape (16, 0)",
     "KernelInputError: w_q has an empty dimension, N and K must be >= 1",
     _raises(KernelInputError, "empty dimension",
             lambda: prepare_w4a8(torch.empty(16, 0, dtype=torch.int8), torch.ones(16, 1), -1))),
    ("w_q of shape (0, 64)",
     "KernelInputError: w_q has an empty dimension",
     _raises(KernelInputError, "empty dimension",
             lambda: prepare_w4a16(torch.empty(0, 64, dtype=torch.int8), torch.ones(0, 1), -1))),
    ("w_q values 2 * int4 (outside [-8, 7])",
     "KernelInputError: w_q holds values in [-16, 14], outside int4 signed [-8, 7]",
     _raises(KernelInputError, r"outside int4 signed \[-8, 7\]", lambda: prepare_w4a8(W * 2, S, -1))),
    ("zeros = 16",
     "KernelInputError: zeros holds values in [16, 16]; accepted [0, 15]",
     _raises(KernelInputError, r"accepted \[0, 15\]", lambda: prepare_w4a8(
         W + 8, S, -1, torch.full((16, 1), 16, dtype=torch.int8)))),
    ("scales holding NaN",
     "KernelInputError: scales holds Inf or NaN",
     _raises(KernelInputError, "scales holds Inf or NaN", lambda: prepare_w4a8(W, S * float("nan"), -1))),
    ("scales of 1e38 (finite, but the float32 output overflows to Inf)",
     "KernelInputError: scales reach ...: the float32 output overflows for activations of magnitude 1",
     _raises(KernelInputError, "the float32 output overflows",
             lambda: prepare_w4a8(W, torch.full((16, 1), 1e38), -1))),
    ("group_size '32' (a string)",
     "KernelInputError: group_size must be an int",
     _raises(KernelInputError, "group_size must be an int", lambda: prepare_w4a8(W, S, "32"))),
    ("group_size 48 with K = 64",
     "KernelInputError: group_size = 48 does not divide K = 64",
     _raises(KernelInputError, "does not divide K = 64",
             lambda: prepare_w4a8(W, torch.ones(16, 1), 48))),
    ("engine 'avx512' (unknown)",
     "KernelInputError: unknown int8 engine 'avx512'; known: auto, ...",
     _raises(KernelInputError, "unknown int8 engine 'avx512'; known: auto",
             lambda: prepare_w4a8(W, S, -1, engine="avx512"))),
    ("avx2_u8s8 forced with group size 6",
     "KernelInputError: needs a group size that is a multiple of 4",
     (_raises(KernelInputError, "multiple of 4", lambda: prepare_w4a8(
         W[:, :60], torch.ones(16, 10), 6, engine="avx2_u8s8")) if _avx2_ok()
      else lambda: pytest.skip("the C engine does not load here"))),
    ("x of dtype int32",
     "KernelInputError: x has dtype torch.int32; accepted: float32, float16, bfloat16, float64",
     _raises(KernelInputError, "accepted: float32", lambda: _w4a8(X.to(torch.int32)))),
    ("x 3-D [2, 3, 64]",
     "KernelInputError: x must be 2-D [M, K]",
     _raises(KernelInputError, r"2-D \[M, K\]", lambda: _w4a8(X.expand(2, 3, 64)))),
    ("x with K = 63 against K = 64",
     "KernelInputError: x has K = 63 columns but the weight has K = 64",
     _raises(KernelInputError, "K = 63 columns", lambda: _w4a8(X[:, :63]))),
    ("a W4A16 prepared weight handed to W4A8",
     "KernelInputError: prepared must come from prepare_w4a8",
     _raises(KernelInputError, "prepare_w4a8", lambda: w4a8_native(X, prepare_w4a16(W, S, -1)))),
    ("x_scale given as a Python list",
     "KernelInputError: x_scale must be a floating tensor",
     _raises(KernelInputError, "x_scale must be a floating tensor", lambda: w4a8_native_from_quantized(
         quantize_per_token_int8(X)[0], [1.0, 1.0, 1.0], prepare_w4a8(W, S, -1)))),
    ("an int8 weight handed to the dense baseline",
     "KernelInputError: the dense weight must be a floating [N, K] tensor",
     _raises(KernelInputError, "must be a floating", lambda: prepare_dense(W))),
    ("a W4A16 prepared weight handed to the dense baseline",
     "KernelInputError: prepared must come from prepare_dense",
     _raises(KernelInputError, "prepare_dense", lambda: dense(X, prepare_w4a16(W, S, -1)))),
    ("float64 x_scale of 1e39 (finite in float64, Inf in float32)",
     "KernelInputError: x_scale holds values up to 1e+39, outside float32's finite range",
     _x_scale_range(1e39, torch.float64, "outside float32's finite range")),
    ("x_scale of 3e38 (finite in float32, the product overflows)",
     "KernelInputError: x_scale holds values up to 3e+38: ... outputs could reach ..., beyond float32's",
     _x_scale_range(3e38, torch.float32, "beyond float32's")),
    ("N = 15 for tinygemm",
     "KernelUnavailableError: N % 16 == 0, got N = 15; the fallback runs a dequantize path and is right",
     _tinygemm_refuses_n),
    ("int_mm engine at K = 1, 7 and with a group of 1 (torch._int_mm's unset memory at K = 1)",
     "ok: matches the float64 reference; torch._int_mm only sees K >= 16, a multiple of 8 (zero-padded)",
     _int_mm_short_k_exact),
    ("W4A16 fallback at K = 2**22 with constant activations (every term one sign)",
     "ok: float32 GEMM within 1e-5 of the float64 reference, the fallback within bf16 rounding "
     "(K blocks of 4096, float32 partials)",
     _w4a16_fallback_at_k_2_22),
    ("every C engine's pool workers asleep for 2 s during a call",
     "ok: the call finishes on the caller alone in under 0.5 s, the same bits",
     _c_engines_finish_beside_a_stalled_worker),
]


@pytest.mark.parametrize("row", CATALOG, ids=[row[0] for row in CATALOG])
def test_kernels_catalog(row):
    row[2]()
