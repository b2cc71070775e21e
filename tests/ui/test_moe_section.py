"""The trace page's MoE section: the experts' trace on the page's platform, and its cost."""
from __future__ import annotations


def test_w4a8_moe_runs_on_arm_and_is_refused_on_x86(ui):
    at = ui.open_app("trace")  # x86-avx512
    shown = ui.text(at)
    assert "MoE layers (fused experts)" in shown
    assert "No W4A8 Int8 MoE backend supports the deployment configuration." in shown
    assert "kernel only supports Arm CPU" in shown
    assert any("refuses this MoE layer" in w.value for w in at.warning)
    at.selectbox(key="w:pf.preset:trace").set_value("arm-kleidiai").run()
    shown = ui.text(at)
    assert "runs CPUExpertsInt4 (backend CPU_INT4" in shown
    assert "ms for 48 layers" in shown  # Qwen3-30B-A3B, the first preset


def test_w4a16_moe_on_h200_and_the_version_choice(ui):
    at = ui.open_app("trace", state={"pf.preset": "sm90-h200"})
    at.selectbox(key="moe.scheme").set_value("w4a16").run()
    assert "runs HummingIndexedExperts (backend HUMMING" in ui.text(at)
    at.selectbox(key="moe.backend").set_value("cutlass").run()
    assert ("moe_backend='cutlass' is not supported for WNA16 MoE. Expected one of ['triton', "
            "'marlin', 'humming', 'flashinfer_trtllm', 'emulation', 'rdna3'].") in ui.text(at)
    at.selectbox(key="moe.model").set_value("DeepSeek-V3").run()
    at.selectbox(key="moe.backend").set_value("auto").run()
    assert any("routing-method gate for grouped_topk" in e for e in ui.errors(at))
