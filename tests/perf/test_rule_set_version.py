"""`predict` and `report` trace with the vLLM rule set the user picked, not the default one."""
from __future__ import annotations

import inspect
import json
import sys

import pytest

from workbench.__main__ import main
from workbench.dispatch import versions
from workbench.dispatch.versions import DEFAULT_VERSION, UnknownVersionError
from workbench.perf.predict import predict
from workbench.perf.selected import predict_paths, predict_selected
from workbench.perf.report import model_report

OTHER = "9.9.9"
# A rule set that is the default one but for its name and its compressed-tensors answer: a
# trace that reaches it says so in the error, so a result can only carry it if it went there.
_RULES = f'''
import importlib
from workbench.dispatch.trace import Trace
_base = importlib.import_module({{base!r}} + ".rules")
globals().update({{{{k: v for k, v in vars(_base).items() if not k.startswith("__")}}}})
VLLM_VERSION = {OTHER!r}


def trace_compressed_tensors(s, p, e):
    return Trace(level="scheme", error="traced by the {OTHER} rules", error_type="ValueError")
'''
_ENV_RULES = '''
import importlib
_base = importlib.import_module({base!r} + ".env_rules")
globals().update({{k: v for k, v in vars(_base).items() if not k.startswith("__")}})
'''


@pytest.fixture
def other_version(tmp_path, monkeypatch):
    pkg = tmp_path / "wb_other_rules"
    pkg.mkdir()
    base = versions.RULE_SETS[DEFAULT_VERSION]
    (pkg / "__init__.py").write_text("")
    (pkg / "rules.py").write_text(_RULES.format(base=base))
    (pkg / "env_rules.py").write_text(_ENV_RULES.format(base=base))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(versions.RULE_SETS, OTHER, "wb_other_rules")
    yield OTHER
    for name in [m for m in sys.modules if m.startswith("wb_other_rules")]:
        del sys.modules[name]


def test_predict_selected_is_traced_with_the_version_asked_for(other_version):
    default = predict_selected("sm90-h200", 16, 4096, 4096, 128)
    assert default.predicted_us is not None and "9.9.9" not in default.note
    other = predict_selected("sm90-h200", 16, 4096, 4096, 128, version=other_version)
    assert other.predicted_us is None and other.note.endswith("traced by the 9.9.9 rules")
    # an execution path's cost traces nothing, so it takes no rule set at all
    assert "version" not in inspect.signature(predict).parameters


def test_report_traces_every_layer_with_the_version_and_names_it(other_version):
    rep = model_report("Qwen2.5-7B", "sm80-a100", version=other_version)
    assert rep.vllm_version == other_version and rep.to_json()["vllm_version"] == other_version
    assert all(r.error == "traced by the 9.9.9 rules" for r in rep.layers)
    assert model_report("Qwen2.5-7B", "sm80-a100").vllm_version == DEFAULT_VERSION


def test_an_unknown_version_is_the_named_error_for_every_path():
    with pytest.raises(UnknownVersionError, match="no rule set for '0.1.0'; available: "):
        predict_selected("sm90-h200", 1, 4096, 4096, 128, version="0.1.0")
    with pytest.raises(UnknownVersionError, match="no rule set for '0.1.0'; available: "):
        predict_paths("sm90-h200", ["w4a8_native"], [1], 4096, 4096, 128, version="0.1.0")
    with pytest.raises(UnknownVersionError, match="no rule set for '0.1.0'"):
        model_report("Qwen2.5-7B", "sm80-a100", version="0.1.0")


def test_cli_predict_and_report_take_the_version_option(capsys):
    assert main(["predict", "--n", "256", "--k", "256", "--m", "1", "--paths", "selected",
                 "--vllm-version", DEFAULT_VERSION, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == "selected"
    assert main(["report", "Qwen2.5-7B", "--vllm-version", DEFAULT_VERSION, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vllm_version"] == DEFAULT_VERSION
    for cmd in (["predict", "--n", "256", "--k", "256"], ["report", "Qwen2.5-7B"]):
        assert main([*cmd, "--vllm-version", "0.1.0"]) == 2
        assert "--vllm-version: invalid choice: '0.1.0'" in capsys.readouterr().err
