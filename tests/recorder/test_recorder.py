"""The recorded fixtures: their format, the workbench's agreement with them, and (with the
sdist at hand) that re-recording reproduces them."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workbench import dispatch
from workbench.recorder import (CASE_KEYS, FIXED_FILES, GENERATED_LEVELS, PROVENANCE_FILE,
                                read_cases)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PLATFORM_KEYS = {"device", "capability", "cpu_arch", "gfx", "zen", "amx", "packages", "torch_ops"}
LAYER_KEYS = {"quantization", "method", "inner", "error", "error_type", "kernel"}
EXPECTED_KEYS = {"gptq": LAYER_KEYS, "awq": LAYER_KEYS, "inc": LAYER_KEYS,
                 "config-gate": {"quantization", "error", "error_type"},
                 "runtime": {"route_error", "kernel", "kernel_act_type", "fails_at", "error",
                             "error_type", "load_op", "layer_state", "isa_hint", "activation"}}
KERNEL_KEYS = {"mp_config", "selected", "reasons", "error", "error_type"}


def _level_cases(level: str) -> list[dict]:
    return read_cases(FIXTURES / GENERATED_LEVELS[level][0])


@pytest.mark.parametrize("level", sorted(GENERATED_LEVELS))
def test_generated_fixture_rows_are_in_the_oracle_format(level):
    cases = _level_cases(level)
    from workbench.recorder.cases import FIXED
    assert len(cases) == GENERATED_LEVELS[level][1] + len(FIXED.get(level, []))
    assert len({c["id"] for c in cases}) == len(cases)
    for c in cases:
        assert tuple(c) == CASE_KEYS and c["level"] == level
        assert set(c["platform"]) - {"ark_backend_lib"} == PLATFORM_KEYS
        assert set(c["expected"]) == EXPECTED_KEYS[level]
        kernel = c["expected"].get("kernel")
        if isinstance(kernel, dict):
            assert KERNEL_KEYS <= set(kernel)
            assert (kernel["mp_config"] is None) == ("candidates" not in kernel)
        # an error is vLLM's exception: a type name and its text, together or not at all
        assert (c["expected"]["error"] is None) == (c["expected"]["error_type"] is None)


def test_new_levels_hold_over_1200_cases_and_every_outcome():
    cases = [c for level in GENERATED_LEVELS for c in _level_cases(level)]
    assert len(cases) >= 1200
    types = {c["expected"]["error_type"] for c in cases}
    assert {None, "ValueError", "NotImplementedError"} <= types


def test_provenance_names_every_stub():
    prov = json.loads((FIXTURES / PROVENANCE_FILE).read_text())
    assert prov["vllm_version"] == dispatch.DEFAULT_VERSION
    assert "vllm._C" in prov["stubbed_compiled"] and "conch" in prov["stubbed_optional_packages"]
    # humming runs for real (its schemas decide the activation), at the version vLLM pins
    assert prov["real_optional_packages"] == {"humming": "0.1.19"}
    assert prov["stubbed_hardware_queries"]
    assert sum(prov["files"].values()) >= 1200 + 2786


# The workbench's agreement with these cases, per level with a floor each, is
# tests/dispatch/test_oracle_levels.py (and tests/dispatch/test_oracle.py for mp and scheme).


# -- with the sdist: re-recording reproduces the committed fixtures --------------------------
SRC = os.environ.get("WORKBENCH_VLLM_SRC")


@pytest.mark.skipif(not SRC, reason="WORKBENCH_VLLM_SRC (an unpacked vLLM sdist) is not set")
def test_re_recording_reproduces_a_sample_of_every_fixture_file():
    from workbench.recorder import record_all
    files = list(FIXED_FILES) + [name for name, _ in GENERATED_LEVELS.values()]
    sample = [c for name in files for c in read_cases(FIXTURES / name)[::97]]
    committed = [c["expected"] for c in sample]
    record_all(SRC, sample)
    assert [c["expected"] for c in sample] == committed


# -- trace --against-vllm ----------------------------------------------------------------------
MP = ('{"weight_type": "int4", "act_type": "bfloat16", "group_size": 128, "zero_points": false, '
      '"out_type": null, "full_weight_shape": [4096, 4096], '
      '"partition_weight_shape": [4096, 4096]}')


@pytest.mark.parametrize("argv,message", [
    (["--mp-config", MP, "--against-vllm", "{tmp}"],
     "no PKG-INFO; expected an unpacked vLLM sdist"),
    (["--mp-config", MP, "--against-vllm", "{tmp}/nowhere"], "not a directory"),
    (["--batch", "-", "--against-vllm", "{tmp}"], "takes one case, not --batch"),
])
def test_against_vllm_refuses_what_it_cannot_compare(argv, message, tmp_path, capsys):
    from workbench.__main__ import main
    code = main(["trace"] + [a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2 and message in capsys.readouterr().err


def test_against_vllm_refuses_an_sdist_of_another_version(tmp_path, capsys):
    from workbench.__main__ import main
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 99.0.0\n")
    assert main(["trace", "--mp-config", MP, "--against-vllm", str(tmp_path)]) == 2
    assert (f"that sdist is vLLM 99.0.0, the trace used the {dispatch.DEFAULT_VERSION} rules"
            in capsys.readouterr().err)


@pytest.mark.skipif(not SRC, reason="WORKBENCH_VLLM_SRC (an unpacked vLLM sdist) is not set")
def test_against_vllm_exits_0_when_the_workbench_says_what_vllm_says(capsys):
    from workbench.__main__ import main
    assert main(["trace", "--platform", "x86-avx512", "--mp-config", MP,
                 "--against-vllm", SRC]) == 0
    assert "same as vLLM" in capsys.readouterr().out
    # A GPTQ g256 layer on an H200: the workbench and vLLM both refuse it in the same words.
    assert main(["trace", "--platform", "sm90-h200", "--gptq",
                 '{"bits": 4, "group_size": 256, "desc_act": false, "sym": true}',
                 "--against-vllm", SRC]) == 0


@pytest.mark.skipif(not SRC, reason="WORKBENCH_VLLM_SRC (an unpacked vLLM sdist) is not set")
def test_against_vllm_names_the_fields_that_differ():
    """The x86 trace held against vLLM on an H200: the kernel and the reasons differ."""
    from workbench.platforms import resolve_platform
    from workbench.recorder.against import compare
    mp = json.loads(MP)
    trace = dispatch.trace_mp(mp, "x86-avx512")
    _, diffs = compare("mp_config", mp, resolve_platform("sm90-h200"), {}, trace, SRC)
    assert [d.field for d in diffs] == ["selected", "reasons"]
    assert (diffs[0].workbench, diffs[0].vllm) == ("Dynamic4bitLinearKernel",
                                                   "HummingLinearKernel")
