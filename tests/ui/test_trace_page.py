"""Platform and trace page: editing the platform and env changes the trace that is shown."""
from __future__ import annotations

import json

HEADER = "Failed to find a kernel that can implement the WNA16 linear layer. Reasons: \n"


def test_landing_page_tells_the_x86_story(ui):
    at = ui.open_app()  # the landing page is the trace page
    shown = ui.text(at)
    assert "vLLM's docs say **x86 CPU** runs llm-compressor INT8 (W4A8): **NO**" in shown
    assert "The code picks **`Dynamic4bitLinearKernel`**" in shown
    assert "ct-w4a8-int-g128 / model.layers.0.mlp.down_proj" in shown
    assert any("Dynamic4bitLinearKernel" in s.value for s in at.success)
    # The scheme predicates are listed in vLLM's order, the matching one (highlighted) last here.
    table = next(m.value for m in at.markdown if m.value.startswith("| # | predicate"))
    rows = table.splitlines()[2:]
    assert len(rows) == 14 and sum("**yes**" in r for r in rows) == 1
    assert rows[-1].startswith("| :green[14] | :green[`_is_dynamic_token_w4a8_int(weight, input)`]")
    assert ":green[`CompressedTensorsW4A8Int`]" in rows[-1]
    assert not ui.errors(at)


def test_preset_change_reaches_h200_humming_weight_only(ui):
    at = ui.open_app("trace")
    at.selectbox(key="w:pf.preset:trace").set_value("sm90-h200").run()
    shown = ui.text(at)
    assert "The code picks **`HummingLinearKernel`**" in shown
    assert "Hopper" in shown
    assert any("runs weight-only" in w.value for w in at.warning)
    # Humming is third on SM90: Cutlass and Machete reject first, with vLLM's reasons.
    assert "CUTLASS W4A8 only supports FP8 (e4m3) activations" in shown
    assert "Quant type (int4) not supported by Machete" in shown


def test_removing_humming_shows_vllms_exact_error(ui):
    at = ui.open_app("trace", state={"pf.preset": "sm90-h200"})
    at.multiselect(key="w:pf.packages").set_value([]).run()
    assert any("raises **ValueError**" in e for e in ui.errors(at))
    exact = [c.value for c in at.code if c.value.startswith(HEADER)]
    assert len(exact) == 2  # the trace, and its left column in the side-by-side view
    lines = exact[0][len(HEADER):].split("\n")
    assert len(lines) == 7  # every candidate of the SM90 list rejects
    assert lines[2] == " HummingLinearKernel cannot implement due to: Humming is not installed"
    assert "Edited from the preset: packages=[]" in ui.text(at)


def test_step_through_candidates(ui):
    at = ui.open_app("trace", state={"pf.preset": "sm90-h200", "pf.packages": []})
    assert "showing 7 of 7" in ui.text(at)
    at.button(key="trace.first").click().run()
    assert "showing 1 of 7" in ui.text(at)
    assert "**2. `MacheteLinearKernel`**" not in ui.text(at).split("Two platforms")[0]
    at.button(key="trace.next").click().run()
    at.button(key="trace.next").click().run()
    shown = ui.text(at).split("Two platforms")[0]
    assert "showing 3 of 7" in shown
    assert "**3. `HummingLinearKernel`** · :red[rejected]" in shown
    at.button(key="trace.back").click().run()
    assert "showing 2 of 7" in ui.text(at)
    at.button(key="trace.all").click().run()
    assert "showing 7 of 7" in ui.text(at)


def test_stepper_buttons_match_the_position_they_show(ui):
    at = ui.open_app("trace", state={"pf.preset": "sm90-h200", "pf.packages": []})
    disabled = lambda: {k: at.button(key=f"trace.{k}").disabled for k in ("first", "back", "next", "all")}
    assert disabled() == {"first": False, "back": False, "next": True, "all": True}
    at.button(key="trace.first").click().run()
    assert disabled() == {"first": True, "back": True, "next": False, "all": False}
    at.button(key="trace.next").click().run()
    assert "showing 2 of 7" in ui.text(at)
    assert disabled() == {"first": False, "back": False, "next": False, "all": False}
    at.button(key="trace.play").click().run()
    assert "showing 7 of 7" in ui.text(at)
    assert disabled()["next"] and not disabled()["back"]


def test_a_new_trace_opens_with_every_candidate_shown(ui):
    # Issue 13.2: the position of the last trace hid sm90-h200's selected Humming kernel.
    import re

    at = ui.open_app("trace", state={"pf.preset": "rocm-mi300x"})
    at.button(key="trace.first").click().run()
    assert "showing 1 of" in ui.text(at)
    at.selectbox(key="w:pf.preset:sidebar").set_value("sm90-h200").run()
    shown = ui.text(at).split("Two platforms")[0]
    assert "showing 3 of 3" in shown and "**3. `HummingLinearKernel`** · :green[**selected**]" in shown
    at.button(key="trace.first").click().run()
    at.selectbox(key="w:pf.preset:sidebar").set_value("rocm-mi300x").run()
    (n, total), = re.findall(r"showing (\d+) of (\d+)", ui.text(at))
    assert n == total and int(n) > 1


def test_env_knobs_change_the_trace_and_flag_vllm_quirks(ui):
    at = ui.open_app("trace", state={"pf.preset": "sm90-h200"})
    at.text_input(key="w:env.VLLM_DISABLED_KERNELS").set_value("HummingLinearKernel").run()
    assert any("raises **ValueError**" in e for e in ui.errors(at))
    assert "HummingLinearKernel`** · :orange[disabled by env]" in ui.text(at)
    # vLLM does not strip the names: " HummingLinearKernel" disables nothing.
    at.text_input(key="w:env.VLLM_DISABLED_KERNELS").set_value("MacheteLinearKernel, HummingLinearKernel").run()
    assert "The code picks **`HummingLinearKernel`**" in ui.text(at)
    assert any("not stripped" in w.value for w in at.warning)
    # linear_backend keeps one kernel: Marlin alone rejects int4.
    at.text_input(key="w:env.VLLM_DISABLED_KERNELS").set_value("").run()
    at.selectbox(key="w:env.linear_backend").set_value("marlin").run()
    assert "MarlinLinearKernel" in ui.text(at) and "raises **ValueError**" in " ".join(ui.errors(at))
    assert "Candidates in vLLM's order here: MarlinLinearKernel\n" in ui.text(at) + "\n"


def test_invalid_env_value_is_a_readable_error_and_the_app_keeps_working(ui):
    at = ui.open_app("trace")
    at.text_input(key="w:env.linear_backend_per_quant").set_value("{not json").run()
    assert ui.errors(at) == ['env linear_backend_per_quant: expected a JSON object such as '
                          '{"mixed_precision": "marlin"}']
    assert not at.exception
    at.text_input(key="w:env.linear_backend_per_quant").set_value("").run()
    assert not ui.errors(at)
    assert "Dynamic4bitLinearKernel" in ui.text(at)


def test_platform_fields_edit_the_dispatch(ui):
    at = ui.open_app("trace")
    # The same preset on Arm without the aten op: Dynamic4bit rejects, CPUWNA16 rejects int4.
    at.selectbox(key="w:pf.cpu_arch").set_value("arm").run()
    at.multiselect(key="w:pf.torch_ops").set_value([]).run()
    shown = ui.text(at)
    assert "Dynamic4bitLinearKernel`** · :red[rejected]" in shown
    assert "ZentorchWNA16 requires an AMD Zen CPU." in shown
    assert any("raises **ValueError**" in e for e in ui.errors(at))
    at.button(key="pf.reset").click().run()
    assert "The code picks **`Dynamic4bitLinearKernel`**" in ui.text(at)


def test_side_by_side_lists_platform_and_loop_differences(ui):
    at = ui.open_app("trace")
    at.selectbox(key="w:pf.compare").set_value("xpu").run()
    tables = [m.value for m in at.markdown if m.value.startswith("| field |") or m.value.startswith("| kernel |")]
    diff, loop = tables
    assert "| device | cpu | xpu |" in diff.splitlines()
    assert "| XPUW4A8IntLinearKernel | not a candidate | selected |" in loop.splitlines()


def test_exports_and_link_reproduce_the_view(ui):
    at = ui.open_app("trace", state={"pf.preset": "sm90-h200", "env.VLLM_DISABLED_KERNELS": "MacheteLinearKernel"})
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Export trace JSON", "Export trace Markdown"]
    link = next(m.value for m in at.markdown if m.value.startswith("[Link to this view]"))
    query = dict(p.split("=", 1) for p in link.split("?", 1)[1].rstrip(")").split("&"))
    assert query["platform"] == "sm90-h200"
    # Open the link's parameters in a fresh session: the same trace comes back.
    from urllib.parse import unquote_plus

    fresh = ui.open_app(query={k: unquote_plus(v) for k, v in query.items()})
    assert fresh.session_state["pf.preset"] == "sm90-h200"
    assert json.loads(unquote_plus(query["env"])) == {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"}
    assert "MacheteLinearKernel`** · :orange[disabled by env]" in ui.text(fresh)


def test_headline_cites_the_docs_row_of_the_checkpoints_scheme(ui):
    # Issue 13.5: a GPTQ W4A16 layer on Arm was held against the llm-compressor W4A8 row.
    at = ui.open_app("trace", state={"layer.sample": "gptq-w4a16-g128", "pf.preset": "arm-kleidiai"})
    head = next(m.value for m in at.markdown if m.value.startswith("#### "))
    assert head.startswith("#### vLLM's docs say **Arm CPU** runs GPTQ: **NO**. The code picks")
    at.selectbox(key="w:pf.preset:sidebar").set_value("sm100-b200").run()
    head = next(m.value for m in at.markdown if m.value.startswith("#### "))
    assert head.startswith("#### vLLM's docs table has no column for this platform (GPTQ row).")
    at.session_state["layer.sample"] = "autoround-w4a16-g128"
    at.run()
    head = next(m.value for m in at.markdown if m.value.startswith("#### "))
    assert head.startswith("#### vLLM's docs table has no row for this layer's scheme.")


def test_the_upgrade_view_shows_what_the_newer_release_changes(ui):
    from workbench.dispatch.versions import available

    old, new = available()[0], available()[-1]
    # W4A8-int on an A100: the first release's Marlin runs it with int8 activations; the
    # newest refuses every 8-bit activation first (marlin.py:40-41)
    at = ui.open_app("trace", state={"pf.preset": "sm80-a100", "vllm.version": new, "pf.compare_versions": True})
    shown = ui.text(at)
    assert "What changes when you upgrade vLLM" in shown
    table = next(d.value for d in at.dataframe if f"vLLM {old}" in d.value.columns)
    assert len(table) >= 1 and f"vLLM {new}" in table.columns
    assert table[f"{new} source"].str.contains("marlin.py:40-41").any(), table.to_dict()
    # on an H200 the two releases pick the same kernel for this layer
    at = ui.open_app("trace", state={"pf.preset": "sm90-h200", "vllm.version": new, "pf.compare_versions": True})
    assert f"No change: vLLM {new} answers this layer on this platform as {old} does." in ui.text(at)
    assert not ui.errors(at)
