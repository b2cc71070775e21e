"""Loop mechanics: disabled kernels, backends, SM90 reorder, capability skips, odd inputs."""
from __future__ import annotations

import pytest

from tests.dispatch.conftest import FIRST
from workbench.dispatch import trace_mp
from workbench.dispatch import parse_env
from workbench.errors import InvalidInputError

GPTQ = {"weight_type": "uint4b8", "act_type": "bfloat16", "group_size": 128, "zero_points": False,
        "out_type": None, "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 4096]}


def test_sm90_moves_humming_before_marlin_only_on_sm90():
    assert trace_mp(GPTQ, "sm90-h200").candidates.index("HummingLinearKernel") == 2
    assert trace_mp(GPTQ, "sm80-a100").candidates[-1] == "HummingLinearKernel"
    assert trace_mp(GPTQ, "sm100-b200").candidates[-1] == "HummingLinearKernel"


def test_disabled_kernels_are_exact_names_without_stripping():
    t = trace_mp(GPTQ, "sm90-h200", {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel,HummingLinearKernel"})
    assert t.reasons[1:3] == (" MacheteLinearKernel disabled by environment variable",
                              " HummingLinearKernel disabled by environment variable")
    assert t.selected == "MarlinLinearKernel"
    spaced = trace_mp(GPTQ, "sm90-h200", {"VLLM_DISABLED_KERNELS": "CutlassW4A8LinearKernel, MacheteLinearKernel"})
    assert spaced.selected == "MacheteLinearKernel"  # " MacheteLinearKernel" matches nothing


def test_linear_backend_filters_and_falls_back():
    t = trace_mp(GPTQ, "sm90-h200", {"linear_backend": "Marlin"})
    assert t.candidates == ("MarlinLinearKernel",) and t.selected == "MarlinLinearKernel"
    fb = trace_mp(GPTQ, "x86-avx512", {"linear_backend": "marlin"})
    assert fb.candidates[0] == "Dynamic4bitLinearKernel"
    assert any("has no kernel for this linear layer type" in n for n in fb.notes)
    per = trace_mp(GPTQ, "sm90-h200", {"linear_backend": "marlin",
                                       "linear_backend_per_quant": {"mixed_precision": "triton"}})
    assert per.candidates == ("TritonW4A16LinearKernel",)


def test_disabled_comes_before_capability():
    t = trace_mp(GPTQ, "sm80-a100", {"VLLM_DISABLED_KERNELS": "CutlassW4A8LinearKernel"})
    assert t.reasons[0] == " CutlassW4A8LinearKernel disabled by environment variable"
    assert t.reasons[1].startswith("MacheteLinearKernel requires capability 90")


def test_cuda_without_capability_skips_capability_checks():
    t = trace_mp({**GPTQ, "weight_type": "int4"}, {"device": "cuda", "packages": []},
                 rules=FIRST)
    assert not any(s.outcome == "capability" for s in t.steps)
    assert " MarlinLinearKernel cannot implement due to: Quant type (int4) not supported by  Marlin, supported types are: []" in t.reasons


def test_unknown_platform_enum_has_no_candidates():
    t = trace_mp(GPTQ, {"device": "cpu", "cpu_arch": "s390x", "torch_ops": []})
    assert t.selected == "CPUWNA16LinearKernel"


def test_group_zero_crashes_like_vllm():
    t = trace_mp({**GPTQ, "weight_type": "int4", "group_size": 0}, "x86-avx512")
    assert t.error_type == "ZeroDivisionError"


@pytest.mark.parametrize("env", [{"linear_backend": "warp"}, {"VLLM_CPU_INT4_W4A8": "yes"},
                                 {"linear_backnd": "marlin"}, {"linear_backend_per_quant": "{bad"}])
def test_bad_env_is_a_named_error(env):
    with pytest.raises(InvalidInputError):
        parse_env(env)


@pytest.mark.parametrize("field,value", [("weight_type", "int5x"), ("group_size", -2),
                                         ("full_weight_shape", [4096]), ("act_type", "float12"),
                                         ("zero_points", "no")])
def test_bad_mp_config_names_the_field(field, value):
    with pytest.raises(InvalidInputError, match=field):
        trace_mp({**GPTQ, field: value}, "sm90-h200")


def test_other_vllm_variables_are_accepted_without_effect():
    assert parse_env({"VLLM_USE_V2_MODEL_RUNNER": "1"}).disabled_kernels == ()
