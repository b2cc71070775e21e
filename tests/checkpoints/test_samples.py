"""Every bundled sample reads back exactly what its generator meant to write."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from workbench.checkpoints import open_checkpoint
from workbench.layer import CheckpointFormat, WeightPacking

_SAMPLES_DIR = Path(__file__).resolve().parents[2] / "sample_models"
SAMPLE_NAMES = sorted(p.name for p in _SAMPLES_DIR.iterdir() if (p / "config.json").is_file())


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sample_round_trips_exactly(name, tools):
    gen = tools.generator()
    intended = gen.intended_layers(name)
    ck = open_checkpoint(tools.samples / name)
    assert sorted(ck.layer_names()) == sorted(intended)
    for layer, (q, s, z) in intended.items():
        got = ck.load_layer(layer)
        assert torch.equal(got.int4_weight(), q)
        assert got.scales.dtype == s.dtype and torch.equal(got.scales, s)
        assert (got.zeros is None) == (z is None)
        if z is not None:
            assert torch.equal(got.zeros, z)
        g = q.shape[1] // s.shape[1]
        idx = torch.arange(q.shape[1]) // g
        want = (q.double() - (z.double()[:, idx] if z is not None else 0)) * s.double()[:, idx]
        assert torch.equal(got.dequantize(torch.float64), want)
        # int4 times a 16-bit scale is exact in float32 too.
        assert torch.equal(got.dequantize(torch.float32).double(), want)


def test_checked_in_samples_are_the_generators(tools):
    assert SAMPLE_NAMES == sorted(tools.generator().SAMPLES)


def test_samples_stay_under_20_mb(tools):
    total = sum(f.stat().st_size for f in tools.samples.rglob("*") if f.is_file())
    assert total < 20 * 1024 * 1024


def test_every_sample_has_a_readme_line(tools):
    readme = (tools.samples / "README.md").read_text()
    for name in SAMPLE_NAMES:
        assert f"| `{name}` |" in readme


@pytest.mark.parametrize("name,fmt,packing,ct_format,scale_dtype", [
    ("ct-w4a8-int-g128", CheckpointFormat.COMPRESSED_TENSORS, WeightPacking.INT8, "int-quantized", torch.bfloat16),
    ("ct-w4a8-pack-sym-input", CheckpointFormat.COMPRESSED_TENSORS, WeightPacking.COMPRESSED_TENSORS, "pack-quantized", torch.bfloat16),
    ("gptq-w4a16-g128", CheckpointFormat.GPTQ, WeightPacking.GPTQ, None, torch.float16),
    ("autoround-w4a16-g128", CheckpointFormat.INC, WeightPacking.GPTQ, None, torch.float16),
    ("inc-w4a16-bf16-scales", CheckpointFormat.INC, WeightPacking.GPTQ, None, torch.bfloat16),
])
def test_sample_format_and_storage(name, fmt, packing, ct_format, scale_dtype, tools):
    ck = open_checkpoint(tools.samples / name)
    layer = ck.load_layer("model.layers.0.mlp.down_proj")
    assert ck.format is fmt and layer.format is fmt
    assert layer.packing is packing and layer.ct_format == ct_format
    assert layer.scales.dtype == scale_dtype
    assert layer.shape == (1024, 256)  # [K, N] as vLLM writes full_weight_shape


def test_sharded_sample_reads_through_the_index(tools):
    ck = open_checkpoint(tools.samples / "ct-w4a16-pack")
    assert ck.files.sharded and len(ck.files.weight_files) == 2
    q = ck.spec("model.layers.0.self_attn.q_proj")
    down = ck.spec("model.layers.0.mlp.down_proj")
    assert q.provenance.files == ("model-00001-of-00002.safetensors",)
    assert down.provenance.files == ("model-00002-of-00002.safetensors",)
    # The regex-targeted MLP group is asymmetric, the attention group symmetric.
    assert q.symmetric and not down.symmetric
    assert down.provenance.tensors["zeros"] == "model.layers.0.mlp.down_proj.weight_zero_point"


def test_listing_reads_no_weight_bytes(tools, tmp_path):
    """Listing works on headers alone: zero out every weight byte and the listing is unchanged."""
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    before = [s.to_dict() for s in open_checkpoint(path).layers]
    tools.edit_tensors(path, lambda t: [v.zero_() for k, v in t.items() if k.endswith(".weight")])
    assert [s.to_dict() for s in open_checkpoint(path).layers] == before


def test_loading_one_layer_ignores_other_layers_bytes(tools, tmp_path):
    """Corrupt another layer's scales: the layer asked for still loads; the corrupt one is refused."""
    path = tools.copy_sample("gptq-w4a16-g128", tmp_path)
    tools.edit_tensors(path, lambda t: t["model.layers.0.self_attn.q_proj.scales"].fill_(float("nan")))
    ck = open_checkpoint(path)
    ck.load_layer("model.layers.0.mlp.down_proj")
    from workbench.checkpoints import BadScalesError

    with pytest.raises(BadScalesError, match="q_proj.scales"):
        ck.load_layer("model.layers.0.self_attn.q_proj")
