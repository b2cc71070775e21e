"""A trace is a value: frozen, built by the selection loop and returned, never patched."""
from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from workbench.dispatch import (Level, Outcome, Stage, Step, Trace, trace_awq, trace_gptq,
                                trace_inc, trace_mp, trace_scheme)
from workbench.dispatch import parse_env
from workbench.dispatch.types import MPConfig
from workbench.dispatch.versions import rules
from workbench.platforms import resolve_platform

from tests.dispatch.conftest import fixtures

FIXTURES = fixtures()  # the default release's, which the traces below run under
GPTQ = {"weight_type": "uint4b8", "act_type": "bfloat16", "group_size": 128, "zero_points": False,
        "out_type": None, "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 4096]}
W4A16 = {"format": "pack-quantized", "in_features": 4096, "out_features": 4096,
         "input_size_per_partition": 4096, "output_size_per_partition": 4096,
         "params_dtype": "bfloat16", "layer_name": "model.layers.0.mlp.down_proj",
         "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                     "group_size": 128, "dynamic": False},
         "input_activations": None}


def test_a_trace_cannot_be_mutated():
    t = trace_mp(GPTQ, "sm90-h200")
    assert t.selected == "MacheteLinearKernel"
    for name, value in (("selected", "HummingLinearKernel"), ("error", "no"), ("level", "scheme"),
                        ("reached", Stage.RESOLVE), ("vllm_version", "9.9.9")):
        with pytest.raises(FrozenInstanceError):
            setattr(t, name, value)
    with pytest.raises(AttributeError):  # tuples: no append, no extend
        t.notes.append("patched")
    with pytest.raises(FrozenInstanceError):
        t.steps[0].outcome = Outcome.SELECTED
    assert t == trace_mp(GPTQ, "sm90-h200")  # and equal to the same trace, traced again


def test_a_list_handed_in_is_copied_not_kept():
    notes, steps = ["vLLM said so"], [Step("MarlinLinearKernel", "selected", None)]
    t = Trace(level="scheme", notes=notes, steps=steps)
    notes.append("later")
    steps.clear()
    assert t.notes == ("vLLM said so",) and len(t.steps) == 1
    assert t.level is Level.SCHEME and t.steps[0].outcome is Outcome.SELECTED


def test_the_selector_returns_a_new_trace_and_leaves_its_input_alone():
    r = rules()
    cfg, p, env = MPConfig.from_json(GPTQ), resolve_platform("sm90-h200"), parse_env(None)
    before = Trace(level=Level.SCHEME, scheme="CompressedTensorsWNA16", notes=("before",),
                   reached=Stage.CREATE_WEIGHTS)
    after = r.choose_mp_linear_kernel(cfg, p, env, before)
    assert after is not before
    assert before == Trace(level=Level.SCHEME, scheme="CompressedTensorsWNA16",
                           notes=("before",), reached=Stage.CREATE_WEIGHTS)
    assert (after.level, after.scheme, after.reached) == (Level.SCHEME, "CompressedTensorsWNA16",
                                                          Stage.KERNEL_LOOP)
    assert after.notes == ("before", "Using MacheteLinearKernel for mixed-precision linear")
    assert after.mp_config == cfg and after.selected == "MacheteLinearKernel"
    assert after.runtime_detail is not None and after.runtime_detail.method == after.selected
    # with no trace given, the loop's own MP-level trace, the same walk
    alone = r.choose_mp_linear_kernel(cfg, p, env)
    assert alone.level is Level.MP and alone.steps == after.steps
    assert alone.candidates == after.candidates and alone.reasons == after.reasons


def test_the_public_traces_are_returned_whole():
    """Every level's trace comes back with its version and (when a kernel is chosen) what it
    computes: nothing is left for a caller to fill in."""
    for t in (trace_mp(GPTQ, "sm90-h200"), trace_scheme(W4A16, "sm90-h200"),
              trace_scheme(W4A16, "sm80-a100")):
        assert t.ok and t.vllm_version is not None and t.runtime_detail is not None
        assert t.reached is Stage.KERNEL_LOOP
    refused = trace_mp({**GPTQ, "weight_type": "int4", "group_size": 0}, "x86-avx512")
    assert refused.error_type == "ZeroDivisionError" and refused.steps[-1].outcome is Outcome.CRASHED


def test_enums_reach_the_json_as_plain_strings():
    t = trace_scheme(W4A16, "sm90-h200", {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"})
    outcomes = [s.outcome for s in t.steps]
    assert outcomes[:2] == [Outcome.REJECTED, Outcome.DISABLED] and outcomes[-1] is Outcome.SELECTED
    data = t.to_json()
    assert all(type(s["outcome"]) is str for s in data["steps"])
    assert json.loads(json.dumps(data))["steps"][1]["outcome"] == "disabled"
    assert f"| {t.steps[1].outcome} |" == "| disabled |"  # the markdown table's cell


def _recorded(name: str) -> list[dict]:
    path = FIXTURES / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("name,fn", [("vllm_oracle_gptq.jsonl", trace_gptq),
                                     ("vllm_oracle_awq.jsonl", trace_awq),
                                     ("vllm_oracle_inc.jsonl", trace_inc)])
def test_reached_is_the_one_answer_to_how_far_the_load_got(name, fn):
    """vLLM's recorder holds a `kernel` record exactly when a linear method was returned (its
    create_weights ran), and the loop's fields are filled exactly when the loop ran."""
    cases = _recorded(name)
    assert cases
    for case in cases:
        t = fn(case["input"], case["platform"], case["env"])
        assert (t.method is not None) == (t.reached >= Stage.CREATE_WEIGHTS), case["id"]
        assert (case["expected"]["kernel"] is not None) == (t.reached >= Stage.CREATE_WEIGHTS)
        if t.reached < Stage.KERNEL_LOOP:
            # INC MXFP8 walks its own loop (init_mxfp8_linear_kernel), not the MP one: steps and
            # candidates, never the MP loop's reasons or config
            mxfp8 = t.scheme == "INCMxfp8Scheme"
            assert (t.reasons, t.mp_config) == ((), None), case["id"]
            assert mxfp8 or (t.steps, t.candidates) == ((), ()), case["id"]
