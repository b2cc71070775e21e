"""Routes outside the MP loop: GPTQ, AWQ, INC's config checks and methods, the config gates."""
from __future__ import annotations

import pytest

from tests.dispatch.conftest import FIRST, NEWEST
from workbench.dispatch import trace_awq, trace_gptq, trace_inc, trace_scheme

LAYER = {"in_features": 4096, "out_features": 4096, "params_dtype": "bfloat16",
         "layer_name": "model.layers.0.mlp.down_proj"}
GPTQ = {"bits": 4, "group_size": 128, "sym": True, "desc_act": False, **LAYER}
AWQ = {"bits": 4, "group_size": 128, "zero_point": True, **LAYER}
INC = {"bits": 4, "group_size": 128, "sym": True, **LAYER}
INT8 = {"VLLM_MARLIN_INPUT_DTYPE": "int8"}


def test_gptq_g256_on_h200_is_vllms_verify_marlin_error():
    t = trace_gptq({**GPTQ, "group_size": 256}, "sm90-h200")
    assert (t.error_type, t.error) == ("ValueError", "Marlin does not support group_size = 256. "
                                       "Only group_sizes = [-1, 32, 64, 128] are supported.")
    assert t.selected is None and not t.steps


@pytest.mark.parametrize("trace, full, missing, keys", [
    (trace_gptq, GPTQ, "bits", "['bits']"),
    (trace_gptq, GPTQ, "group_size", "['group_size']"),
    (trace_gptq, GPTQ, "desc_act", "['desc_act']"),
    (trace_gptq, GPTQ, "sym", "['sym']"),
    (trace_awq, AWQ, "bits", "['w_bit', 'bits']"),
    (trace_awq, AWQ, "group_size", "['q_group_size', 'group_size']"),
    (trace_awq, AWQ, "zero_point", "['zero_point']"),
])
def test_short_form_without_a_required_key_is_vllms_get_from_keys_error(trace, full, missing, keys):
    # from_config has no default for these (auto_gptq.py:199-202, auto_awq.py:239-241).
    layer = {k: v for k, v in full.items() if k != missing}
    for case in (layer, {**LAYER, "quantization_config": {k: v for k, v in layer.items()
                                                          if k not in LAYER}}):
        t = trace(case, "sm90-h200")
        assert (t.error_type, t.error) == (
            "ValueError", f"Cannot find any of {keys} in the model's quantization config.")
        assert t.selected is None


def test_gptq_missing_keys_are_reported_in_vllms_order_before_any_value_is_checked():
    t = trace_gptq({"bits": "four", "sym": True, **LAYER}, "sm90-h200")
    assert t.error == "Cannot find any of ['group_size'] in the model's quantization config."


def test_gptq_config_gate_capability_then_dtype():
    t = trace_gptq(GPTQ, {"device": "cuda", "capability": 50})
    assert t.error == ("The quantization method auto_gptq is not supported for the current GPU. "
                       "Minimum capability: 60. Current capability: 50.")
    t = trace_gptq({**GPTQ, "params_dtype": "float32"}, "sm80-a100")
    assert t.error == ("torch.float32 is not supported for quantization method auto_gptq. "
                       "Supported dtypes: [torch.float16, torch.bfloat16]")
    assert trace_gptq({**GPTQ, "bits": 3}, "sm80-a100").error == (
        "Unsupported quantization config: bits=3, sym=True")


def test_gptq_puts_the_marlin_input_dtype_into_selection_inc_does_not():
    t = trace_gptq(GPTQ, "sm80-a100", INT8, rules=FIRST)
    assert t.mp_config.act_type.name == "int8" and t.selected == "MarlinLinearKernel"
    assert t.runtime_detail.activation == "int8" and t.runtime_detail.emulation == "marlin_w4a8_int8"
    inc = trace_inc(INC, "sm80-a100", INT8, rules=FIRST)  # INC builds AutoGPTQLinearMethod
    assert inc.mp_config.act_type.name == "bfloat16" and inc.runtime_detail.activation == "bf16"
    fp8 = trace_gptq(GPTQ, "sm90-h200", {"VLLM_MARLIN_INPUT_DTYPE": "fp8"}, rules=FIRST)
    assert fp8.error_type == "ValueError" and fp8.error.startswith("Marlin W4A8-FP8 only support SM89")
    # the newest release removed the variable: engine start refuses it before any layer
    assert trace_gptq(GPTQ, "sm80-a100", INT8, rules=NEWEST).error.startswith(
        "VLLM_MARLIN_INPUT_DTYPE has been removed. Marlin no longer supports 8-bit activations.")


def test_marlin_8bit_weights_with_int8_activations_fail_at_load():
    t = trace_gptq({**GPTQ, "bits": 8}, "sm80-a100", INT8, rules=FIRST)
    assert t.selected == "MarlinLinearKernel" and t.error is None
    rt = t.runtime_detail
    assert (rt.fails_at, rt.error_type, rt.error) == ("load", "AssertionError",
                                                      "W8A8 is not supported by marlin kernel.")


def test_awq_routes():
    t = trace_awq(AWQ, "sm80-a100")
    assert (t.scheme, t.selected) == ("AutoAWQMarlinLinearMethod", "MarlinLinearKernel")
    assert str(t.mp_config.weight_type) == "uint4" and t.mp_config.zero_points
    # zero_point false: uint4 has no Marlin type without zero points, so the Triton AWQ GEMM.
    sym = trace_awq({**AWQ, "zero_point": False}, "sm80-a100")
    assert sym.selected == "AutoAWQLinearMethod" and sym.runtime_detail.op.startswith("ops.awq_gemm")
    assert trace_awq({**AWQ, "bits": 8}, "sm80-a100").error.startswith("Unsupported num_bits = 8.")
    cpu = trace_awq(AWQ, "x86-avx512")
    assert (cpu.scheme, cpu.selected) == ("AutoAWQMarlinLinearMethod", "CPUWNA16LinearKernel")
    assert trace_awq({**AWQ, "params_dtype": "float32"}, "x86-avx512").error.startswith(
        "torch.float32 is not supported for quantization method awq.")
    # asymmetric AWQ with int8 Marlin activations: uint4 is not uint4b8.
    assert trace_awq(AWQ, "sm80-a100", INT8, rules=FIRST).runtime_detail.fails_at == "load"


def test_compressed_tensors_config_gate():
    scheme = {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
              "format": "pack-quantized", "in_features": 4096, "out_features": 4096}
    t = trace_scheme(scheme, {"device": "cuda", "capability": 60})
    assert (t.error_type, t.error) == ("ValueError", (
        "The quantization method compressed-tensors is not supported for the current GPU. "
        "Minimum capability: 70. Current capability: 60."))


@pytest.mark.parametrize("change,error_type,start", [
    ({"bits": 9}, "ValueError", "Unsupported weight_bits: 9, currently only support "
                                "{2, 3, 4, 5, 6, 7, 8}."),
    ({"packing_format": "auto_round:gptq"}, "ValueError", "Unsupported packing_format: "
                                                          "auto_round:gptq, currently only support {"),
    ({"backend": "exllama"}, "ValueError", "Unsupported backend: exllama, currently only support {"),
    ({"data_type": "fp"}, "AssertionError", "INC block-wise FP8 only supports bits=8, but found bits=4."),
    ({"data_type": "fp8", "bits": 8}, "AssertionError",
     "INC block-wise FP8 requires a 2-D group_size, but found group_size=128."),
    ({"data_type": "xfp8"}, "ValueError", "Unsupported data_type: xfp8, currently only support {"),
])
def test_inc_config_validation(change, error_type, start):
    t = trace_inc({**INC, **change}, "sm90-h200")
    assert t.error_type == error_type and t.error.startswith(start), t.error


def test_inc_channelwise_crashes_on_xpu_and_on_cpu_ark():
    neg = "Trying to create tensor with negative dimension -4096: [-4096, 4096]"
    t = trace_inc({**INC, "group_size": -1}, "xpu")
    assert (t.selected, t.error_type, t.error) == ("INCXPULinearMethod", "RuntimeError", neg)
    t = trace_inc({**INC, "group_size": -1}, {"preset": "x86-avx512",
                                              "packages": ["auto_round_kernel"]})
    assert (t.selected, t.error_type, t.error) == ("INCARKLinearMethod", "RuntimeError", neg)


def test_ark_importable_without_its_backend_library():
    xpu = {"preset": "xpu", "packages": ["auto_round_kernel"], "ark_backend_lib": False}
    t = trace_inc(INC, xpu, {"VLLM_XPU_INC_WNA16_BACKEND": "ark"})
    # vLLM appends ". Layer:" to an error that already ends in a period.
    assert t.error == ("VLLM_XPU_INC_WNA16_BACKEND=ark was requested but auto_round_kernel is "
                       "unavailable: No ARK backend library is available.. Layer: "
                       "model.layers.0.mlp.down_proj.")
    assert trace_inc(INC, xpu).selected == "INCXPULinearMethod"
    assert trace_inc(INC, {**xpu, "ark_backend_lib": True}).selected == "INCARKLinearMethod"


def test_inc_low_bits_on_cuda_need_humming():
    t = trace_inc({**INC, "bits": 3}, {"preset": "sm90-h200", "packages": []})
    assert (t.error_type, t.error) == ("ModuleNotFoundError", "No module named 'humming'")
    assert trace_inc({**INC, "bits": 3}, "sm90-h200").selected == "HummingLinearMethod"


def test_inc_extra_config_16_bits_is_unquantized():
    extra = {"model.layers.0.mlp.down_proj": {"bits": 16}}
    t = trace_inc({**INC, "extra_config": extra}, "sm90-h200")
    assert t.selected == "UnquantizedLinearMethod" and t.runtime_detail.weight_only
    t = trace_inc({**INC, "extra_config": {"down_proj": {"bits": 8}}}, "sm80-a100")
    assert str(t.mp_config.weight_type) == "uint8b128"  # a suffix key sets the layer's bits


def test_inc_awq_route():
    asym = trace_inc({**INC, "sym": False, "packing_format": "auto_round:auto_awq"}, "sm80-a100")
    assert (asym.scheme, asym.selected) == ("AutoAWQMarlinLinearMethod", "MarlinLinearKernel")
    sym = trace_inc({**INC, "packing_format": "auto_round:auto_awq"}, "sm80-a100")
    assert sym.selected == "AutoAWQLinearMethod"
    bits8 = trace_inc({**INC, "bits": 8, "packing_format": "auto_round:auto_awq"}, "sm80-a100")
    assert bits8.error.startswith("Unsupported num_bits = 8. Supported: 4.")


def test_zentorch_falls_back_to_cpuwna16_processing_for_gptq_and_awq_layouts():
    for t in (trace_inc(INC, "zen4-zentorch"), trace_awq({**AWQ, "zero_point": False},
                                                        "zen4-zentorch")):
        assert t.selected == "ZentorchWNA16LinearKernel"
        rt = t.runtime_detail
        assert (rt.op, rt.isa_hint, rt.activation) == ("ops.cpu_gemm_wna16", "vec", "bf16")


def test_config_gate_level_parses_the_config_before_the_gate():
    from workbench.dispatch import trace_config_gate

    inc9 = {"quantization": "inc", "quantization_config": {"bits": 9, "group_size": 128},
            "dtype": "bfloat16"}
    assert trace_config_gate(inc9, "sm90-h200").error.startswith("Unsupported weight_bits: 9")
    awq = {"quantization": "awq", "dtype": "float32",
           "quantization_config": {"bits": 4, "group_size": 128, "zero_point": True}}
    assert trace_config_gate(awq, "x86-avx512").error == (
        "torch.float32 is not supported for quantization method awq. Supported dtypes: "
        "[torch.float16, torch.bfloat16]")
    assert trace_config_gate({**awq, "dtype": "bfloat16"}, "sm80-a100").error is None


def test_the_recorders_quantization_config_form():
    qc = {"bits": 4, "group_size": 128, "sym": True}  # desc_act missing: from_config refuses
    t = trace_gptq({**LAYER, "quantization_config": qc}, "sm80-a100")
    assert (t.error_type, t.error) == ("ValueError", "Cannot find any of ['desc_act'] in the "
                                                     "model's quantization config.")
    t = trace_gptq({**LAYER, "quantization_config": {**qc, "desc_act": False}}, "sm80-a100")
    assert (t.method, t.selected) == ("AutoGPTQLinearMethod", "MarlinLinearKernel")
    awq = {"w_bit": 4, "q_group_size": 128, "zero_point": True,
           "modules_to_not_convert": ["down_proj"]}
    t = trace_awq({**LAYER, "quantization_config": awq}, "sm80-a100")
    assert t.method == "UnquantizedLinearMethod"  # is_layer_skipped matches by substring
    inc = trace_inc({**LAYER, "quantization_config": {"bits": 4, "group_size": 128}}, "xpu")
    assert (inc.method, inc.selected) == ("INCLinearMethod", "INCXPULinearMethod")
    dyn = {**qc, "desc_act": False, "dynamic": {r"-:.*down_proj": {}}}
    assert trace_gptq({**LAYER, "quantization_config": dyn}, "sm80-a100").method == \
        "UnquantizedLinearMethod"


def test_an_awq_checkpoint_layer_traces_through_the_cli_form(tmp_path):
    import json

    import torch
    from safetensors.torch import save_file

    from w4a8_kernels import packing
    from workbench.checkpoints import trace_checkpoint_layer

    name, n, k = "model.layers.0.mlp.down_proj", 64, 256
    q = torch.randint(0, 16, (n, k), dtype=torch.int8)
    z = torch.full((n, k // 128), 8, dtype=torch.int8)
    save_file({f"{name}.qweight": packing.pack_int4_awq(q).contiguous(),
               f"{name}.qzeros": packing.pack_int4_awq_zeros(z).contiguous(),
               f"{name}.scales": torch.full((k // 128, n), 0.01, dtype=torch.float16)},
              str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "float16",
        "quantization_config": {"quant_method": "awq", "w_bit": 4, "q_group_size": 128,
                                "zero_point": True, "version": "gemm"}}))
    t = trace_checkpoint_layer(tmp_path, name, "sm80-a100")
    assert (t.method, t.selected) == ("AutoAWQMarlinLinearMethod", "MarlinLinearKernel")
    assert t.runtime_detail.activation == "fp16"
    assert trace_checkpoint_layer(tmp_path, name, "x86-avx512").selected == "CPUWNA16LinearKernel"


def test_gptq_dynamic_overrides_apply_as_override_config_does():
    # override_config (utils/gptq_utils.py:55-82): a value of another type is ignored, and a
    # layer without a name is never overridden (get_linear_quant_method: `if prefix:`).
    rule = {"+:.*down_proj": {"bits": "8", "group_size": 64}}
    t = trace_gptq({**GPTQ, "dynamic": rule}, "sm80-a100")
    assert t.error is None and (str(t.mp_config.weight_type), t.mp_config.group_size) == (
        "uint4b8", 64)
    bad = {"+:.*": {"bits": 3}}
    assert trace_gptq({**GPTQ, "dynamic": bad}, "sm80-a100").error == (
        "Unsupported quantization config: bits=3, sym=True")
    nameless = trace_gptq({**GPTQ, "dynamic": bad, "layer_name": ""}, "sm80-a100")
    assert nameless.error is None and str(nameless.mp_config.weight_type) == "uint4b8"
