"""MoE model presets: their layers as vLLM builds them, traced per platform."""
from __future__ import annotations

import pytest

from workbench.dispatch.moe import RoutingNotTraced, trace_moe
from workbench.errors import InvalidInputError, UnknownPresetError
from workbench.moe_models import MOE_MODELS, get_moe_model, moe_layer


def test_presets_hold_their_config_facts():
    q = get_moe_model("Qwen3-30B-A3B")
    assert (q.hidden, q.expert_intermediate, q.experts, q.top_k, q.moe_layers) == (2048, 768, 128, 8, 48)
    m = get_moe_model("Mixtral-8x7B")
    assert (m.hidden, m.expert_intermediate, m.experts, m.top_k) == (4096, 14336, 8, 2)
    d = get_moe_model("DeepSeek-V3")
    assert (d.hidden, d.expert_intermediate, d.experts, d.top_k, d.moe_layers) == (7168, 2048, 256, 8, 58)


def test_tp_splits_the_expert_intermediate_size():
    assert moe_layer("Qwen3-30B-A3B", tp=4).intermediate_size == 192
    with pytest.raises(InvalidInputError, match="tp"):
        moe_layer("Qwen3-30B-A3B", tp=5)
    with pytest.raises(UnknownPresetError):
        get_moe_model("Qwen3-235B")


@pytest.mark.parametrize("name", [n for n, m in MOE_MODELS.items() if m.routing == "softmax_topk"])
def test_w4a8_int8_presets_load_on_arm_only(name):
    assert trace_moe(moe_layer(name), "arm-kleidiai").experts == "CPUExpertsInt4"
    assert not trace_moe(moe_layer(name), "x86-spr-amx").ok
    assert trace_moe(moe_layer(name, "w4a16"), "sm90-h200").experts == "HummingIndexedExperts"


def test_grouped_top_k_routing_is_refused_where_its_gate_would_decide():
    with pytest.raises(RoutingNotTraced, match="grouped_topk"):
        trace_moe(moe_layer("DeepSeek-V3"), "arm-kleidiai")
    # refused before any experts class is asked: routing plays no part
    assert trace_moe(moe_layer("DeepSeek-V3"), "sm90-h200").error == \
        "W4A8 Int8 MoE is only supported on CPU platforms"
