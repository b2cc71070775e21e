from __future__ import annotations

import pytest

from workbench.errors import InvalidInputError
from workbench.execution import KNOWN_KERNELS, plan_execution, plan_from_trace


def test_x86_w4a8_checkpoint_runs_dynamic4bit_for_real():
    plan = plan_execution("Dynamic4bitLinearKernel", cuda=False)
    assert (plan.computes, plan.path, plan.fidelity) == ("w4a8", "vllm_dynamic4bit", "same op")
    assert plan.available and "reference loop" in plan.why
    assert plan.paths_to_compare() == ["vllm_dynamic4bit", "w4a16_fallback", "w4a8_native"]


@pytest.mark.parametrize("amx,act,env,expect", [
    (True, "bfloat16", True, ("w4a8", "vllm_int4_scaled_mm")),
    (False, "bfloat16", True, ("w4a16", "w4a16_fallback")),
    (True, "float16", True, ("w4a16", "w4a16_fallback")),
    (True, "bfloat16", False, ("w4a16", "w4a16_fallback")),
])
def test_cpuwna16_w4a8_route_needs_amx_bf16_and_env(amx, act, env, expect):
    plan = plan_execution("CPUWNA16LinearKernel", act_type=act, amx=amx, cpu_int4_w4a8=env, cuda=False)
    assert (plan.computes, plan.path) == expect


def test_gpu_kernels_map_to_triton_on_cuda_and_cpu_models_here():
    assert plan_execution("MacheteLinearKernel", cuda=True).path == "triton_w4a16"
    plan = plan_execution("MacheteLinearKernel", cuda=False)
    assert plan.path == "w4a16_fallback" and plan.fidelity == "same math"
    assert plan_execution("MarlinLinearKernel", marlin_input_dtype="int8", cuda=False).path == "w4a8_native"
    humming = plan_execution("HummingLinearKernel", act_type="bfloat16", cuda=False)
    assert humming.computes == "w4a16"
    fp8 = plan_execution("CutlassW4A8LinearKernel", cuda=False)
    assert fp8.path is None and not fp8.available and fp8.computes == "w4a8-fp8"


def test_inc_and_unknown_and_none():
    assert plan_execution("INCXPUW4A8LinearMethod", cuda=False).path == "inc_xpu_w4a8"
    assert plan_execution(None, cuda=False).computes == "none"
    with pytest.raises(InvalidInputError, match="unknown vLLM kernel"):
        plan_execution("FancyKernel")
    for name in KNOWN_KERNELS:
        plan_execution(name, cuda=False)  # every known name maps


def test_plan_from_a_real_trace():
    from workbench.dispatch import trace_mp
    from workbench.platforms import get_preset as get_platform
    t = trace_mp({"weight_type": "int4", "act_type": "bfloat16", "group_size": 128,
                  "zero_points": False, "out_type": None, "full_weight_shape": [4096, 4096],
                  "partition_weight_shape": [4096, 4096]}, get_platform("x86-avx512"))
    assert t.selected == "Dynamic4bitLinearKernel"
    assert plan_from_trace(t, get_platform("x86-avx512")).path == "vllm_dynamic4bit"
