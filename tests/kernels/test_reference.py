from __future__ import annotations

import pytest
import torch

from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.quant import quantize_per_token_int8
from w4a8_kernels.reference import w4a16_reference, w4a8_reference


@pytest.mark.parametrize("group_size", [-1, 4, 8])
@pytest.mark.parametrize("asym", [False, True])
def test_w4a8_reference_equals_python_integer_loop(layer_factory, x_factory, group_size, asym):
    n, k, m = 5, 16, 3
    w_q, scales, zeros = layer_factory(n, k, group_size, asym=asym)
    x = x_factory(m, k)
    out = w4a8_reference(x, w_q, scales, group_size, zeros)
    x_q, x_s = quantize_per_token_int8(x)
    g = k if group_size == -1 else group_size
    for i in range(m):
        for j in range(n):
            total = 0.0
            for grp in range(k // g):
                dot = 0  # Python ints: exact
                for c in range(grp * g, (grp + 1) * g):
                    zw = int(zeros[j, grp]) if zeros is not None else 0
                    dot += int(x_q[i, c]) * (int(w_q[j, c]) - zw)
                total += dot * float(scales[j, grp])
            want = total * float(x_s[i, 0])
            assert out[i, j].item() == pytest.approx(want, rel=1e-12, abs=1e-300)
    assert out.dtype == torch.float64 and out.shape == (m, n)


@pytest.mark.parametrize("group_size", [-1, 8])
def test_w4a16_reference_is_x_times_dequantized_weight(layer_factory, x_factory, group_size):
    n, k, m = 4, 16, 2
    w_q, scales, zeros = layer_factory(n, k, group_size, asym=True, scale_dtype=torch.bfloat16)
    x = x_factory(m, k, dtype=torch.bfloat16)
    out = w4a16_reference(x, w_q, scales, group_size, zeros)
    g = k if group_size == -1 else group_size
    for i in range(m):
        for j in range(n):
            want = sum(float(x[i, c]) * (int(w_q[j, c]) - int(zeros[j, c // g]))
                       * float(scales[j, c // g]) for c in range(k))
            assert out[i, j].item() == pytest.approx(want, rel=1e-12)


def test_w4a8_reference_close_to_w4a16_reference(layer_factory, x_factory):
    w_q, scales, _ = layer_factory(64, 256, 32)
    x = x_factory(8, 256)
    a, b = w4a8_reference(x, w_q, scales, 32), w4a16_reference(x, w_q, scales, 32)
    rel = ((a - b).norm() / b.norm()).item()
    assert 1e-5 < rel < 2e-2  # activation quantization error: visible but small


def test_references_reject_k_mismatch(layer_factory):
    w_q, scales, _ = layer_factory(4, 16, 8)
    with pytest.raises(KernelInputError, match="K = 15"):
        w4a8_reference(torch.zeros(2, 15), w_q, scales, 8)
    with pytest.raises(KernelInputError, match="K = 15"):
        w4a16_reference(torch.zeros(2, 15), w_q, scales, 8)
