"""Bad checkpoints are refused with a named error that says what and where."""
from __future__ import annotations

import json
import pickle
import struct

import pytest
import torch

from workbench.checkpoints import (
    BadScalesError, CorruptFileError, GroupSizeError, InvalidConfigError, MissingConfigError,
    MissingTensorError, MissingWeightsError, PickleRefusedError, TensorMismatchError,
    UnknownFormatError, UnknownLayerError, open_checkpoint,
)
from workbench.errors import CheckpointError

DOWN = "model.layers.0.mlp.down_proj"


def test_missing_config_json(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    (path / "config.json").unlink()
    with pytest.raises(MissingConfigError, match="no config.json"):
        open_checkpoint(path)


def test_config_json_is_not_json(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    (path / "config.json").write_text('{"quantization_config": {"config_groups": ')
    with pytest.raises(InvalidConfigError, match=r"config.json.*not valid JSON.*line 1"):
        open_checkpoint(path)


def test_config_without_quantization_config(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    tools.edit_config(path, lambda c: c.pop("quantization_config"))
    with pytest.raises(MissingConfigError, match="no 'quantization_config'"):
        open_checkpoint(path)


def test_unknown_quant_method(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"].update(quant_method="bitsandbytes"))
    with pytest.raises(UnknownFormatError, match=r"'bitsandbytes'.*accepted: compressed-tensors"):
        open_checkpoint(path)


def test_unknown_compressed_tensors_format(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"]["config_groups"]["group_0"].update(format="zip-quantized"))
    with pytest.raises(UnknownFormatError, match=r"group_0.format.*'zip-quantized'"):
        open_checkpoint(path)


def test_invalid_quantization_args(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"].update(group_size=-5))
    with pytest.raises(InvalidConfigError, match=r"group_0.weights: not valid QuantizationArgs"):
        open_checkpoint(path)


def test_missing_scale_tensor(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-pack-sym-input", tmp_path)
    tools.edit_tensors(path, lambda t: t.pop(f"{DOWN}.weight_shape"))
    with pytest.raises(MissingTensorError, match=r"down_proj.weight_shape' is missing"):
        open_checkpoint(path)


def test_weight_shape_disagrees_with_packed_size(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-pack-sym-input", tmp_path)
    tools.edit_tensors(path, lambda t: t.update({f"{DOWN}.weight_shape": torch.tensor([256, 2048])}))
    with pytest.raises(TensorMismatchError, match=r"weight_shape says \(N, K\) = \(256, 2048\).*\[256, 128\]"):
        open_checkpoint(path)


def test_scale_shape_disagrees_with_group_size(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"].update(group_size=64))
    with pytest.raises(TensorMismatchError, match=r"down_proj.weight_scale is BF16 \[256, 8\].*\[256, 16\]"):
        open_checkpoint(path)


def test_group_size_not_dividing_k(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"].update(group_size=96))
    with pytest.raises(GroupSizeError, match="group_size 96 does not divide in_features K = 1024"):
        open_checkpoint(path)


def test_gptq_group_size_not_dividing_k(tools, tmp_path):
    path = tools.copy_sample("gptq-w4a16-g128", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"].update(group_size=96))
    with pytest.raises(GroupSizeError, match="group_size 96 does not divide in_features K = 1024"):
        open_checkpoint(path)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0])
def test_nan_inf_zero_scales(bad, tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)

    def poison(t):
        t[f"{DOWN}.weight_scale"][3, 1] = bad

    tools.edit_tensors(path, poison)
    ck = open_checkpoint(path)  # listing does not read scales
    with pytest.raises(BadScalesError, match=r"down_proj.weight_scale holds 1 NaN, Inf or zero.*\[3, 1\]"):
        ck.load_layer(DOWN)


def test_int_weight_out_of_int4_range(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    tools.edit_tensors(path, lambda t: t[f"{DOWN}.weight"].__setitem__((0, 0), 12))
    with pytest.raises(TensorMismatchError, match=r"down_proj.weight holds values in \[-8, 12\]"):
        open_checkpoint(path).load_layer(DOWN)


def test_truncated_safetensors(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-1000])
    with pytest.raises(CorruptFileError, match="truncated"):
        open_checkpoint(path)


def test_header_claims_more_bytes_than_the_file(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    f = path / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(struct.pack("<Q", len(data) * 2) + data[8:])
    with pytest.raises(CorruptFileError, match=r"header claims \d+ bytes but only \d+ follow"):
        open_checkpoint(path)


def test_file_shorter_than_the_length_field(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    (path / "model.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(CorruptFileError, match="too short"):
        open_checkpoint(path)


class _Tripwire:
    """Unpickling this creates a file: proof that something unpickled it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_checkpoint_refused_unread(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    marker = tmp_path / "unpickled"
    (path / "model.safetensors").unlink()
    (path / "pytorch_model.bin").write_bytes(pickle.dumps(_Tripwire(str(marker))))
    with pytest.raises(PickleRefusedError, match="pytorch_model.bin.*refused unread"):
        open_checkpoint(path)
    with pytest.raises(PickleRefusedError):
        open_checkpoint(path / "pytorch_model.bin")
    assert not marker.exists()


def test_pickle_renamed_to_safetensors_refused(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    marker = tmp_path / "unpickled"
    (path / "model.safetensors").write_bytes(pickle.dumps(_Tripwire(str(marker))))
    with pytest.raises(PickleRefusedError, match="pickle stream"):
        open_checkpoint(path)
    assert not marker.exists()


def test_no_weights_at_all(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(MissingWeightsError, match="no \\*.safetensors"):
        open_checkpoint(tmp_path)


def test_index_names_missing_shard(tools, tmp_path):
    path = tools.copy_sample("ct-w4a16-pack", tmp_path)
    (path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(MissingWeightsError, match="model-00002-of-00002.safetensors"):
        open_checkpoint(path)


def test_index_cannot_point_outside_the_checkpoint(tools, tmp_path):
    path = tools.copy_sample("ct-w4a16-pack", tmp_path)
    tools.edit_config(path, lambda c: c["weight_map"].update({"lm_head.weight": "../../etc/x.safetensors"}),
                      file="model.safetensors.index.json")
    with pytest.raises(InvalidConfigError, match="weight_map"):
        open_checkpoint(path)


def test_index_disagrees_with_shard_headers(tools, tmp_path):
    path = tools.copy_sample("ct-w4a16-pack", tmp_path)
    tools.edit_config(path, lambda c: c["weight_map"].update({f"{DOWN}.weight_scale": "model-00001-of-00002.safetensors"}),
                      file="model.safetensors.index.json")
    with pytest.raises(MissingTensorError, match="down_proj.weight_scale"):
        open_checkpoint(path)


def test_gptq_symmetric_config_with_asymmetric_qzeros(tools, tmp_path):
    path = tools.copy_sample("gptq-w4a16-g128", tmp_path)
    tools.edit_tensors(path, lambda t: t[f"{DOWN}.qzeros"].__setitem__((0, 0), 0x77777775))
    with pytest.raises(TensorMismatchError, match=r"sym=true but .*qzeros holds zero point 6 at \(channel 0, group 0\)"):
        open_checkpoint(path).load_layer(DOWN)


def test_gptq_reordering_g_idx_without_desc_act(tools, tmp_path):
    path = tools.copy_sample("gptq-w4a16-g128", tmp_path)
    tools.edit_tensors(path, lambda t: t[f"{DOWN}.g_idx"].copy_(t[f"{DOWN}.g_idx"].flip(0)))
    with pytest.raises(TensorMismatchError, match="reorders groups but desc_act is false"):
        open_checkpoint(path).load_layer(DOWN)


def test_gptq_config_missing_required_field(tools, tmp_path):
    path = tools.copy_sample("gptq-w4a16-g128", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"].pop("desc_act"))
    with pytest.raises(InvalidConfigError, match="missing required field 'desc_act'"):
        open_checkpoint(path)


def test_inc_unknown_packing_format(tools, tmp_path):
    path = tools.copy_sample("autoround-w4a16-g128", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"].update(packing_format="auto_round:gguf"))
    with pytest.raises(UnknownFormatError, match="packing_format: 'auto_round:gguf'"):
        open_checkpoint(path)


def test_unknown_layer_name(tools):
    ck = open_checkpoint(tools.samples / "ct-w4a8-int-g128")
    with pytest.raises(UnknownLayerError, match=r"no quantized layer named 'lm_head'"):
        ck.load_layer("lm_head")


def test_every_error_is_a_checkpoint_error():
    for cls in (BadScalesError, CorruptFileError, GroupSizeError, InvalidConfigError, MissingConfigError,
                MissingTensorError, MissingWeightsError, PickleRefusedError, TensorMismatchError,
                UnknownFormatError, UnknownLayerError):
        assert issubclass(cls, CheckpointError)


def test_cli_reports_bad_checkpoint_in_one_line(tools, tmp_path, capsys):
    from workbench.__main__ import main

    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:100])
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "model.safetensors" in err and "Traceback" not in err


def test_header_length_starting_with_0x80_is_not_a_pickle(tmp_path):
    from workbench.checkpoints.safetensors_file import read_header

    header = json.dumps({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    header += b" " * (384 - len(header))  # length 384 = 0x180: first byte 0x80, like a pickle mark
    f = tmp_path / "model.safetensors"
    f.write_bytes(struct.pack("<Q", 384) + header + struct.pack("<2f", 1.0, 2.0))
    tensors, _ = read_header(f)
    assert tensors["t"].shape == (2,)
