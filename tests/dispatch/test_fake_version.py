"""A vLLM release added beside the pinned one reaches every face: the CLI, the alignment
tables, the model report, the docs matrix and the app's pages.

The fake release is a package written into tmp_path and registered as the registry expects
one: the pinned rule set with one rule changed, `MacheteLinearKernel` dropped (the selection
loop meets it disabled, with vLLM's own words for that). On an H200 the pinned rules pick
Machete for a W4A16 GPTQ layer; the fake picks the next candidate. A face shows the fake only
if the trace it draws was made by the rule set it was handed.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from workbench.__main__ import main
from workbench.dispatch import trace_mp, versions
from workbench.dispatch.versions import DEFAULT_VERSION

ROOT = Path(__file__).resolve().parents[2]
GPTQ = ROOT / "sample_models" / "gptq-w4a16-g128"
FAKE = "0.99.0"
DROPPED = "MacheteLinearKernel"
DISABLED = f" {DROPPED} disabled by environment variable"  # selector.py's text for a disabled kernel
SHARD = {"weight_type": "uint4b8", "act_type": "bfloat16", "group_size": 128, "zero_points": False,
         "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 4096]}

_RULES = f'''
"""A fake next release: the pinned rules, but {DROPPED} is gone. It states only that."""
import dataclasses

from workbench.dispatch.versions import pinned, takes_rules

_base = pinned()


@takes_rules
def choose_mp_linear_kernel(R, c, p, e, trace=None):
    # every level's selection goes through the rule set it runs under, so this one change
    # reaches the scheme, GPTQ, AWQ and INC traces too
    e = dataclasses.replace(e, disabled_kernels=(*e.disabled_kernels, {DROPPED!r}))
    return _base.entries["choose_mp_linear_kernel"](R, c, p, e, trace)


RULES = _base.derive({FAKE!r}, __package__, choose_mp_linear_kernel=choose_mp_linear_kernel)
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake release's rule set, registered for the test."""
    pkg = tmp_path / "wb_fake_vllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "rules.py").write_text(_RULES)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(versions.RULE_SETS, FAKE, "wb_fake_vllm")
    yield versions.rule_set(FAKE)
    for name in [m for m in sys.modules if m.startswith("wb_fake_vllm")]:
        del sys.modules[name]


def test_the_registry_builds_the_fake_as_one_value(fake):
    assert fake.version == FAKE and fake.package == "wb_fake_vllm"
    assert versions.rule_set(FAKE) is fake and FAKE in versions.available()
    assert fake.ENV is versions.pinned().ENV  # what it did not change is the pinned release's
    t = trace_mp(SHARD, "sm90-h200", rules=fake)
    assert t.rules is fake and t.vllm_version == FAKE
    assert trace_mp(SHARD, "sm90-h200").rules is versions.pinned()


def test_cli_trace_takes_the_fake_version(fake, capsys):
    args = ["trace", "--mp-config", json.dumps(SHARD), "--platform", "sm90-h200", "--json"]
    assert main([*args, "--vllm-version", FAKE]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["vllm_version"] == FAKE
    assert {"kernel": DROPPED, "outcome": "disabled", "reason": DISABLED} in out["steps"]
    assert main(args) == 0
    pinned = json.loads(capsys.readouterr().out)
    assert pinned["vllm_version"] == DEFAULT_VERSION
    assert DISABLED not in [s["reason"] for s in pinned["steps"]]


def test_the_alignment_tables_ask_the_rule_set_of_the_trace(fake):
    from workbench.alignment import kernel_verdicts, padding_rows, shard_rows

    v = kernel_verdicts(trace_mp(SHARD, "sm90-h200", rules=fake), "sm90-h200", {})
    assert v[DROPPED] == ("disabled", DISABLED)
    assert kernel_verdicts(trace_mp(SHARD, "sm90-h200"), "sm90-h200", {})[DROPPED][0] != "disabled"
    from workbench.checkpoints import list_layers

    rows = shard_rows(list_layers(GPTQ), "sm90-h200", {}, 1, version=fake)
    assert rows and all(r["verdicts"][DROPPED] == ("disabled", DISABLED) for r in rows)
    assert padding_rows("N", 4096, 4096, [8], 128, fake) == padding_rows("N", 4096, 4096, [8], 128)


def test_the_model_report_traces_with_the_fake(fake):
    from workbench.perf.report import model_report

    pinned = model_report(str(GPTQ), "sm90-h200")
    other = model_report(str(GPTQ), "sm90-h200", version=FAKE)
    assert {r.kernel for r in pinned.layers} == {DROPPED}
    assert other.vllm_version == FAKE and other.layers
    assert all(r.kernel and r.kernel != DROPPED for r in other.layers)


def test_the_docs_matrix_is_computed_by_the_fake(fake):
    from workbench import plots
    from workbench.dispatch.docs_matrix import compute_matrix

    def hopper(rows, row):
        return next(c for r in rows if r["implementation"] == row for c in r["cells"]
                    if c["hardware"] == "Hopper")

    pinned, other = compute_matrix(), compute_matrix(None, fake)
    assert hopper(pinned, "GPTQ")["selected"] == DROPPED
    assert hopper(other, "GPTQ")["selected"] not in (None, DROPPED)
    assert f"{FAKE} code selects" in plots.docs_matrix_figure(other, fake).layout.title.text


def test_a_traces_notes_are_the_rule_sets_that_made_it():
    """The notes the trace page adds (vLLM's surprises) are the release's, not the page's."""
    import dataclasses

    pytest.importorskip("streamlit")
    from workbench.ui import widgets

    env = {"VLLM_DISABLED_KERNELS": "A, B"}
    t = trace_mp(SHARD, "sm90-h200", env)
    assert any("split on commas and not stripped" in n for n in widgets.ambiguity_notes(t, env))
    other = versions.pinned().derive("x", "x", ambiguity_notes=lambda t, e: ["another note"])
    assert widgets.ambiguity_notes(dataclasses.replace(t, rules=other), env) == ["another note"]


# --------------------------------------------------------------------------- the app's pages


def _app(page: str, version: str, preset: str):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["pf.preset"] = preset
    at.session_state["vllm.version"] = version
    at.session_state["layer.sample"] = GPTQ.name
    at.run()
    at.switch_page(f"workbench/ui/pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _shown(at) -> str:
    """What the page says (main and sidebar), its markdown escapes undone."""
    import re

    kinds = ("title", "header", "subheader", "markdown", "caption", "success", "info", "warning",
             "error", "code", "text")
    said = " ".join(str(e.value) for kind in kinds for e in getattr(at, kind))
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", said).replace("\u2060", "")


@pytest.fixture
def raising(monkeypatch):
    monkeypatch.setenv("WORKBENCH_UI_RAISE", "1")  # a page's bug raises instead of a red box


def _said(at) -> str:
    """The page's words and its tables' cells."""
    return _shown(at) + " ".join(d.value.to_string() for d in at.dataframe)


# page, platform preset, what it says under the fake release, what under the pinned one
PAGES = [
    ("trace", "sm90-h200", f"vLLM {FAKE} selects **HummingLinearKernel**",
     f"vLLM {DEFAULT_VERSION} selects **{DROPPED}**"),
    ("alignment", "sm90-h200", f"disabled: {DISABLED}", "SELECTED"),
    # the Kernels page traces this machine, which a release may refuse (an x86 CPU without
    # triton-cpu): either way the sentence names the release that traced it
    ("kernels", "x86-avx512", f"vLLM {FAKE} ", f"vLLM {DEFAULT_VERSION} "),
    ("report", "sm90-h200", f"what vLLM {FAKE} runs", f"what vLLM {DEFAULT_VERSION} runs"),
    ("docs", "sm90-h200", f"vLLM {FAKE} rules select", f"vLLM {DEFAULT_VERSION} rules select"),
]


@pytest.mark.parametrize("page, preset, fake_says, pinned_says", PAGES, ids=[p[0] for p in PAGES])
def test_the_sidebars_version_reaches_every_page(fake, raising, page, preset, fake_says,
                                                 pinned_says):
    at = _app(page, FAKE, preset)
    assert FAKE in at.sidebar.selectbox(key="w:vllm.version").options
    said = _said(at)
    assert fake_says in said and DEFAULT_VERSION not in _shown(at)
    pinned = _said(_app(page, DEFAULT_VERSION, preset))
    assert pinned_says in pinned and FAKE not in pinned and DISABLED not in pinned
