"""Config semantics of each format, and checkpoints traced as the pinned vLLM resolves them."""
from __future__ import annotations

import pytest
import torch

from w4a8_kernels import packing
from workbench.checkpoints import TensorMismatchError, open_checkpoint, trace_checkpoint_layer
from workbench.layer import CheckpointFormat, WeightPacking
from workbench.synthetic import quantize_rtn

DOWN = "model.layers.0.mlp.down_proj"


def _intended(n=64, k=256, g=128, sym=False, seed=0, scale_dtype=torch.float16):
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.02
    return quantize_rtn(w, group_size=g, symmetric=sym, scale_dtype=scale_dtype)


def _ref(q, s, z, g=128):
    idx = torch.arange(q.shape[1]) // g
    return (q.double() - (z.double()[:, idx] if z is not None else 0)) * s.double()[:, idx]


@pytest.mark.parametrize("checkpoint_format,offset", [("gptq", 1), ("gptq_v2", 0)])
def test_gptq_asymmetric_zero_point_conventions(checkpoint_format, offset, tools, tmp_path):
    q, s, z = _intended()
    tensors = {f"{DOWN}.qweight": packing.pack_int4_gptq(q),
               f"{DOWN}.qzeros": packing.pack_int4_gptq_zeros((z.to(torch.int16) - offset).to(torch.int8)),
               f"{DOWN}.scales": s.t().contiguous()}
    path = tools.write_checkpoint(tmp_path / "ck", tensors, {
        "quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False, "desc_act": False,
        "checkpoint_format": checkpoint_format}, dtype="float16")
    layer = open_checkpoint(path).load_layer(DOWN)
    assert layer.packing is WeightPacking.GPTQ and torch.equal(layer.zeros, z)
    assert torch.equal(layer.dequantize(torch.float64), _ref(q, s, z))


def test_awq_checkpoint(tools, tmp_path):
    q, s, z = _intended()
    tensors = {f"{DOWN}.qweight": packing.pack_int4_awq(q), f"{DOWN}.qzeros": packing.pack_int4_awq_zeros(z),
               f"{DOWN}.scales": s.t().contiguous(), "model.norm.weight": torch.ones(4)}
    path = tools.write_checkpoint(tmp_path / "ck", tensors, {
        "quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": True, "version": "gemm"},
        dtype="float16")
    ck = open_checkpoint(path)
    assert ck.format is CheckpointFormat.AWQ and ck.layer_names() == [DOWN]
    layer = ck.load_layer(DOWN)
    assert layer.packing is WeightPacking.AWQ and layer.shape == (256, 64)
    assert torch.equal(layer.dequantize(torch.float64), _ref(q, s, z))
    assert torch.equal(layer.packed("gptq"), packing.pack_int4_gptq(q))


def _inc_tensors(names, sym=True, awq=False):
    out = {}
    for i, name in enumerate(names):
        q, s, z = _intended(sym=sym, seed=i)
        u = packing.signed_to_unsigned(q) if z is None else q
        zeros = torch.full_like(s, 8, dtype=torch.int8) if z is None else z
        if awq:
            out[f"{name}.qweight"] = packing.pack_int4_awq(u)
            out[f"{name}.qzeros"] = packing.pack_int4_awq_zeros(zeros)
        else:
            out[f"{name}.qweight"] = packing.pack_int4_gptq(u)
            out[f"{name}.qzeros"] = packing.pack_int4_gptq_zeros((zeros.to(torch.int16) - 1).to(torch.int8))
        out[f"{name}.scales"] = s.t().contiguous()
    return out


def test_inc_awq_layout(tools, tmp_path):
    path = tools.write_checkpoint(tmp_path / "ck", _inc_tensors([DOWN], awq=True), {
        "quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True,
        "packing_format": "auto_round:auto_awq"})
    layer = open_checkpoint(path).load_layer(DOWN)
    q, s, _ = _intended(sym=True, seed=0)
    assert layer.packing is WeightPacking.AWQ and layer.zeros is None
    assert torch.equal(layer.int4_weight(), q)


def test_inc_extra_config_and_block_names(tools, tmp_path):
    names = ["model.layers.0.mlp.down_proj", "model.layers.0.mlp.up_proj", "mtp.layers.0.mlp.up_proj",
             "model.layers.1.mlp.down_proj"]
    path = tools.write_checkpoint(tmp_path / "ck", _inc_tensors(names), {
        "quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True,
        "block_name_to_quantize": "model.layers",
        "extra_config": {"model.layers.0.mlp.up_proj": {"bits": 16},  # exact name: left in 16 bits
                         r".*layers\.1\..*": {"group_size": 64}}})  # regex override
    with pytest.raises(TensorMismatchError, match=r"layers.1.mlp.down_proj: scales is \[2, 64\].*\[4, 64\]"):
        open_checkpoint(path)
    # Without the mismatching regex: exact-name 16 bits and the block list both leave layers out.
    tools.edit_config(path, lambda c: c["quantization_config"]["extra_config"].pop(r".*layers\.1\..*"))
    assert open_checkpoint(path).layer_names() == ["model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"]


def test_gptq_dynamic_negative_rule_skips_a_module(tools, tmp_path):
    names = ["model.layers.0.mlp.down_proj", "model.layers.0.mlp.up_proj"]
    path = tools.write_checkpoint(tmp_path / "ck", _inc_tensors(names), {
        "quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False,
        "dynamic": {r"-:.*up_proj": {}}}, dtype="float16")
    assert open_checkpoint(path).layer_names() == ["model.layers.0.mlp.down_proj"]


def test_quantize_config_json_alone_is_gptq(tools, tmp_path):
    path = tools.copy_sample("gptq-w4a16-g128", tmp_path)
    (path / "config.json").unlink()
    ck = open_checkpoint(path)
    assert ck.format is CheckpointFormat.GPTQ and len(ck.layers) == 7


def test_compressed_tensors_preset_group_is_expanded_with_a_note(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)

    def preset(c):
        qc = c["quantization_config"]
        qc["config_groups"] = {"W4A8": ["Linear"]}
        qc["format"] = "int-quantized"

    tools.edit_config(path, preset)
    ck = open_checkpoint(path)
    spec = ck.spec(DOWN)
    assert spec.weight_args.group_size == 128 and spec.input_args.strategy == "token"
    assert any("preset reference" in n for n in ck.notes)


def test_layer_name_target_wins_over_class_target(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)

    def two_groups(c):
        groups = c["quantization_config"]["config_groups"]
        special = {**groups["group_0"], "targets": ["re:.*down_proj$"]}
        special["input_activations"] = {**special["input_activations"], "symmetric": False}
        c["quantization_config"]["config_groups"] = {"group_0": groups["group_0"], "group_1": special}

    tools.edit_config(path, two_groups)
    ck = open_checkpoint(path)
    assert ck.spec(DOWN).input_args.symmetric is False
    assert ck.spec("model.layers.0.mlp.up_proj").input_args.symmetric is True


def test_ignore_list_removes_layers(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"]["ignore"].append("re:.*self_attn.*"))
    assert [n.split(".")[-1] for n in open_checkpoint(path).layer_names()] == ["down_proj", "gate_proj", "up_proj"]


# -- traces: the checkpoint resolves as the pinned vLLM resolves it ----------------------

@pytest.mark.parametrize("sample,platform,scheme,kernel", [
    ("ct-w4a8-int-g128", "x86-avx512", "CompressedTensorsW4A8Int", "Dynamic4bitLinearKernel"),
    ("ct-w4a8-int-channel-asym-input", "arm-kleidiai", "CompressedTensorsW4A8Int", "Dynamic4bitLinearKernel"),
    ("ct-w4a8-pack-sym-input", "sm90-h200", "CompressedTensorsWNA8Int", "MacheteLinearKernel"),
    ("ct-w4a16-pack", "sm80-a100", "CompressedTensorsWNA16", "MarlinLinearKernel"),
    ("ct-w4afp8-pack", "sm90-h200", "CompressedTensorsW4A8Fp8", "CutlassW4A8LinearKernel"),
    ("gptq-w4a16-g128", "sm80-a100", "AutoGPTQLinearMethod", "MarlinLinearKernel"),
])
def test_sample_traces(sample, platform, scheme, kernel, tools):
    trace = trace_checkpoint_layer(tools.samples / sample, DOWN, platform)
    assert trace.error is None and trace.scheme == scheme and trace.selected == kernel


def test_w4afp8_off_sm90_is_not_implemented(tools):
    trace = trace_checkpoint_layer(tools.samples / "ct-w4afp8-pack", DOWN, "sm80-a100")
    assert trace.error_type == "NotImplementedError"
    assert trace.error.startswith("No compressed-tensors compatible scheme was found for layer_name=")


def test_pack_quantized_with_asymmetric_input_is_not_implemented(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-pack-sym-input", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"]["config_groups"]["group_0"]["input_activations"].update(symmetric=False))
    trace = trace_checkpoint_layer(path, DOWN, "sm90-h200")
    assert trace.error_type == "NotImplementedError"


def test_tp_misalignment_traces(tools):
    t = trace_checkpoint_layer(tools.samples / "ct-w4a8-int-intermediate-1152", DOWN, "x86-avx512",
                               tp_size=2, parallel="row")
    assert t.error_type == "ValueError" and "input_size_per_partition=576" in t.error
    assert trace_checkpoint_layer(tools.samples / "ct-w4a8-int-intermediate-1152", DOWN,
                                  "x86-avx512").selected == "Dynamic4bitLinearKernel"
    t = trace_checkpoint_layer(tools.samples / "ct-w4a16-k29568-rows64", DOWN, "sm80-a100",
                               tp_size=2, parallel="row")
    assert t.error_type == "ValueError" and "14784" in t.error


def test_inc_xpu_w4a8_backend_keeps_scale_dtype(tools):
    t = trace_checkpoint_layer(tools.samples / "inc-w4a16-bf16-scales", DOWN, "xpu",
                               {"VLLM_XPU_INC_WNA16_BACKEND": "w4a8"})
    assert t.scheme == "INCWna16Scheme" and t.selected == "INCXPUW4A8LinearMethod"


def test_cli_trace_checkpoint_json_matches_the_core(tools, capsys):
    import json

    from workbench.__main__ import main

    path = tools.samples / "ct-w4a8-int-g128"
    assert main(["trace", "--checkpoint", str(path), "--layer", DOWN, "--platform", "x86-avx512", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == trace_checkpoint_layer(path, DOWN, "x86-avx512", parallel="column").to_json()


def test_fused_3d_experts_are_listed_not_loaded(tools, tmp_path):
    from workbench.checkpoints import UnsupportedLayerError

    w = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}
    experts = "model.layers.0.mlp.experts"
    q, s, _ = _intended(sym=True, scale_dtype=torch.bfloat16)
    tensors = {f"{experts}.weight_packed": torch.zeros(4, 64, 32, dtype=torch.int32),
               f"{experts}.weight_scale": torch.ones(4, 64, 2, dtype=torch.bfloat16),
               f"{experts}.weight_shape": torch.tensor([64, 256]),
               f"{DOWN}.weight_packed": packing.pack_int4_ct(q), f"{DOWN}.weight_scale": s,
               f"{DOWN}.weight_shape": torch.tensor([64, 256])}
    path = tools.write_checkpoint(tmp_path / "ck", tensors, {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": w}}})
    ck = open_checkpoint(path)
    assert ck.layer_names() == [DOWN, experts]
    assert "3-D" in ck.spec(experts).notes[0]
    with pytest.raises(UnsupportedLayerError, match="3-D"):
        ck.load_layer(experts)
    assert torch.equal(ck.load_layer(DOWN).dequantize(torch.float64), _ref(q, s, None))


def test_legacy_autoround_packing_format_loads_with_a_note(tools, tmp_path):
    path = tools.copy_sample("autoround-w4a16-g128", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"].update(packing_format="auto_round:gptq"))
    ck = open_checkpoint(path)
    assert any("auto_round:gptq" in n and "ValueError" in n for n in ck.notes)
    assert ck.spec(DOWN).quant_config["packing_format"] == "auto_round:gptq"
    assert ck.load_layer(DOWN).packing is WeightPacking.GPTQ
