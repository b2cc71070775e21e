from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.quant import (
    dequantize_groupwise, quantize_per_token_int8, quantize_per_token_uint8_zp128,
    round_half_away_from_zero,
)


def test_round_half_away_from_zero_ties_and_non_ties():
    v = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, 2.4, -2.6, 0.0])
    expect = torch.tensor([1.0, 2.0, 3.0, -1.0, -3.0, 0.0, 2.0, -3.0, 0.0])
    assert torch.equal(round_half_away_from_zero(v), expect)


def test_per_token_int8_hand_example():
    # amax 2.54 -> scale 0.02; the code of 1.0 is round(1.0 * (127 / 2.54)) in float32.
    x = torch.tensor([[2.54, -2.54, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    x_q, s = quantize_per_token_int8(x)
    assert x_q.dtype == torch.int8 and s.dtype == torch.float32 and s.shape == (2, 1)
    assert x_q[0].tolist()[:3] == [127, -127, 0]
    inv = torch.tensor(127.0) / torch.tensor(2.54)
    assert x_q[0, 3].item() == int(round_half_away_from_zero(torch.tensor(1.0) * inv))
    # all-zero row: clamped amax gives a tiny positive scale and zero codes, never NaN
    assert x_q[1].abs().sum() == 0
    assert s[1].item() == pytest.approx(1e-10 / 127, rel=1e-6)


def test_per_token_int8_matches_float64_math_within_one_step():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(17, 300, generator=gen) * torch.logspace(-3, 3, 17).unsqueeze(1)
    x_q, s = quantize_per_token_int8(x)
    x64 = x.double()
    ref = x64 / (x64.abs().amax(1, keepdim=True) / 127)
    assert (x_q.double() - ref).abs().max() <= 0.5 + 1e-4
    assert torch.allclose(s.double().squeeze(1), x64.abs().amax(1) / 127, rtol=1e-6)
    assert int(x_q.abs().max()) == 127  # each row's max maps to +-127


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_per_token_int8_low_precision_inputs_upcast(dtype):
    x = torch.randn(5, 64).to(dtype)
    a = quantize_per_token_int8(x)
    b = quantize_per_token_int8(x.float())
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_per_token_int8_inf_and_nan_rejected_with_row():
    x = torch.zeros(4, 8)
    x[2, 3] = float("inf")
    with pytest.raises(KernelInputError, match=r"rows \[2\]"):
        quantize_per_token_int8(x)
    x[2, 3] = float("nan")
    with pytest.raises(KernelInputError, match="Inf or NaN"):
        quantize_per_token_int8(x)


def test_per_token_int8_empty_and_bad_inputs():
    x_q, s = quantize_per_token_int8(torch.empty(0, 16))
    assert x_q.shape == (0, 16) and s.shape == (0, 1)
    with pytest.raises(KernelInputError, match="dtype"):
        quantize_per_token_int8(torch.zeros(2, 4, dtype=torch.int32))
    with pytest.raises(KernelInputError, match="2-D"):
        quantize_per_token_int8(torch.zeros(2, 3, 4))


def test_uint8_zp128_variant():
    x = torch.tensor([[1.27, -1.27, 0.635, 0.0]])
    u, s = quantize_per_token_uint8_zp128(x)
    assert u.dtype == torch.uint8
    assert s.item() == pytest.approx(0.01, rel=1e-6)
    signed = u.to(torch.int16) - 128
    assert signed[0, :2].tolist() == [127, -127]
    # zero row uses eps 1e-7 (not 1e-10) and stays at the zero point 128
    u0, s0 = quantize_per_token_uint8_zp128(torch.zeros(1, 8))
    assert torch.all(u0 == 128) and s0.item() == pytest.approx(1e-7 / 127, rel=1e-6)


def test_uint8_zp128_tie_rounding_follows_the_sgl_kernel_by_dtype():
    # amax 127 -> inv scale 1, so 2.5 is an exact tie: bf16 path (AVX-512) ties to even,
    # the generic path (fp16 / fp32 here) ties away from zero.
    x = torch.tensor([[127.0, 2.5, -2.5, 0.5]])
    u_bf, _ = quantize_per_token_uint8_zp128(x.to(torch.bfloat16))
    u_fp, _ = quantize_per_token_uint8_zp128(x.to(torch.float16))
    assert (u_bf.to(torch.int16) - 128)[0].tolist() == [127, 2, -2, 0]
    assert (u_fp.to(torch.int16) - 128)[0].tolist() == [127, 3, -3, 1]


def test_uint8_zp128_inverse_scale_is_one_float32_division():
    # amax 3.265625: 127 / amax rounded once is 38.889954 (the op's float division); torch's
    # 127.0 / tensor (a reciprocal times 127) gives 38.889950, and amax / 2 then codes 63,
    # not the op's 64 (tests/kernels/test_vllm_cpu.py checks this against the op itself).
    x = torch.tensor([[3.265625, 1.6328125, -1.6328125]], dtype=torch.bfloat16)
    u, _ = quantize_per_token_uint8_zp128(x)
    assert (u.to(torch.int16) - 128)[0].tolist() == [127, 64, -64]


@pytest.mark.parametrize("group_size", [-1, 2, 4, 8])
def test_dequantize_groupwise_matches_elementwise_loop(group_size):
    gen = torch.Generator().manual_seed(0)
    n, k = 3, 8
    g = k if group_size == -1 else group_size
    w_q = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.int8)
    zeros = torch.randint(0, 16, (n, k // g), generator=gen, dtype=torch.int32)
    scales = torch.rand(n, k // g, generator=gen)
    out = dequantize_groupwise(w_q, scales, group_size, zeros, dtype=torch.float64)
    for i in range(n):
        for j in range(k):
            want = (int(w_q[i, j]) - int(zeros[i, j // g])) * float(scales[i, j // g])
            assert out[i, j].item() == pytest.approx(want, abs=0, rel=1e-15)


def test_dequantize_rejects_out_of_range_and_bad_shapes():
    w = torch.full((2, 8), 9, dtype=torch.int8)
    with pytest.raises(KernelInputError, match=r"signed \[-8, 7\]"):
        dequantize_groupwise(w, torch.ones(2, 1), -1)
    with pytest.raises(KernelInputError, match="does not divide"):
        dequantize_groupwise(torch.zeros(2, 8, dtype=torch.int8), torch.ones(2, 3), 3)
    with pytest.raises(KernelInputError, match=r"\[N, K // g\]"):
        dequantize_groupwise(torch.zeros(2, 8, dtype=torch.int8), torch.ones(2, 3), 4)
    with pytest.raises(KernelInputError, match="torch.int8"):
        dequantize_groupwise(torch.zeros(2, 8, dtype=torch.int32), torch.ones(2, 1), -1)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 40), st.floats(1e-6, 1e6))
def test_per_token_int8_codes_reconstruct_within_half_step(m, k, mag):
    x = (torch.rand(m, k, generator=torch.Generator().manual_seed(m * 131 + k)) - 0.5) * mag
    x_q, s = quantize_per_token_int8(x)
    err = (x_q.double() * s.double() - x.double()).abs()
    assert torch.all(err <= 0.5 * s.double() * (1 + 1e-5) + 1e-30)


def test_round_half_away_exhaustive_near_every_tie():
    # every float32 within 6 ulps of n + 0.5 (and of n) for n in [0, 130], both signs
    centers = torch.arange(0, 131, dtype=torch.float64)
    pts = torch.cat([centers + 0.5, centers]).to(torch.float32)
    vals = [pts]
    up, down = pts.clone(), pts.clone()
    for _ in range(6):
        up = torch.nextafter(up, torch.full_like(up, float("inf")))
        down = torch.nextafter(down, torch.zeros_like(down))
        vals += [up, down]
    v = torch.cat(vals)
    v = torch.cat([v, -v])
    v64 = v.double()
    want = torch.sign(v64) * torch.floor(v64.abs() + 0.5)  # exact in float64
    assert torch.equal(round_half_away_from_zero(v).double(), want)


def test_round_half_away_dense_below_two():
    v = torch.arange(0, 2**24, 7, dtype=torch.int64).to(torch.float64) / 2**23  # [0, 2)
    v = v.to(torch.float32)
    want = torch.floor(v.double() + 0.5)
    assert torch.equal(round_half_away_from_zero(v).double(), want)
