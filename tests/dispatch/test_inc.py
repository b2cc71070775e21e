"""INC / AutoRound resolution and the XPU backend table (vllm/model_executor/layers/quantization/inc/)."""
from __future__ import annotations

import pytest

from workbench.dispatch import trace_inc
from workbench.errors import InvalidInputError

LAYER = {"bits": 4, "group_size": 128, "sym": True, "in_features": 4096, "out_features": 4096,
         "layer_name": "model.layers.0.mlp.down_proj"}


@pytest.mark.parametrize("backend,method", [(None, "INCXPULinearMethod"),
                                            ("w4a16", "INCXPULinearMethod"),
                                            ("w4a8", "INCXPUW4A8LinearMethod")])
def test_xpu_backend_table(backend, method):
    env = {} if backend is None else {"VLLM_XPU_INC_WNA16_BACKEND": backend}
    t = trace_inc(LAYER, "xpu", env)
    assert t.selected == method and t.error is None


def test_w4a8_runtime_is_int8_above_512_tokens_with_fp16_scales():
    t = trace_inc({**LAYER, "scale_dtype": "bfloat16"}, "xpu", {"VLLM_XPU_INC_WNA16_BACKEND": "w4a8"})
    rt = t.runtime_detail
    assert (rt.activation, rt.min_tokens, rt.scale_dtype, rt.emulation) == (
        "int8", 512, "fp16", "inc_xpu_w4a8")
    assert rt.fallback_op == "torch.ops._xpu_C.int4_gemm_w4a16"


def test_w4a8_partition_must_be_multiple_of_8():
    t = trace_inc({**LAYER, "output_size_per_partition": 1052}, "xpu",
                  {"VLLM_XPU_INC_WNA16_BACKEND": "w4a8"})
    assert t.error_type == "NotImplementedError"
    assert t.error == ("VLLM_XPU_INC_WNA16_BACKEND=w4a8 requires partitioned in/out sizes that are "
                       "multiples of 8, got output=1052. Partition shape: (4096, 1052).")


def test_w4a8_needs_the_op_and_a_group_multiple_of_32():
    env = {"VLLM_XPU_INC_WNA16_BACKEND": "w4a8"}
    t = trace_inc(LAYER, {"preset": "xpu", "torch_ops": []}, env)
    assert "requires the int4_gemm_w4a8 op" in t.error
    t = trace_inc({**LAYER, "group_size": 48}, "xpu", env)
    assert "positive multiple of 32, got 48" in t.error


def test_invalid_backend_is_vllms_value_error():
    t = trace_inc(LAYER, "xpu", {"VLLM_XPU_INC_WNA16_BACKEND": "W4A8"})
    assert t.error_type == "ValueError"
    assert t.error == ("Invalid value 'W4A8' for VLLM_XPU_INC_WNA16_BACKEND. Valid options: "
                       "['auto', 'ark', 'w4a16', 'w4a8'].")


def test_int2_needs_ark_and_asym_is_unsupported_on_xpu():
    assert "requires the ARK backend" in trace_inc({**LAYER, "bits": 2}, "xpu").error
    assert trace_inc({**LAYER, "bits": 2}, {"preset": "xpu", "packages": ["auto_round_kernel"]}).selected == "INCARKLinearMethod"
    t = trace_inc({**LAYER, "sym": False}, "xpu")
    assert t.error.startswith("INC on XPU: unsupported config INCLayerConfig(bits=4, group_size=128, sym=False")


def test_cpu_gptq_goes_through_the_mp_loop():
    t = trace_inc(LAYER, "x86-avx512")
    assert t.mp_config is not None and str(t.mp_config.weight_type) == "uint4b8"
    assert t.selected == "CPUWNA16LinearKernel"


def test_cuda_low_bits_go_to_humming_and_4bit_to_the_mp_loop():
    assert trace_inc({**LAYER, "bits": 3}, "sm90-h200").selected == "HummingLinearMethod"
    assert trace_inc(LAYER, "sm90-h200").selected == "MacheteLinearKernel"


def test_bad_inc_input_is_named():
    with pytest.raises(InvalidInputError, match="inc.group_size"):
        trace_inc({**LAYER, "group_size": 0}, "xpu")


# -- MXFP8 (data_type mx_fp, 8 bits, g32): INCMxfp8LinearScheme and the MXFP8 kernel loop -------
MXFP8 = {"bits": 8, "group_size": 32, "sym": True, "data_type": "mx_fp",
         "packing_format": "auto_round:llm_compressor", "in_features": 4096,
         "out_features": 4096, "layer_name": "model.layers.0.mlp.down_proj"}


@pytest.mark.parametrize("platform,kernel,activation", [
    ("sm80-a100", "MarlinMxfp8LinearKernel", "bf16"),   # FlashInfer needs SM 10.0
    ("sm90-h200", "HummingMxfp8LinearKernel", "fp8"),   # Humming moved ahead of Marlin on SM 9.0
    ("xpu", "XPUMxFp8LinearKernel", "fp8"),
    ("mi300x", "EmulationMxfp8LinearKernel", "bf16"),   # gfx942 has no native MX
])
def test_mxfp8_goes_through_the_mxfp8_loop(platform, kernel, activation):
    t = trace_inc(MXFP8, platform)
    assert (t.scheme, t.method, t.inner) == ("INCMxfp8Scheme", "INCLinearMethod",
                                             ("INCMxfp8LinearScheme",))
    assert t.error is None and t.selected == kernel and t.steps[-1].kernel == kernel
    rt = t.runtime_detail
    assert (rt.method, rt.activation, rt.weight_bits, rt.emulation) == (kernel, activation, 8, None)
    assert "W8A" in t.runtime and not t.notes[-1].endswith("not traced further.")
    assert t.to_json()["kernel"]["mp_config"] is None  # not choose_mp_linear_kernel


def test_mxfp8_refusals_are_vllms():
    t = trace_inc({**MXFP8, "in_features": 4100}, "sm90-h200")
    assert (t.error_type, t.error) == ("ValueError", "INC MXFP8 requires input_size_per_partition "
                                       "(4100) to be divisible by 32.")
    # a CPU has no MXFP8 kernels at all; the loop's header with no reasons
    t = trace_inc(MXFP8, "x86-avx512")
    assert (t.error_type, t.error, t.steps) == (
        "ValueError", "Failed to find a kernel that can implement the MXFP8 linear layer. "
        "Reasons: \n", ())
    t = trace_inc(MXFP8, "sm100-b200", {"linear_backend": "flashinfer_cutlass"})
    assert t.error == ("Failed to find a kernel that can implement the MXFP8 linear layer. "
                       "Reasons: \nFlashInferCutlassMxfp8LinearKernel: requires FlashInfer")
    assert "FlashInfer" in t.to_json()["steps"][0]["reason"]


def test_mxfp8_runs_nowhere_here_and_is_not_costed_as_4_bit():
    from workbench.execution import plan_execution
    from workbench.perf.predict import cost_of_runtime
    rt = trace_inc(MXFP8, "sm80-a100").runtime_detail
    assert rt.computes == "w8a16"
    plan = plan_execution(rt, cuda=False)
    assert (plan.path, plan.why) == (None, "no runnable model of 8-bit weights here")
    p = cost_of_runtime("sm80-a100", rt, 1, 4096, 4096, 32)
    assert p.predicted_us is None and "8-bit weights" in p.note


@pytest.mark.parametrize("bits,packing,k,n,part", [
    (6, "auto_round:auto_gptq", 11008, 4096, {"output_size_per_partition": 1024}),
    (3, "auto_round:auto_awq", 11008, 4096, {"input_size_per_partition": 5504})])
def test_a_channelwise_low_bit_layer_fails_humming_create_weights_as_vllm_does(bits, packing, k, n, part):
    # Recorded from the pinned vLLM (seed 11 of the recorder's INC draw): humming's GPTQ / AWQ
    # schemas size the scales K // group_size, so group -1 is a negative dimension.
    layer = {"quant_method": "auto-round", "bits": bits, "group_size": -1, "sym": True,
             "packing_format": packing, "in_features": k, "out_features": n,
             "layer_name": "model.layers.0.mlp.down_proj", **part}
    plat = {"device": "cuda", "capability": 80, "packages": ["humming"]}
    kp, np_ = part.get("input_size_per_partition", k), part.get("output_size_per_partition", n)
    j = trace_inc(layer, plat).to_json()
    assert (j["method"], j["kernel"]["error_type"]) == ("HummingLinearMethod", "RuntimeError")
    assert j["kernel"]["error"] == f"Trying to create tensor with negative dimension -{kp}: [-{kp}, {np_}]"
    assert trace_inc({**layer, "group_size": 128}, plat).error is None
