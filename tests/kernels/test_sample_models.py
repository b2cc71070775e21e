"""W4A8 native and W4A16 on every int4 layer of the bundled real-format checkpoints."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native
from w4a8_kernels.cpu_w4a16 import prepare_w4a16, w4a16_dequant, w4a16_tinygemm
from w4a8_kernels.reference import w4a8_reference, w4a16_reference

ROOT = Path(__file__).resolve().parents[2] / "sample_models"


def _checkpoints():
    # Directory names only: listing layers at collection would import more than this
    # module needs before other test modules are collected.
    return [pytest.param(d, id=d.name) for d in sorted(p for p in ROOT.iterdir() if p.is_dir())]


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("ckpt", _checkpoints())
def test_sample_checkpoint(ckpt):
    from workbench.checkpoints.checkpoint import list_layers, load_layer
    checked = 0
    for spec in list_layers(ckpt):
        layer = load_layer(ckpt, spec.name)
        if layer.num_bits != 4 or layer.g_idx is not None:
            continue  # act-order (g_idx) or non-int4: outside the int4 group-wise kernels
        _check_layer(layer)
        checked += 1
    if not checked:
        pytest.skip(f"{ckpt.name} has no int4 layer without act-order")


def _check_layer(layer):
    w, s, g, z = layer.int4_weight(), layer.scales, layer.group_size, layer.zeros
    x = torch.randn(5, layer.in_features, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    assert rel(w4a8_native(x, prepare_w4a8(w, s, g, z)), w4a8_reference(x, w, s, g, z)) <= 1e-6, layer.name
    p16 = prepare_w4a16(w, s, g, z)
    ref16 = w4a16_reference(x, w, s, g, z)
    assert rel(w4a16_dequant(x, p16), ref16) <= 1e-6, layer.name
    if p16.tinygemm_ok:
        # bf16 output; asymmetric layers also carry the bf16 rounding of tinygemm's float
        # zero term (8 - z) * s, which can be several weight steps large
        assert rel(w4a16_tinygemm(x, p16), ref16) <= (2.0 ** -8 if z is None else 2.0 ** -6), layer.name
