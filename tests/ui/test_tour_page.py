"""Tour page: each step makes its settings, shows its live view, and has a reproducing link."""
from __future__ import annotations

import json

from workbench.dispatch.versions import DEFAULT_VERSION


def test_first_step_is_the_x86_story(ui):
    at = ui.open_app("tour")
    shown = ui.text(at)
    assert "1. The docs say x86 CPU cannot run W4A8; the code picks Dynamic4bitLinearKernel" in shown
    assert "vLLM's docs say **x86 CPU** runs llm-compressor INT8 (W4A8): **NO**" in shown
    assert "[Link to step 1](./tour?step=1)" in shown
    assert at.session_state["pf.preset"] == "x86-avx512"


def test_jump_to_h200_step_and_change_a_setting(ui):
    at = ui.open_app("tour")
    at.selectbox(key="w:tour.jump").set_value(2).run()
    shown = ui.text(at)
    assert "3. On H200 every candidate rejects" in shown
    # left: edited H200 without humming (vLLM's error); right: the preset, Humming weight-only
    assert any("raises **ValueError**" in e for e in ui.errors(at))
    assert f"vLLM {DEFAULT_VERSION} selects **HummingLinearKernel**" in " ".join(s.value for s in at.success)
    # the presenter changes a setting: installing humming again changes the left side
    at.multiselect(key="w:pf.packages").set_value(["humming"]).run()
    assert not any("raises **ValueError**" in e for e in ui.errors(at))
    # Leaving the Tour puts the user's own settings back (issue 34.6: the step's H200
    # without humming followed onto the trace page, its sidebar showing the plain preset)
    at.switch_page("workbench/ui/pages/trace.py").run()
    assert at.session_state["pf.preset"] == "x86-avx512"  # what the session had before the Tour
    assert "The code picks **`Dynamic4bitLinearKernel`**" in ui.text(at)
    side = ui.unplain("\n".join(str(m.value) for m in [*at.sidebar.markdown, *at.sidebar.info]))
    assert "Back from the Tour" in side
    # back in the Tour, the step's settings are made again
    at.switch_page("workbench/ui/pages/tour.py").run()
    assert at.session_state["pf.preset"] == "sm90-h200" and at.session_state["pf.packages"] == []


def test_a_platform_edit_shows_in_the_sidebar(ui):
    at = ui.open_app("trace", state={"pf.preset": "sm90-h200"})
    at.session_state["pf.packages"] = []
    at.run()
    side = ui.unplain("\n".join(str(c.value) for c in at.sidebar.caption))
    assert "edited: packages=[]" in side


def test_step_link_reproduces_the_view_in_a_fresh_session(ui):
    at = ui.open_app("tour", query={"step": "6"})
    shown = ui.text(at)
    assert "6. A tensor-parallel shard that breaks alignment" in shown
    assert at.session_state["tp.size"] == 2
    assert "input_size_per_partition=576 is not divisible by group_size=128" in shown
    # the heatmap keeps down_proj, the layer the step is about
    heat = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]
    assert any(y.startswith("down_proj") for y in heat["y"])
    at.button(key="tour.prev").click().run()
    assert at.session_state["tour.step"] == 4
    assert at.session_state["env.VLLM_XPU_INC_WNA16_BACKEND"] == "w4a8"
    assert at.session_state["tp.size"] == 1
    assert "INCXPUW4A8LinearMethod" in ui.text(at)


def test_machete_step(ui):
    at = ui.open_app("tour", query={"step": "4"})
    shown = ui.text(at)
    assert "The code picks **`MacheteLinearKernel`**" in shown
    assert any("silently runs W4A16" in w.value for w in at.warning)


def test_sidebar_shows_the_steps_layer_on_its_first_screen(ui):
    at = ui.open_app("tour", query={"step": "5"})
    side = ui.unplain("\n".join(str(m.value) for m in at.sidebar.markdown))
    assert "autoround-w4a16-g128 / model.layers.0.mlp.down_proj" in side
    assert at.sidebar.selectbox(key="w:pf.preset:sidebar").value == "xpu"


def test_reference_path_step_measures_on_entry(ui):
    at = ui.open_app("tour", query={"step": "2"})
    assert "2. That kernel runs torch's reference path here" in ui.text(at)
    recs = at.session_state["kern.records"]
    assert {r["m"] for r in recs} == {1, 16, 64}
    assert {r["path"] for r in recs} >= {"w4a16_fallback", "w4a8_native"}
    assert ui.plotly_count(at) >= 2
