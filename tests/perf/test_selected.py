"""The cost model costs a decision it is handed; what vLLM selects comes from the trace."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from workbench.dispatch import trace_scheme
from workbench.errors import InvalidInputError
from workbench.perf.cpu_classes import CPU_CALL_FLOOR_US, GPU_CALL_FLOOR_US
from workbench.perf.predict import cost_of_runtime, predict
from workbench.perf.selected import predict_paths, predict_selected, scheme_json, what_vllm_runs


def test_the_cost_model_imports_nothing_of_the_rules():
    tree = ast.parse(Path(inspect.getfile(cost_of_runtime)).read_text())  # perf/predict.py
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.startswith("workbench.dispatch")}


def test_predict_refuses_selected_by_name_and_says_where_it_is_costed():
    with pytest.raises(InvalidInputError, match="predict_selected costs it; here accepted: w4a8_native"):
        predict("sm90-h200", "selected", 16, 4096, 4096, 128)


@pytest.mark.parametrize("platform,scheme", [("sm90-h200", "w4a8-int"), ("sm80-a100", "w4a16"),
                                             ("x86-avx512", "w4a8-int"), ("sm70-v100", "w4a8-int")])
def test_predict_selected_is_the_trace_handed_to_the_cost_model(platform, scheme):
    t = trace_scheme(scheme_json(4096, 4096, 128, scheme), platform)
    for m in (1, 64, 4096):
        got = predict_selected(platform, m, 4096, 4096, 128, scheme=scheme)
        assert got == cost_of_runtime(platform, t.runtime_detail, m, 4096, 4096, 128,
                                      selected=t.selected, error=t.error)
        assert got == predict_paths(platform, ["selected"], [m], 4096, 4096, 128, scheme=scheme)[0]


@pytest.mark.parametrize("platform", ["sm90-h200", "x86-avx2"])
def test_a_decision_handed_over_is_costed_no_lower_than_a_call_costs(platform):
    floor = CPU_CALL_FLOOR_US if platform.startswith("x86") else GPU_CALL_FLOOR_US
    t = trace_scheme(scheme_json(16, 32, 32, "w4a8-int"), platform)
    p = cost_of_runtime(platform, t.runtime_detail, 1, 16, 32, 32, selected=t.selected, error=t.error)
    assert p.predicted_us is not None and floor <= p.low_us <= p.predicted_us <= p.high_us


def test_what_vllm_runs_costs_each_checkpoint_as_vllm_selects_it():
    c = what_vllm_runs("sm90-h200", [1, 256], 4096, 4096, 128)
    assert [p.kernel.split()[0] for p in c.w4a8] == ["HummingLinearKernel"] * 2
    assert [p.kernel.split()[0] for p in c.w4a16] == ["MacheteLinearKernel"] * 2
    assert c.w4a8[1].predicted_us == predict_selected("sm90-h200", 256, 4096, 4096, 128).predicted_us
