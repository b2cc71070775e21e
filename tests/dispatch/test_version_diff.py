"""What changes for a layer when vLLM is upgraded: the version diff, in the core and the CLI.

The releases are read from the registry (the oldest and the newest), never written out.
"""
from __future__ import annotations

import json

import pytest

from workbench.__main__ import main
from workbench.dispatch import trace_mp
from workbench.dispatch.version_diff import version_diff
from workbench.dispatch.versions import available, rule_set

OLD, NEW = available()[0], available()[-1]
INT8 = {"weight_type": "uint4b8", "act_type": "int8", "group_size": 128, "zero_points": False,
        "full_weight_shape": [4096, 4096]}
BF16 = {**INT8, "act_type": "bfloat16"}
pytestmark = pytest.mark.skipif(OLD == NEW, reason="one release has a rule set")


def _diff(config, platform, env=None):
    return version_diff(trace_mp(config, platform, env, rules=OLD),
                        trace_mp(config, platform, env, rules=NEW), env)


def _change(rule: str):
    return next(c for c in rule_set(NEW).changes if c.rule == rule)


@pytest.mark.parametrize("platform", ["sm80-a100", "sm89-l40s"])
def test_marlin_refuses_int8_activations_after_the_upgrade(platform):
    d = _diff(INT8, platform)
    step = next(r for r in d.rows if r.aspect == "step" and r.subject == "MarlinLinearKernel")
    assert step.old == "selected"
    assert step.new == "rejected: Marlin does not support 8-bit activations"
    change = _change("MarlinLinearKernel")
    assert change.was in step.old_source and change.source in step.new_source
    selected = next(r for r in d.rows if r.aspect == "selected")
    assert (selected.old, selected.new) == ("MarlinLinearKernel", "HummingLinearKernel")
    activation = next(r for r in d.rows if r.subject == "activation")
    assert activation.old == "int8" and activation.new != "int8"  # Humming falls back to 16-bit
    text = d.to_text()
    assert change.source in text and change.was in text


def test_conch_refuses_int8_on_rocm_and_the_layer_no_longer_loads():
    d = _diff(INT8, "rocm-mi300x")
    step = next(r for r in d.rows if r.subject == "ConchLinearKernel")
    assert step.old == "selected"
    assert step.new == "rejected: ConchLinearKernel only supports 16-bit activations"
    error = next(r for r in d.rows if r.aspect == "error")
    assert error.old is None and error.new.startswith("ValueError: Failed to find a kernel")


def test_no_change_where_the_releases_agree():
    d = _diff(BF16, "sm90-h200")
    assert not d.changed and d.rows == () and d.to_text().strip() == "no change"
    assert d.to_json() == {"old_version": OLD, "new_version": NEW, "changed": False, "rows": []}


def test_a_removed_env_variable_is_a_row_with_its_sources():
    env = {"VLLM_MARLIN_INPUT_DTYPE": "int8"}
    d = _diff(BF16, "sm80-a100", env)
    row = next(r for r in d.rows if r.aspect == "env")
    assert row.subject == "VLLM_MARLIN_INPUT_DTYPE" and row.new.startswith("removed: ")
    error = next(r for r in d.rows if r.aspect == "error")
    assert error.new.startswith("ValueError: VLLM_MARLIN_INPUT_DTYPE has been removed.")
    assert _diff(BF16, "sm80-a100").rows == ()  # unset, nothing to say about it


def test_cli_prints_each_platform_with_both_releases_sources(capsys):
    assert main(["trace", "--versions", f"{OLD},{NEW}", "--platforms", "sm80-a100,sm90-h200",
                 "--mp-config", json.dumps(INT8)]) == 0
    out = capsys.readouterr().out
    a100, h200 = out.split("on sm90-h200:")
    assert "on sm80-a100:" in a100 and "Marlin does not support 8-bit activations" in a100
    assert f"{OLD}: {_change('MarlinLinearKernel').was}" in a100
    assert h200.strip() == "no change"
    assert main(["trace", "--versions", f"{OLD},{NEW}", "--json", "--mp-config",
                 json.dumps(INT8), "--platform", "sm89-l40s"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["changed"] and row["platform"] == "sm89-l40s" and row["new_version"] == NEW


def test_cli_diffs_every_layer_of_a_checkpoint(capsys):
    assert main(["trace", "--versions", f"{OLD},{NEW}", "--checkpoint",
                 "sample_models/gptq-w4a16-g128", "--platform", "sm90-h200"]) == 0
    out = capsys.readouterr().out
    assert out.count(" on sm90-h200:") == 7 and out.count("no change") == 7


@pytest.mark.parametrize("value,message", [
    ("0.1.0", "expected two different versions"),
    ("a,a", "expected two different versions"),
    ("0.1.0,9.9.9", "no rule set for"),
])
def test_cli_refuses_versions_it_cannot_compare(value, message, capsys):
    assert main(["trace", "--versions", value, "--mp-config", json.dumps(INT8)]) == 2
    assert message in capsys.readouterr().err


def test_report_versions_lists_each_layer_of_a_model(capsys):
    assert main(["report", "Qwen2.5-7B", "--platform", "sm80-a100", "--versions",
                 f"{OLD},{NEW}"]) == 0
    out = capsys.readouterr().out
    assert f"vLLM {OLD} -> {NEW}" in out and out.count(": no change") == 4
    assert main(["report", "Qwen2.5-7B", "--platform", "sm80-a100", "--versions",
                 f"{OLD},{NEW}", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert (rep["old_version"], rep["new_version"]) == (OLD, NEW)
    assert len(rep["layers"]) == 4 and all(r["changed"] == {} for r in rep["layers"])


def test_matrix_is_computed_for_the_release_asked_for(capsys):
    for version in (OLD, NEW):
        assert main(["matrix", "--vllm-version", version, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["rows"]


def test_an_engine_refusal_is_one_error_row_not_every_step():
    """An x86 CPU without triton-cpu: the newer release stops at config time, so the diff says
    that (with the change's file:line in both releases), not each step it never walked."""
    d = _diff(BF16, {"preset": "x86-avx512", "triton": False})
    assert [r.aspect for r in d.rows] == ["selected", "error"]
    error = d.rows[1]
    assert error.new == "RuntimeError: vLLM on x86 CPUs requires Triton (triton-cpu)."
    change = _change("engine_start")
    assert change.source in error.new_source and change.was in error.old_source
    assert not _diff(BF16, "x86-avx512").changed  # a standard install brings triton-cpu
