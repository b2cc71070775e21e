"""The recorded fixtures: their format, the workbench's agreement with them, and (with the
sdist at hand) that re-recording reproduces them."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from workbench import dispatch
from workbench.recorder import (CASE_KEYS, FIXED_FILES, GENERATED_LEVELS, PROVENANCE_FILE,
                                read_cases)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PLATFORM_KEYS = {"device", "capability", "cpu_arch", "gfx", "zen", "amx", "packages", "torch_ops"}
LAYER_KEYS = {"quantization", "method", "inner", "error", "error_type", "kernel"}
EXPECTED_KEYS = {"gptq": LAYER_KEYS, "awq": LAYER_KEYS, "inc": LAYER_KEYS,
                 "config-gate": {"quantization", "error", "error_type"}}
KERNEL_KEYS = {"mp_config", "selected", "reasons", "error", "error_type"}


def _level_cases(level: str) -> list[dict]:
    return read_cases(FIXTURES / GENERATED_LEVELS[level][0])


@pytest.mark.parametrize("level", sorted(GENERATED_LEVELS))
def test_generated_fixture_rows_are_in_the_oracle_format(level):
    cases = _level_cases(level)
    assert len(cases) == GENERATED_LEVELS[level][1]
    assert len({c["id"] for c in cases}) == len(cases)
    for c in cases:
        assert tuple(c) == CASE_KEYS and c["level"] == level
        assert set(c["platform"]) == PLATFORM_KEYS
        assert set(c["expected"]) == EXPECTED_KEYS[level]
        kernel = c["expected"].get("kernel")
        if kernel is not None:
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
    assert "vllm._C" in prov["stubbed_compiled"] and "humming" in prov["stubbed_optional_packages"]
    assert prov["stubbed_hardware_queries"]
    assert sum(prov["files"].values()) >= 1200 + 2786


# -- agreement of the workbench's model with the recorded cases, per level -------------------
def _outcome(expected: dict) -> dict:
    """What a trace must reproduce: vLLM's error (at config, method or weight creation) and,
    where the MP loop ran, its kernel and reasons."""
    kernel = expected.get("kernel") or {}
    err = (expected["error"], expected["error_type"])
    if err == (None, None) and kernel.get("error_type"):
        err = (kernel["error"], kernel["error_type"])
    out = {"error": (_canonical(err[0]), err[1])}
    if kernel.get("mp_config") is not None:
        out["selected"], out["reasons"] = kernel["selected"], kernel["reasons"]
    return out


_SET = re.compile(r"\{('[^'{}]*'(?:, '[^'{}]*')*)\}")


def _canonical(text: str | None) -> str | None:
    """vLLM prints some accepted values as a Python set, whose order follows the process's
    string hashes: the same run of vLLM can print them in another order, so compare them
    sorted."""
    if text is None:
        return None
    return _SET.sub(lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", text)


def _trace_outcome(t, expected: dict) -> dict:
    out = {"error": (_canonical(t.error), t.error_type)}
    if "selected" in expected:
        out["selected"], out["reasons"] = t.selected, list(t.reasons)
    return out


def _layer_agrees(tracer):
    def agrees(case: dict) -> bool:
        want = _outcome(case["expected"])
        try:
            t = tracer(case["input"], case["platform"], case["env"])
        except Exception:  # a refusal of the workbench's own counts as disagreement
            return False
        return _trace_outcome(t, want) == want
    return agrees


def _gate_agrees(case: dict) -> bool:
    from workbench.dispatch.versions import rules
    from workbench.platforms import resolve_platform
    gate = getattr(rules(), "trace_config_gate", None)
    if gate is None:
        return False
    data = {**case["input"], "quantization": case["expected"]["quantization"]}
    try:
        t = gate(data, resolve_platform(case["platform"]))
    except Exception:
        return False
    return ((_canonical(t.error), t.error_type)
            == (_canonical(case["expected"]["error"]), case["expected"]["error_type"]))


AGREES = {"gptq": _layer_agrees(getattr(dispatch, "trace_gptq", None)),
          "awq": _layer_agrees(getattr(dispatch, "trace_awq", None)),
          "inc": _layer_agrees(dispatch.trace_inc), "config-gate": _gate_agrees}
# The floor each level must keep: what agreed when these cases were recorded (see the report
# printed by the test). Raise it as the modelling lands.
FLOOR = {"gptq": 0.0, "awq": 0.0, "inc": 0.0, "config-gate": 0.0}


def agreement(level: str) -> float:
    cases = _level_cases(level)
    return sum(AGREES[level](c) for c in cases) / len(cases)


@pytest.mark.parametrize("level", sorted(GENERATED_LEVELS))
def test_agreement_per_level_keeps_its_floor(level):
    got = agreement(level)
    print(f"{level}: {got:.1%} of {GENERATED_LEVELS[level][1]} recorded cases agree")
    assert got >= FLOOR[level]


# -- with the sdist: re-recording reproduces the committed fixtures --------------------------
SRC = os.environ.get("WORKBENCH_VLLM_SRC")


@pytest.mark.skipif(not SRC, reason="WORKBENCH_VLLM_SRC (an unpacked vLLM sdist) is not set")
def test_re_recording_reproduces_a_sample_of_every_fixture_file():
    from workbench.recorder import open_vllm, record_case
    rec, vllm = open_vllm(SRC)
    files = list(FIXED_FILES) + [name for name, _ in GENERATED_LEVELS.values()]
    for name in files:
        for case in read_cases(FIXTURES / name)[::97]:
            assert record_case(rec, vllm, case) == case["expected"], (name, case["id"])
