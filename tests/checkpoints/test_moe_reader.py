"""MoE layers of checkpoints: per-expert and fused layouts grouped into vLLM's fused-MoE layers."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from workbench.__main__ import main
from workbench.checkpoints import open_checkpoint
from workbench.checkpoints.moe import (MoELayoutError, checkpoint_moe_layers, moe_groups,
                                       moe_layer_of)
from workbench.dispatch.moe import trace_moe
from workbench.layer import CheckpointFormat

EXPERTS = "model.layers.0.mlp.experts"


def test_bundled_moe_sample_groups_its_experts(tools):
    groups, config = checkpoint_moe_layers(tools.samples / "ct-w4a8-int-moe")
    assert [g.name for g in groups] == [EXPERTS]
    g = groups[0]
    assert (g.layout, g.num_experts, g.hidden_size, g.intermediate_size) == ("per-expert", 4, 256, 128)
    assert len(g.projections) == 12 and g.input_args is not None and g.input_args.num_bits == 8
    layer = moe_layer_of(g, config)
    assert layer.top_k == 2 and layer.activation == "silu"
    assert trace_moe(layer, "arm-kleidiai").experts == "CPUExpertsInt4"
    assert trace_moe(layer, "x86-avx512").error == \
        "No W4A8 Int8 MoE backend supports the deployment configuration."
    # the router gate stays float and out of the listing, as llm-compressor leaves it
    ck = open_checkpoint(tools.samples / "ct-w4a8-int-moe")
    assert "model.layers.0.mlp.gate" not in ck.layer_names()
    assert "model.layers.0.mlp.gate" in ck.quant_config["ignore"]


def test_cli_traces_the_sample_experts(tools, capsys):
    path = str(tools.samples / "ct-w4a8-int-moe")
    assert main(["trace", "--checkpoint", path, "--layer", EXPERTS, "--platform", "sm90-h200",
                 "--json"]) == 0
    t = json.loads(capsys.readouterr().out)
    assert t["error"] == "W4A8 Int8 MoE is only supported on CPU platforms"
    assert main(["trace", "--checkpoint", path, "--layer", "model.layers.1.mlp.experts"]) == 2
    assert "no MoE layer of that name; MoE layers: model.layers.0.mlp.experts" in \
        capsys.readouterr().err


def test_fused_w13_w2_layout(tools, tmp_path):
    e, h, i = 4, 256, 128
    w = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}
    tensors = {f"{EXPERTS}.gate_up_proj_packed": torch.zeros(e, 2 * i, h // 8, dtype=torch.int32),
               f"{EXPERTS}.down_proj_packed": torch.zeros(e, h, i // 8, dtype=torch.int32)}
    path = tools.write_checkpoint(tmp_path / "fused", tensors, {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": w}}})
    groups, _ = checkpoint_moe_layers(path)
    assert [(g.layout, g.num_experts, g.hidden_size, g.intermediate_size) for g in groups] == \
        [("fused", 4, 256, 128)]
    layer = moe_layer_of(groups[0], {"num_experts_per_tok": 2})
    assert trace_moe(layer, "sm80-a100").experts == "MarlinExperts"


def test_fused_shapes_must_agree(tools, tmp_path):
    tensors = {f"{EXPERTS}.w13_weight": torch.zeros(4, 256, 256),
               f"{EXPERTS}.w2_weight": torch.zeros(4, 256, 64)}
    path = tools.write_checkpoint(tmp_path / "bad", tensors, {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4}}}})
    with pytest.raises(MoELayoutError, match="does not match"):
        checkpoint_moe_layers(path)


def test_per_expert_projections_must_share_a_scheme_and_be_complete(tools):
    ck = open_checkpoint(tools.samples / "ct-w4a8-int-moe")
    layers = list(ck.layers)
    odd = next(i for i, s in enumerate(layers) if s.name.endswith("experts.2.up_proj"))
    layers[odd] = replace(layers[odd], input_args=None)
    with pytest.raises(MoELayoutError, match="vLLM requires one scheme"):
        moe_groups(layers)
    with pytest.raises(MoELayoutError, match="no w2 projection"):
        moe_groups([s for s in ck.layers if not s.name.endswith("experts.1.down_proj")])


def test_gptq_experts_are_listed_but_not_traced(tools):
    ck = open_checkpoint(tools.samples / "ct-w4a8-int-moe")
    gptq = [replace(s, format=CheckpointFormat.GPTQ, input_args=None) for s in ck.layers]
    groups = moe_groups(gptq)
    assert groups[0].num_experts == 4 and groups[0].format is CheckpointFormat.GPTQ
    with pytest.raises(MoELayoutError, match="GPTQ / AWQ MoE methods are not modelled"):
        moe_layer_of(groups[0], {})
