"""The sidebar's vLLM version: one selector, its choice reaching every trace the pages draw."""
from __future__ import annotations

from workbench.dispatch.versions import DEFAULT_VERSION, VERSIONS


def test_the_sidebar_offers_the_versions_with_a_rule_set_and_traces_with_the_choice(ui):
    at = ui.open_app("trace")
    box = at.sidebar.selectbox(key="w:vllm.version")
    assert box.label == "vLLM version" and list(box.options) == list(VERSIONS)
    assert at.session_state["vllm.version"] == DEFAULT_VERSION
    assert f"vLLM {DEFAULT_VERSION} selects" in " ".join(s.value for s in at.success)
    # A version without a rule set (none other exists today) reaches the trace and is refused
    # there by name: the choice is what the trace runs with, not a label.
    at.session_state["vllm.version"] = "0.1.0"
    at.run()
    shown = ui.unplain(" ".join(e.value for e in at.error))
    assert "no rule set for '0.1.0'; available: " + ", ".join(VERSIONS) in shown


def test_a_link_names_the_version_and_an_unknown_one_is_refused(ui):
    at = ui.open_app("trace", query={"vllm": DEFAULT_VERSION})
    assert at.session_state["vllm.version"] == DEFAULT_VERSION
    at = ui.open_app("trace", query={"vllm": "9.9"})
    assert at.session_state["vllm.version"] == DEFAULT_VERSION
    assert any("a vLLM version with a rule set" in ui.unplain(w.value) for w in at.warning)


def test_the_model_report_traces_with_the_sidebars_version(ui):
    at = ui.open_app("report")
    assert f"what vLLM {DEFAULT_VERSION} runs" in " ".join(c.value for c in at.caption)
    at.session_state["vllm.version"] = "0.1.0"  # reaches the report's traces, refused there by name
    at.run()
    assert not at.exception
    assert "no rule set for '0.1.0'" in ui.unplain(" ".join(e.value for e in at.error))
