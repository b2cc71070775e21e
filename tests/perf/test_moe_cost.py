"""MoE layer cost: per-expert GEMMs from the routed load, summed; refused layers have none."""
from __future__ import annotations

import pytest

from workbench.errors import InvalidInputError
from workbench.moe_models import moe_layer
from workbench.perf.moe_cost import (expert_loads, moe_layer_cost, moe_model_report,
                                     selected_moe_cost)


@pytest.mark.parametrize("load", ["uniform", "skewed"])
@pytest.mark.parametrize("t,k,e", [(1, 8, 128), (16, 8, 128), (3, 2, 8), (512, 2, 8), (7, 6, 64)])
def test_loads_hold_every_slot_and_respect_routing(t, k, e, load):
    loads = expert_loads(t, k, e, load)
    assert len(loads) == e and sum(loads) == t * k and max(loads) <= t


def test_skew_concentrates_the_load():
    u, s = expert_loads(64, 8, 128, "uniform"), expert_loads(64, 8, 128, "skewed")
    assert max(s) == 64 > max(u) and min(s) < min(u)
    with pytest.raises(InvalidInputError, match="top_k"):
        expert_loads(4, 9, 8)


@pytest.mark.parametrize("platform,path", [("arm-kleidiai", "w4a8_native"),
                                           ("sm80-a100", "w4a16_fallback"),
                                           ("sm80-a100", "w4a8_native")])
def test_cost_never_falls_as_tokens_grow(platform, path):
    layer = moe_layer("Qwen3-30B-A3B")
    for load in ("uniform", "skewed"):
        costs = [moe_layer_cost(platform, layer, t, load, path) for t in (1, 4, 16, 64, 256, 512)]
        us = [c.us for c in costs]
        assert all(b >= a for a, b in zip(us, us[1:])), (load, us)
        assert all(c.low_us <= c.us <= c.high_us for c in costs)


def test_selected_cost_follows_the_trace():
    layer = moe_layer("Mixtral-8x7B")
    arm = selected_moe_cost("arm-kleidiai", layer, 16)
    assert arm.path == "w4a8_native" and arm.us > 0 and "CPUExpertsInt4" in arm.notes[0]
    x86 = selected_moe_cost("x86-avx512", layer, 16)
    assert x86.us is None and x86.refused == ("NotImplementedError: No W4A8 Int8 MoE backend "
                                             "supports the deployment configuration.")


def test_model_report_totals_or_refuses():
    ok = moe_model_report("Qwen3-30B-A3B", "sm90-h200", "w4a16", tokens=16)
    assert ok["total_us"] == pytest.approx(ok["per_layer"]["us"] * 48)
    assert ok["total_band_us"][0] <= ok["total_us"] <= ok["total_band_us"][1]
    no = moe_model_report("Qwen3-30B-A3B", "sm90-h200", "w4a8-int8", tokens=16)
    assert no["total_us"] is None and "only supported on CPU" in no["refused"]
    grouped = moe_model_report("DeepSeek-V3", "arm-kleidiai", "w4a8-int8")
    assert grouped["total_us"] is None and "grouped_topk" in grouped["not_modelled"]


def test_model_report_loads_experts_as_vllm_does():
    from workbench.perf.report import model_report
    arm = model_report("Mixtral-8x7B", "arm-kleidiai")
    experts = [r for r in arm.layers if r.layer.startswith("experts.")]
    assert {r.kernel for r in experts} == {"CPUExpertsInt4"} and arm.totals() is not None
    x86 = model_report("Mixtral-8x7B", "x86-avx512")  # the experts' Linear twins would load here
    assert x86.totals() is None
    assert {r.error for r in x86.refused()} == {
        "NotImplementedError: No W4A8 Int8 MoE backend supports the deployment configuration."}
