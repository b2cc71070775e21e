"""The engine-faithful paths reproduce vLLM's numerics and policies."""
from __future__ import annotations

import pytest
import torch

from w4a8_kernels.engine_paths import (
    bf16_bits_read_as_fp16, dynamic4bit_available, inc_quantize_per_token_int8,
    inc_xpu_w4a8, prepare_dynamic4bit, prepare_inc_xpu_w4a8, prepare_int4_scaled_mm, vllm_dynamic4bit,
    vllm_int4_scaled_mm,
)
from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.cpu_w4a16 import w4a16_fallback
from w4a8_kernels.reference import w4a8_reference, w4a8_reference_from_quantized, w4a16_reference
from w4a8_kernels.quant import quantize_per_token_uint8_zp128


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


needs_dyn = pytest.mark.skipif(not dynamic4bit_available()[0], reason="torch lacks _dyn_quant ops")


@needs_dyn
@pytest.mark.parametrize("group_size", [-1, 32])
def test_dynamic4bit_close_to_float_and_differs_from_symmetric(layer_factory, x_factory, group_size):
    w_q, scales, _ = layer_factory(32, 128, group_size, scale_dtype=torch.bfloat16)
    x = x_factory(3, 128, dtype=torch.bfloat16)
    out = vllm_dynamic4bit(x, prepare_dynamic4bit(w_q, scales, group_size))
    ref16 = w4a16_reference(x, w_q, scales, group_size)
    assert rel(out, ref16) < 0.03  # activation quantization error, not garbage
    # torch's reference loop quantizes activations asymmetrically: not vLLM's W4A8 math
    assert rel(out, w4a8_reference(x, w_q, scales, group_size)) > 1e-4


@needs_dyn
def test_dynamic4bit_adds_bias_and_refuses_zeros(layer_factory, x_factory):
    w_q, scales, _ = layer_factory(16, 64, -1)
    bias = torch.linspace(-1, 1, 16)
    x = x_factory(2, 64)
    with_b = vllm_dynamic4bit(x, prepare_dynamic4bit(w_q, scales, -1, bias=bias))
    without = vllm_dynamic4bit(x, prepare_dynamic4bit(w_q, scales, -1))
    assert torch.allclose(with_b - without, bias.expand(2, -1), atol=1e-4)
    wu, s, z = layer_factory(16, 64, -1, asym=True)
    with pytest.raises(KernelInputError, match="zero points"):
        prepare_dynamic4bit(wu, s, -1, z)


def test_inc_quantizer_matches_vllm_ref_formula():
    x = torch.tensor([[0.5, -2.54, 1.27, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.bfloat16)
    q, s = inc_quantize_per_token_int8(x)
    assert s.dtype == torch.bfloat16 and s[1].item() == pytest.approx(1e-5, rel=1e-2)
    want_s = (x.float().abs().amax(1, keepdim=True) / 127).clamp(min=1e-5).to(torch.bfloat16)
    assert torch.equal(s, want_s)
    assert torch.equal(q, torch.round(x.float() / want_s.float()).clamp(-128, 127).to(torch.int8))


@pytest.mark.parametrize("min_tokens", [16, 512])
def test_inc_policy_switches_at_the_threshold_it_is_given(layer_factory, x_factory, min_tokens):
    w_q, scales, _ = layer_factory(32, 128, 32, scale_dtype=torch.bfloat16)
    p = prepare_inc_xpu_w4a8(w_q, scales, 32, min_tokens=min_tokens)
    small = x_factory(min_tokens - 1, 128, dtype=torch.bfloat16)
    # below the threshold: exactly the W4A16 fallback (its own, so the same per-M choice of
    # path), rounded to the activation dtype
    want = w4a16_fallback(small, p.w4a16).to(torch.bfloat16).float()
    assert torch.equal(inc_xpu_w4a8(small, p), want)
    big = x_factory(min_tokens, 128, dtype=torch.bfloat16)
    out = inc_xpu_w4a8(big, p)
    x_q, x_s = inc_quantize_per_token_int8(big)
    ref = w4a8_reference_from_quantized(x_q, x_s.half().float(), w_q, scales.half().float(), 32)
    assert rel(out, ref) <= 2.0 ** -8  # fp16 output rounding, then bf16 (2**-9 per element)
    assert rel(out, w4a16_reference(big, w_q, scales, 32)) < 0.03


def test_inc_bf16_scales_read_as_fp16_are_garbage(layer_factory, x_factory):
    w_q, scales, _ = layer_factory(32, 128, 32, scale_dtype=torch.bfloat16)
    misread = bf16_bits_read_as_fp16(scales)
    assert misread.dtype == torch.float16 and not torch.allclose(misread.float(), scales.float())
    x = x_factory(16, 128, dtype=torch.bfloat16)
    bad = inc_xpu_w4a8(x, prepare_inc_xpu_w4a8(w_q, scales, 32, min_tokens=16,
                                               misread_bf16_scales=True))
    assert rel(bad, w4a16_reference(x, w_q, scales, 32)) > 1.0


@pytest.mark.parametrize("bad", [-1, 1.5, True, None])
def test_inc_threshold_must_be_a_token_count(layer_factory, bad):
    # Which layers INC accepts is the dispatch rule's to say (tests/test_execution.py);
    # the kernel only refuses a threshold that is not a count.
    w_q, scales, _ = layer_factory(20, 64, 32)
    with pytest.raises(KernelInputError, match="min_tokens: a token count >= 0"):
        prepare_inc_xpu_w4a8(w_q, scales, 32, min_tokens=bad)


def test_int4_scaled_mm_numerics(layer_factory, x_factory):
    w_q, scales, zeros = layer_factory(32, 128, 32, asym=True)
    x = x_factory(6, 128, dtype=torch.bfloat16)
    out = vllm_int4_scaled_mm(x, prepare_int4_scaled_mm(w_q, scales, 32, zeros))
    x_u8, x_s = quantize_per_token_uint8_zp128(x)
    ref = w4a8_reference_from_quantized((x_u8.to(torch.int16) - 128).to(torch.int8), x_s,
                                        w_q, scales, 32, zeros)
    assert rel(out, ref) <= 2.0 ** -8
    with pytest.raises(KernelInputError, match="bfloat16 or half"):
        vllm_int4_scaled_mm(x.float(), prepare_int4_scaled_mm(w_q, scales, 32, zeros))
