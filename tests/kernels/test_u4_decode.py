"""The packed-int4 C engines' one-call path (w4a8_u4.c's w4a8_u4_linear: quantize and GEMM
in one C call) and their symmetric-weight epilogue: the float64 reference on awkward
shapes, the same bits as quantizing first and calling the GEMM on the codes, and bad rows
named as before. Both builds run where the CPU has their flags (u4_avx2 on any AVX2 host)."""
from __future__ import annotations

import pytest
import torch

from w4a8_kernels import _native_lib
from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native, w4a8_native_from_quantized
from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.quant import quantize_per_token_int8
from w4a8_kernels.reference import w4a8_reference

ENGINES = [e for e in ("u4_avx2", "u4_vnni512") if not _native_lib.why_unavailable(e)]
pytestmark = pytest.mark.skipif(not ENGINES, reason="no packed-int4 C engine builds on this CPU")

# (K, group): per-channel K = 200 ends in a partial vector of every build (8 of 16 / 32
# columns); g = 32 and 128 with a ragged N tile (N = 45)
SHAPES = [(200, -1), (224, 32), (384, 128)]


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def _weights(layer_factory, k, g):
    """Symmetric, asymmetric, and asymmetric with every zero point 8 (the symmetric epilogue)."""
    w_q, scales, _ = layer_factory(45, k, g, seed=k)
    aw_q, ascales, zeros = layer_factory(45, k, g, asym=True, seed=k + 1)
    eights = torch.full_like(zeros, 8)
    return {"symmetric": (w_q, scales, None), "asymmetric": (aw_q, ascales, zeros),
            "zero_points_8": (aw_q, ascales, eights)}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("k, g", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_call_matches_reference_and_codes_path(layer_factory, x_factory, engine, k, g, dtype):
    for kind, (w_q, scales, zeros) in _weights(layer_factory, k, g).items():
        prepared = prepare_w4a8(w_q, scales, g, zeros, engine=engine)
        assert prepared.u4["weight"].symmetric == (kind != "asymmetric"), kind
        for m in (1, 2, 5):
            x = x_factory(m, k, seed=m, dtype=dtype)
            out = w4a8_native(x, prepared)
            assert out.shape == (m, 45)
            assert rel(out, w4a8_reference(x, w_q, scales, g, zeros)) <= 1e-6, (kind, m)
            # the torch quantizer's codes through the GEMM entry: the same bits
            x_q, x_scale = quantize_per_token_int8(x)
            assert torch.equal(out, w4a8_native_from_quantized(x_q, x_scale, prepared)), (kind, m)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("k, g", SHAPES)
def test_row_tiles_of_every_height_keep_each_rows_bits(layer_factory, x_factory, engine, k, g):
    # M = 9..16 ends the AVX2 build's 8-row tiles at every height 1..8 (up to 8 rows it
    # takes 4-row tiles), the AVX-512 build's 6-row ones at several; a row's result depends
    # on its own codes only, so every row of a batch has the bits of that row alone
    for kind, (w_q, scales, zeros) in _weights(layer_factory, k, g).items():
        prepared = prepare_w4a8(w_q, scales, g, zeros, engine=engine)
        x = x_factory(16, k, seed=k)
        alone = torch.cat([w4a8_native(x[i:i + 1], prepared) for i in range(16)])
        assert rel(alone, w4a8_reference(x, w_q, scales, g, zeros)) <= 1e-6, kind
        for m in range(9, 17):
            assert torch.equal(w4a8_native(x[:m], prepared), alone[:m]), (kind, m)


@pytest.mark.parametrize("engine", ENGINES)
def test_symmetric_epilogue_is_bit_exact_with_zero_points(layer_factory, x_factory, engine):
    # w in [-8, 7] without zero points and w + 8 with every zero point 8 are one weight:
    # the constant correction and the zero-point stream give the same bits
    w_q, scales, _ = layer_factory(70, 256, 64, seed=9)
    x = x_factory(3, 256, seed=2)
    sym = w4a8_native(x, prepare_w4a8(w_q, scales, 64, engine=engine))
    asym = w4a8_native(x, prepare_w4a8(w_q + 8, scales, 64, torch.full((70, 4), 8, dtype=torch.int8),
                                       engine=engine))
    assert torch.equal(sym, asym)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_call_names_the_first_bad_row(layer_factory, x_factory, engine, dtype):
    w_q, scales, _ = layer_factory(45, 384, 128)
    prepared = prepare_w4a8(w_q, scales, 128, engine=engine)
    for m, bad, value in ((1, 0, float("inf")), (5, 3, float("nan")), (5, 1, float("-inf"))):
        x = x_factory(m, 384, dtype=dtype)
        x[bad, 200] = value
        if bad + 1 < m:
            x[bad + 1, 5] = float("nan")  # a later bad row: the first is the one named
        with pytest.raises(KernelInputError, match=rf"rows \[{bad}\]"):
            w4a8_native(x, prepared)
