"""Synthetic layers and round-to-nearest: llm-compressor's math, checked against the library."""
from __future__ import annotations

import pytest
import torch

from workbench.errors import InvalidInputError
from workbench.synthetic import SyntheticSpec, quantize_rtn, synthetic_layer, synthetic_weight


@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("group_size", [128, 32, -1])
@pytest.mark.parametrize("scale_dtype", [torch.bfloat16, torch.float16])
def test_rtn_equals_compressed_tensors(sym, group_size, scale_dtype):
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    gen = torch.Generator().manual_seed(7)
    w = torch.randn(48, 256, generator=gen) * 0.02
    w[5] = 0.0  # an all-zero row: the eps scale path
    w[6] = w[6].abs()  # all-positive groups: 0 still enters the range
    args = QuantizationArgs(num_bits=4, type="int", symmetric=sym,
                            strategy="channel" if group_size == -1 else "group",
                            group_size=None if group_size == -1 else group_size)
    g = 256 if group_size == -1 else group_size
    grouped = w.reshape(48, 256 // g, g)
    scale, zp = calculate_qparams(grouped.amin(-1), grouped.amax(-1), args)
    stored = scale.to(scale_dtype)  # llm-compressor stores the scale in the model dtype
    q_ct = quantize(w, stored.to(torch.float32), zp, args=args, dtype=torch.int8)
    q, s, z = quantize_rtn(w, group_size=group_size, symmetric=sym, scale_dtype=scale_dtype)
    assert torch.equal(s, stored)
    if sym:
        assert z is None and torch.equal(q, q_ct)
    else:  # the project convention shifts compressed-tensors' signed values by 8
        assert torch.equal(q.to(torch.int16) - 8, q_ct.to(torch.int16))
        assert torch.equal(z.to(torch.int16) - 8, zp.to(torch.int16))


def test_outlier_channels_are_outliers():
    spec = SyntheticSpec(out_features=64, in_features=512, outlier_channels=4, outlier_scale=10.0, seed=3)
    w = synthetic_weight(spec)
    col_max = w.abs().amax(0)
    assert int((col_max > 4 * col_max.median()).sum()) == 4


@pytest.mark.parametrize("dist", ["normal", "uniform", "laplace", "student_t"])
def test_distributions_have_the_requested_scale(dist):
    w = synthetic_weight(SyntheticSpec(out_features=256, in_features=1024, distribution=dist, std=0.02,
                                       params_dtype="float32"))
    assert 0.015 < float(w.std()) < 0.027


def test_synthetic_layer_is_seeded_and_shaped():
    a = synthetic_layer(out_features=96, in_features=256, group_size=64, symmetric=False, seed=1)
    b = synthetic_layer(out_features=96, in_features=256, group_size=64, symmetric=False, seed=1)
    c = synthetic_layer(out_features=96, in_features=256, group_size=64, symmetric=False, seed=2)
    assert torch.equal(a.int4_weight(), b.int4_weight()) and not torch.equal(a.int4_weight(), c.int4_weight())
    assert a.shape == (256, 96) and a.scales.shape == (96, 4) and a.zeros.shape == (96, 4)
    assert a.scheme_input().format == "int-quantized"
    assert synthetic_layer(out_features=96, in_features=256, scheme="W4A16").scheme_input().format == "pack-quantized"


@pytest.mark.parametrize("kwargs,field", [
    ({"in_features": 200, "group_size": 128}, "group_size"),
    ({"distribution": "cauchy"}, "distribution"),
    ({"outlier_channels": -1}, "outlier_channels"),
    ({"scheme": "W8A8"}, "scheme"),
    ({"params_dtype": "int8"}, "params_dtype"),
    ({"out_features": 0}, "out_features"),
])
def test_spec_validation_names_the_field(kwargs, field):
    with pytest.raises(InvalidInputError, match=field):
        SyntheticSpec(**kwargs)
