"""The execution plan reads the trace's Runtime; Marlin W4A8-INT8 computes what Marlin does."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.reference import w4a8_reference
from w4a8_kernels.registry import Int4Weight
from w4a8_kernels.vllm_cpu import admitted
from workbench.dispatch import trace_mp, trace_scheme
from workbench.dispatch.versions import available
from workbench.errors import InvalidInputError
from workbench.execution import (execution_path, marlin_int8_scales, marlin_w4a8_int8,
                                 plan_execution, plan_from_trace)

C1 = {"weight_type": "int4", "act_type": "bfloat16", "group_size": 128, "zero_points": False,
      "out_type": None, "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 4096]}
WNA16 = {"format": "pack-quantized", "in_features": 4096, "out_features": 4096,
         "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                     "group_size": 128}}
W4A8 = {**WNA16, "input_activations": {"num_bits": 8, "type": "int", "strategy": "token",
                                       "dynamic": True, "symmetric": True}}


def _plan(t, cuda=False):
    return plan_execution(t.runtime_detail, cuda=cuda)


def test_x86_w4a8_checkpoint_runs_dynamic4bit_for_real():
    plan = _plan(trace_mp(C1, "x86-avx512"))
    assert (plan.computes, plan.path, plan.fidelity) == ("w4a8", "vllm_dynamic4bit", "same op")
    assert plan.available and plan.paths_to_compare() == ["vllm_dynamic4bit", "w4a16_fallback",
                                                          "w4a8_native"]


@pytest.mark.parametrize("preset,act,env,expect", [
    ("x86-spr-amx", "bfloat16", {}, ("w4a8", "vllm_int4_scaled_mm")),
    ("x86-avx512", "bfloat16", {}, ("w4a16", "w4a16_fallback")),
    ("x86-spr-amx", "float16", {}, ("w4a16", "w4a16_fallback")),
    ("x86-spr-amx", "bfloat16", {"VLLM_CPU_INT4_W4A8": "0"}, ("w4a16", "w4a16_fallback")),
])
def test_cpuwna16_w4a8_route_needs_amx_bf16_and_env(preset, act, env, expect):
    t = trace_mp({**C1, "weight_type": "uint4b8", "act_type": act}, preset, env)
    assert t.selected == "CPUWNA16LinearKernel"
    # vLLM's own op where this host built and admitted it, else its emulation
    own = expect[1] == "vllm_int4_scaled_mm" and admitted("int4_scaled_mm")
    expect = (expect[0], expect[1] if own or expect[1] != "vllm_int4_scaled_mm"
              else "vllm_int4_scaled_mm_emulated")
    assert (_plan(t).computes, _plan(t).path) == expect
    assert _plan(t).fidelity == ("same op" if own else "same numerics" if "int4" in expect[1]
                                 else "same math")


def test_gpu_kernels_run_themselves_on_cuda_and_cpu_models_here():
    t = trace_mp({**C1, "weight_type": "uint4b8"}, "sm90-h200")
    assert t.selected == "MacheteLinearKernel"
    gpu = _plan(t, cuda=True)
    assert (gpu.path, gpu.fidelity, gpu.fallback) == ("vllm_machete", "same op", "vllm_machete")
    assert gpu.runs_engine and gpu.paths_to_compare() == ["vllm_machete", "triton_w4a8",
                                                          "triton_w4a16"]
    assert (_plan(t).path, _plan(t).fidelity) == ("w4a16_fallback", "same math")
    fp8 = _plan(trace_mp({**C1, "act_type": "float8_e4m3fn", "out_type": "bfloat16"}, "sm90-h200"))
    assert fp8.path is None and not fp8.available and fp8.computes == "w4a8-fp8"


def test_the_zen4_pack_quantized_w4a8_layer_has_one_answer():
    """Scheme notes, runtime sentence and execution plan once disagreed here."""
    t = trace_scheme(W4A8, "zen4-zentorch")
    assert (t.scheme, t.selected) == ("CompressedTensorsWNA8Int", "ZentorchWNA16LinearKernel")
    rt = t.runtime_detail
    assert (rt.activation, rt.op) == ("int8", "torch.ops.zentorch.zentorch_dynamic_qlinear")
    assert _plan(t).computes == "w4a8" and _plan(t).path == "w4a8_native"
    assert t.runtime.startswith("Real W4A8")
    # K / groups not a multiple of 4: zentorch falls back to its W4A16 path.
    odd = {**W4A8, "weights": {**W4A8["weights"], "group_size": 2}, "in_features": 4096}
    assert trace_scheme(odd, "zen4-zentorch").runtime_detail.op == "torch.ops.zentorch.zentorch_woq_linear"


def test_marlin_int8_route_end_to_end():
    env = {"VLLM_MARLIN_INPUT_DTYPE": "int8"}  # the first release's Marlin W4A8 (since removed)
    first = available()[0]
    t = trace_scheme(WNA16, "sm80-a100", env, rules=first)
    assert t.selected == "MarlinLinearKernel" and t.mp_config.act_type.name == "bfloat16"
    assert t.runtime_detail.activation == "int8"
    assert _plan(t).path == "marlin_w4a8_int8" and _plan(t).fidelity == "same numerics"
    asym = {**WNA16, "weights": {**WNA16["weights"], "symmetric": False}}
    rt = trace_scheme(asym, "sm80-a100", env, rules=first).runtime_detail
    assert (rt.fails_at, rt.error_type, rt.error) == ("load", "AssertionError",
                                                      "W8A8 is not supported by marlin kernel.")
    assert _plan(trace_scheme(asym, "sm80-a100", env, rules=first)).computes == "none"
    chan = {**WNA16, "weights": {**WNA16["weights"], "strategy": "channel", "group_size": None}}
    rt = trace_scheme(chan, "sm80-a100", env, rules=first).runtime_detail
    assert (rt.fails_at, rt.error_type) == ("forward", "TypeError")


def test_none_and_bad_input():
    assert plan_execution(None, cuda=False).computes == "none"
    assert plan_from_trace(trace_mp(C1, {"preset": "sm90-h200", "packages": []})).computes == "none"
    with pytest.raises(InvalidInputError, match="dispatch Runtime"):
        plan_execution("MarlinLinearKernel")


def _weight(n, k, g, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w_q = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    scales = torch.rand(n, k // g, generator=gen) * 0.02 + 1e-4
    return Int4Weight(w_q, scales, g)


def test_marlin_int8_scales_are_int16_levels_of_the_max():
    s = torch.tensor([[1.0, 0.5], [0.25, 1e-4]])
    levels, factor = marlin_int8_scales(s, torch.float32)
    assert levels.tolist() == [[4096, 2048], [1024, 0]]  # tiny scales round to level 0
    assert factor.item() == pytest.approx(1 / 4096)


@pytest.mark.parametrize("m,n,k,g", [(3, 40, 96, 32), (1, 8, 256, 128), (5, 24, 192, 64)])
def test_marlin_w4a8_int8_matches_float64_with_its_own_scales(m, n, k, g):
    """Against the float64 reference run on the scales Marlin actually uses."""
    w = _weight(n, k, g)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    got = marlin_w4a8_int8(x, execution_path("marlin_w4a8_int8").prepare(w))
    assert got.dtype == torch.bfloat16 and got.shape == (m, n)
    levels, factor = marlin_int8_scales(w.scales)
    ref = w4a8_reference(x, w.w_q, levels.to(torch.float64) * factor.double(), g)
    torch.testing.assert_close(got.double(), ref, rtol=1e-2, atol=1e-3)
    # ... and it is not the plain W4A8 answer: small group scales lose precision as levels.
    plain = w4a8_reference(x, w.w_q, w.scales.to(torch.bfloat16), g)
    assert not torch.allclose(got.double(), plain, rtol=1e-4, atol=0)


def test_marlin_int32_accumulator_wraps_like_the_kernel():
    k, g = 1024, 32
    w_q = torch.full((1, k), 7, dtype=torch.int8)
    w = Int4Weight(w_q, torch.ones(1, k // g), g)
    x = torch.ones(1, k)  # every code 127: sum 127 * 7 * 1024 * 4096 overflows int32
    got = marlin_w4a8_int8(x, execution_path("marlin_w4a8_int8").prepare(w))
    exact = 127 * 7 * k * 4096
    wrapped = (exact + 2**31) % 2**32 - 2**31
    assert got.item() == pytest.approx(wrapped * (1 / 127) / 4096, rel=1e-6)


def test_marlin_path_refuses_what_vllm_cannot_run():
    # The rule set's Marlin runtime decides: one group fails at the first forward, zero
    # points at load, each with vLLM's own text.
    w = _weight(8, 64, 64)
    ok, why = execution_path("marlin_w4a8_int8").supports(w)
    assert not ok and why.endswith("fails at forward for these weights: TypeError: unsupported "
                                   "operand type(s) for *: 'Tensor' and 'NoneType'")
    asym = replace(_weight(8, 64, 32), zeros=torch.full((8, 2), 8, dtype=torch.int8))
    ok, why = execution_path("marlin_w4a8_int8").supports(asym)
    assert not ok and why.endswith("AssertionError: W8A8 is not supported by marlin kernel.")


def test_the_inc_xpu_path_runs_the_threshold_the_rule_set_traces():
    """The 512-token switch is INC's rule; the path is handed it from the trace, not a copy."""
    from workbench.dispatch import trace_inc

    t = trace_inc({"bits": 4, "group_size": 32, "sym": True, "in_features": 128,
                   "out_features": 32, "layer_name": "layer"}, "xpu",
                  {"VLLM_XPU_INC_WNA16_BACKEND": "w4a8"})
    for name in ("inc_xpu_w4a8", "inc_xpu_w4a8_bf16_misread"):
        path = execution_path(name)
        prepared = path.prepare(_weight(32, 128, 32))
        assert prepared.min_tokens == t.runtime_detail.min_tokens == 512
        assert path.summary.startswith("INC XPU W4A8")


def test_the_inc_xpu_path_refuses_what_the_rule_set_refuses_in_vllms_words():
    path = execution_path("inc_xpu_w4a8")
    assert path.supports(_weight(32, 128, 32)) == (True, "")
    ok, why = path.supports(_weight(20, 64, 32))
    assert not ok and why.endswith(
        "NotImplementedError: VLLM_XPU_INC_WNA16_BACKEND=w4a8 requires partitioned in/out "
        "sizes that are multiples of 8, got output=20. Partition shape: (64, 20).")
    assert path.supports(_weight(32, 128, 64)) == (True, "")
    ok, why = path.supports(Int4Weight(torch.zeros(8, 96, dtype=torch.int8),
                                       torch.ones(8, 2), 48))
    assert not ok and "positive multiple of 32, got 48" in why
    asym = replace(_weight(32, 128, 32), zeros=torch.full((32, 4), 8, dtype=torch.int8))
    assert "unsupported config" in path.supports(asym)[1]
    with pytest.raises(KernelInputError, match="multiples of 8, got output=20"):
        path.prepare(_weight(20, 64, 32))


HUMMING_H200 = {"preset": "sm90-h200", "packages": ["humming"]}


@pytest.mark.parametrize("env,act,path", [
    ({"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"}, "int8", "vllm_humming_int8"),
])
def test_a_trace_selecting_humming_runs_humming_on_a_gpu_host(env, act, path):
    """Per-channel pack-quantized W4A8 with Machete disabled: vLLM runs Humming with int8
    activations; on a CUDA host that kernel itself runs, against the W4A16 vLLM runs."""
    layer = {**W4A8, "weights": {**W4A8["weights"], "strategy": "channel", "group_size": None}}
    t = trace_scheme(layer, HUMMING_H200, env)
    assert t.selected == "HummingLinearKernel" and t.runtime_detail.activation == act
    plan = _plan(t, cuda=True)
    assert (plan.path, plan.fidelity, plan.fallback) == (path, "same op", "vllm_humming")
    assert plan.paths_to_compare() == [path, "vllm_humming", "triton_w4a8", "triton_w4a16"]
    assert _plan(t).path == "w4a8_native" and _plan(t).fallback == "w4a16_fallback"


def test_default_bench_paths_follow_the_host_value():
    from workbench.execution import default_bench_paths
    from workbench.platforms import get_preset, platform_from_json

    assert default_bench_paths(get_preset("x86-avx512")) == ["w4a8_native", "w4a16_fallback"]
    h200 = platform_from_json(HUMMING_H200)
    assert default_bench_paths(h200) == ["vllm_humming", "vllm_humming_int8", "triton_w4a8",
                                         "triton_w4a16", "cublas_bf16"]
    bare = platform_from_json({"preset": "sm90-h200", "packages": []})
    assert default_bench_paths(bare) == ["triton_w4a8", "triton_w4a16", "cublas_bf16"]
    for name in default_bench_paths(h200):
        execution_path(name)  # every default is a registered path


def test_faces_label_what_vllm_runs_and_the_stand_ins():
    from workbench.execution import ENGINE_LABEL, STAND_IN_LABEL, path_role

    assert path_role("vllm_humming") == path_role("vllm_machete") == ENGINE_LABEL
    assert path_role("triton_w4a8") == path_role("triton_w4a16") == STAND_IN_LABEL
    assert path_role("vllm_humming_int8_forced") == "not a vLLM path"
    assert path_role("w4a8_native") == ""


def test_fidelity_is_a_closed_set_that_renders_as_its_words():
    from workbench.execution import Fidelity

    plan = _plan(trace_mp(C1, "x86-avx512"))
    assert plan.fidelity is Fidelity.SAME_OP and f"({plan.fidelity})" == "(same op)"
    assert plan_execution(None, cuda=False).fidelity is Fidelity.NONE
    assert {str(f) for f in Fidelity} == {"same op", "same numerics", "same math", "none"}
