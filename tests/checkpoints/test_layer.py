"""QuantizedLayer: packings, exact dequantization, shapes and the dispatch inputs."""
from __future__ import annotations

import pytest
import torch

from w4a8_kernels.packing import AWQ_ORDER
from workbench.errors import InvalidInputError
from workbench.layer import CTScheme, CheckpointFormat, QuantizedLayer, WeightPacking, default_parallel
from workbench.quant_args import QuantArgs
from workbench.synthetic import layer_from_weight


def _layer(n=16, k=256, g=128, sym=True, seed=0, **kw) -> QuantizedLayer:
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.02
    return layer_from_weight(w, name=kw.pop("name", "model.layers.0.mlp.up_proj"), group_size=g,
                             symmetric=sym, **kw)


def _with_packing(layer: QuantizedLayer, fmt: WeightPacking) -> QuantizedLayer:
    return layer.with_tensors(qweight=layer.packed(fmt), packing=fmt)


def _reference(q, s, z, g_idx):
    """(q - z) * s element by element, the groups looked up one column at a time."""
    out = torch.empty(q.shape, dtype=torch.float64)
    for col in range(q.shape[1]):
        grp = int(g_idx[col])
        zz = z[:, grp].double() if z is not None else 0
        out[:, col] = (q[:, col].double() - zz) * s[:, grp].double()
    return out


def test_bit_layout_of_each_packing_by_hand():
    # Signed values -8..-1 along K are nibbles 0..7; nibble i sits at bits 4i.
    q = torch.arange(-8, 0, dtype=torch.int8).reshape(1, 8)
    s = torch.ones(1, 1, dtype=torch.bfloat16)
    layer = QuantizedLayer(name="x", in_features=8, out_features=1, num_bits=4, group_size=-1,
                           symmetric=True, format=CheckpointFormat.SYNTHETIC, weight_args=QuantArgs(num_bits=4, group_size=-1),
                           qweight=q, packing=WeightPacking.INT8, scales=s)
    assert layer.packed("compressed-tensors").tolist() == [[0x76543210]]  # [N, K/8]
    assert layer.packed("gptq").tolist() == [[0x76543210]]  # [K/8, N]
    # AWQ packs along N: 8 output channels with nibbles 0..7 land in slots AWQ_ORDER.
    col = QuantizedLayer(name="y", in_features=1, out_features=8, num_bits=4, group_size=-1,
                         symmetric=True, format=CheckpointFormat.SYNTHETIC, weight_args=QuantArgs(num_bits=4, group_size=-1),
                         qweight=q.reshape(8, 1), packing=WeightPacking.INT8,
                         scales=torch.ones(8, 1, dtype=torch.bfloat16))
    want = sum(AWQ_ORDER[slot] << (4 * slot) for slot in range(8))
    assert col.packed("awq").tolist() == [[want]] and want == 0x75316420


def test_compressed_tensors_packing_matches_the_library():
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32

    layer = _layer(n=24, k=264, g=-1)  # ragged K: 264 is not a multiple of 8 * 32
    q = layer.int4_weight()
    assert torch.equal(layer.packed("compressed-tensors"), pack_to_int32(q, 4))
    packed = pack_to_int32(q, 4)
    assert torch.equal(unpack_from_int32(packed, 4, q.shape), q)


@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("fmt", list(WeightPacking))
def test_every_packing_round_trips(sym, fmt):
    layer = _layer(sym=sym)
    other = _with_packing(layer, fmt)
    assert torch.equal(other.int4_weight(), layer.int4_weight())
    assert torch.equal(other.dequantize(torch.float64), layer.dequantize(torch.float64))
    for fmt2 in WeightPacking:
        assert torch.equal(other.packed(fmt2), layer.packed(fmt2))


@pytest.mark.parametrize("sym", [True, False])
def test_dequantize_is_exact(sym):
    layer = _layer(sym=sym)
    idx = torch.arange(layer.in_features) // 128
    want = _reference(layer.int4_weight(), layer.scales, layer.zeros, idx)
    assert torch.equal(layer.dequantize(torch.float64), want)
    # RTN keeps every weight within half a step of the source, plus the bf16 rounding of the
    # scale at the clamped top level (symmetric scale = max / 7.5, top level 7).
    step = layer.scales.double()[:, idx]
    err = (layer.dequantize(torch.float64) - layer.source_weight.double()).abs()
    assert bool((err <= step * (0.5 + 7.5 * 2.0 ** -8)).all())


def test_dequantize_with_a_reordering_g_idx():
    layer = _layer(sym=False)
    g_idx = (torch.arange(256) // 128).flip(0).to(torch.int32)
    reordered = layer.with_tensors(g_idx=g_idx, has_g_idx=True)
    want = _reference(layer.int4_weight(), layer.scales, layer.zeros, g_idx)
    assert torch.equal(reordered.dequantize(torch.float64), want)
    assert not torch.equal(reordered.dequantize(), layer.dequantize())


def test_partition_shapes_and_misalignment():
    up = _layer(n=1152, k=256, name="model.layers.0.mlp.up_proj")
    down = _layer(n=256, k=1152, name="model.layers.0.mlp.down_proj")
    assert up.default_parallel == "column" and down.default_parallel == "row"
    assert up.partition_shape(2) == (256, 576)
    assert down.partition_shape(2) == (576, 256)
    with pytest.raises(InvalidInputError, match="tp_size 5 does not divide in_features = 1152"):
        down.partition_shape(5)
    with pytest.raises(InvalidInputError, match="parallel"):
        up.partition_shape(2, "diagonal")


def test_default_parallel_names():
    assert default_parallel("model.layers.3.self_attn.o_proj") == "row"
    assert default_parallel("model.layers.3.self_attn.q_proj") == "column"


def test_scheme_input_has_the_dispatch_fields():
    layer = _layer(n=256, k=1024, name="model.layers.0.mlp.down_proj")
    s = layer.scheme_input()
    assert isinstance(s, CTScheme) and s.weights is layer.weight_args  # handed over, not re-parsed
    assert set(s.to_json()) == {"weights", "input_activations", "output_activations", "format",
                                "layer_name", "in_features", "out_features", "params_dtype"}
    assert s.format == "int-quantized" and s.in_features == 1024 and s.out_features == 256
    assert s.weights.group_size == 128 and s.input_activations.strategy == "token"
    assert s.partition == (1024, 256)
    tp = layer.scheme_input(tp_size=2)
    assert tp.partition == (512, 256)


def test_gptq_layers_have_no_compressed_tensors_scheme(tools):
    from workbench.checkpoints import open_checkpoint

    spec = open_checkpoint(tools.samples / "autoround-w4a16-g128").spec("model.layers.0.mlp.down_proj")
    with pytest.raises(InvalidInputError, match="quant_config_input"):
        spec.scheme_input()
    q = spec.quant_config_input(tp_size=2)
    assert q["quant_method"] == "inc" and q["packing_format"] == "auto_round:auto_gptq"
    assert (q["bits"], q["group_size"], q["sym"], q["backend"]) == (4, 128, True, "auto")
    assert q["input_size_per_partition"] == 512 and q["scale_dtype"] == "float16"


def test_layer_rejects_inconsistent_tensors():
    layer = _layer()
    with pytest.raises(InvalidInputError, match="scales shape"):
        layer.with_tensors(scales=layer.scales[:, :1])
