"""The worked traces of the facts document, §9, byte for byte."""
from __future__ import annotations

from tests.dispatch.conftest import FIRST
from workbench.dispatch import trace_mp, trace_scheme
from workbench.dispatch.versions import rules

ERROR_HEADER = rules().ERROR_HEADER

C1 = {"weight_type": "int4", "act_type": "bfloat16", "group_size": 128, "zero_points": False,
      "out_type": None, "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 4096]}

CUTLASS_ACT = " CutlassW4A8LinearKernel cannot implement due to: CUTLASS W4A8 only supports FP8 (e4m3) activations"
MACHETE_INT4 = (" MacheteLinearKernel cannot implement due to: Quant type (int4) not supported by "
                "Machete, supported types are: [ScalarType.uint4b8, ScalarType.uint8b128]")
MARLIN_INT4 = (" MarlinLinearKernel cannot implement due to: Quant type (int4) not supported by  "
               "Marlin, supported types are: [ScalarType.uint4b8, ScalarType.uint8b128, "
               "ScalarType.float8_e4m3fn, ScalarType.float4_e2m1f]")
CONCH_INT4 = (" ConchLinearKernel cannot implement due to: Weight type (int4) not supported by "
              "ConchLinearKernel, supported types are: [ScalarType.uint4, ScalarType.uint8, "
              "ScalarType.uint4b8, ScalarType.uint8b128]")
EXLLAMA_ACT = " ExllamaLinearKernel cannot implement due to: Exllama only supports float16 activations"
TRITON_INT4 = (" TritonW4A16LinearKernel cannot implement due to: Quant type int4 not supported; "
               "supported: [ScalarType.uint4b8, ScalarType.uint4]")
H200_NO_HUMMING = {"preset": "sm90-h200", "packages": []}


def test_9_1_h200_with_humming_selects_humming_weight_only():
    t = trace_mp(C1, "sm90-h200")
    assert [s.kernel for s in t.steps] == ["CutlassW4A8LinearKernel", "MacheteLinearKernel",
                                          "HummingLinearKernel"]
    assert t.selected == "HummingLinearKernel"
    assert t.reasons == (CUTLASS_ACT, MACHETE_INT4)
    assert t.runtime_detail.activation == "bf16" and t.runtime_detail.computes == "w4a16"
    assert "Using HummingLinearKernel for mixed-precision linear" in t.notes


def test_9_1_h200_without_humming_raises_vllms_exact_error():
    t = trace_mp(C1, H200_NO_HUMMING, rules=FIRST)  # its Marlin text
    reasons = [CUTLASS_ACT, MACHETE_INT4,
               " HummingLinearKernel cannot implement due to: Humming is not installed",
               MARLIN_INT4, CONCH_INT4, EXLLAMA_ACT, TRITON_INT4]
    assert t.reasons == tuple(reasons)
    assert t.error == ERROR_HEADER + "\n".join(reasons)
    assert t.error.startswith("Failed to find a kernel that can implement the WNA16 linear layer. Reasons: \n ")
    assert t.error_type == "ValueError" and t.selected is None


def test_9_1_fp16_model_exllama_rejects_on_weight_type():
    t = trace_mp({**C1, "act_type": "float16"}, H200_NO_HUMMING)
    assert (" ExllamaLinearKernel cannot implement due to: Quant type (int4) not supported by "
            "Exllama, supported types are: [ScalarType.uint4b8, ScalarType.uint8b128]") in t.reasons


def test_9_2_a100_capability_skips_then_humming_last():
    t = trace_mp(C1, "sm80-a100")
    assert t.reasons[:2] == (
        "CutlassW4A8LinearKernel requires capability 90, current compute  capability is 80",
        "MacheteLinearKernel requires capability 90, current compute  capability is 80")
    assert [s.outcome for s in t.steps[:2]] == ["capability", "capability"]
    assert t.steps[-1].kernel == "HummingLinearKernel" and t.selected == "HummingLinearKernel"
    assert trace_mp(C1, {"preset": "sm89-l40s", "packages": []}).error_type == "ValueError"


def test_9_3_sm100_passes_capability_but_not_exact_hopper():
    t = trace_mp(C1, {"preset": "sm100-b200", "packages": []})
    assert t.reasons[:2] == (
        " CutlassW4A8LinearKernel cannot implement due to: CUTLASS W4A8 requires compute capability of 90 (Hopper)",
        " MacheteLinearKernel cannot implement due to: Machete requires compute capability of 90 (Hopper)")
    assert t.error_type == "ValueError"


def test_9_4_x86_selects_dynamic4bit_first():
    for preset in ("x86-avx2", "x86-avx512", "x86-spr-amx", "zen4-zentorch"):
        for act in ("bfloat16", "float16"):
            t = trace_mp({**C1, "act_type": act}, preset)
            assert t.selected == "Dynamic4bitLinearKernel" and t.reasons == ()


def test_9_5_arm_with_and_without_the_aten_op():
    assert trace_mp(C1, "arm-kleidiai").selected == "Dynamic4bitLinearKernel"
    t = trace_mp(C1, "arm-no-dyn-quant")
    assert t.reasons == (
        " Dynamic4bitLinearKernel cannot implement due to: PyTorch 2.13.0+cpu does not support "
        "_dyn_quant_matmul_4bit. Install a newer version",
        " ZentorchWNA16LinearKernel cannot implement due to: ZentorchWNA16 requires an AMD Zen CPU.",
        " CPUWNA16LinearKernel cannot implement due to: Quant type (int4) not supported by CPUWNA16, "
        "supported types are: (ScalarType.uint4, ScalarType.uint4b8)")
    assert t.error_type == "ValueError"


def test_9_6_xpu_selects_w4a8_and_warns_about_fp16_output():
    t = trace_mp(C1, "xpu")
    assert t.selected == "XPUW4A8IntLinearKernel"
    assert t.runtime_detail.warning == (
        "XPUW4A8IntLinearKernel is running with model dtype torch.bfloat16, but int4_gemm_w4a8 "
        "produces float16 output. Recommend setting --dtype float16 for best performance.")
    assert (t.runtime_detail.activation, t.runtime_detail.output) == ("int8", "fp16")
    assert trace_mp({**C1, "act_type": "float16"}, "xpu").runtime_detail.warning is None


def test_9_7_mi300x_rejects_everything():
    t = trace_mp(C1, "rocm-mi300x")
    assert [s.kernel for s in t.steps] == ["RDNA3W4A16LinearKernel", "RDNAHybridW4A16LinearKernel",
                                          "TritonW4A16LinearKernel", "ConchLinearKernel",
                                          "ExllamaLinearKernel"]
    assert t.reasons[0] == " RDNA3W4A16LinearKernel cannot implement due to: RDNA3 W4A16 kernel requires gfx1100"
    assert t.reasons[1] == (" RDNAHybridW4A16LinearKernel cannot implement due to: "
                            "RDNAHybridW4A16LinearKernel only targets gfx11/gfx12")
    assert t.reasons[4] == EXLLAMA_ACT and t.error_type == "ValueError"


def test_9_8_int8_act_humming_accepts():
    cfg = {**C1, "act_type": "int8"}
    assert trace_mp(cfg, "sm90-h200").selected == "HummingLinearKernel"
    # Humming accepts, then drops the int8 schema for the g128 weights (schema.py:354-357)
    rt = trace_mp(cfg, "sm90-h200").runtime_detail
    assert (rt.activation, rt.activation_requested) == ("bf16", "int8")
    t = trace_mp(cfg, H200_NO_HUMMING)
    assert (" ExllamaLinearKernel cannot implement due to: Exllama only supports float16 activations"
            in t.reasons)


def test_9_8_gptq_with_int8_marlin_input_machete_accepts():
    t = trace_mp({**C1, "weight_type": "uint4b8", "act_type": "int8"}, "sm90-h200")
    assert t.selected == "MacheteLinearKernel" and t.reasons == (CUTLASS_ACT,)


def _scheme(fmt, weights, inputs, **extra):
    return {"weights": weights, "input_activations": inputs, "output_activations": None,
            "format": fmt, "layer_name": "model.layers.0.mlp.down_proj", "in_features": 4096,
            "out_features": 4096, "params_dtype": "bfloat16", **extra}


W4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
A8 = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True, "symmetric": True}


def test_9_8_pack_quantized_w4a8_lands_on_machete_then_marlin():
    t = trace_scheme(_scheme("pack-quantized", W4, A8), "sm90-h200")
    assert t.scheme == "CompressedTensorsWNA8Int" and t.selected == "MacheteLinearKernel"
    assert t.runtime_detail.activation == "bf16"  # Machete ignores the int8 activation schema
    assert trace_scheme(_scheme("pack-quantized", W4, A8), "sm80-a100").selected == "MarlinLinearKernel"


def test_humming_reads_the_wna8int_activation_schema():
    t = trace_scheme(_scheme("pack-quantized", W4, A8), "sm90-h200",
                     {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"})
    # it reads the int8 schema, then runs bf16 for the groupwise weights (schema.py:354-357)
    assert t.selected == "HummingLinearKernel" and t.runtime_detail.activation == "bf16"
    assert t.runtime_detail.activation_requested == "int8"
    a4 = {**A8, "num_bits": 4}
    t4 = trace_scheme(_scheme("pack-quantized", W4, a4), "sm90-h200",
                      {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"})
    # int4 is deprecated on SM >= 90 (schema.py:328): the fallback order's int8 runs (:361-394)
    assert (t4.scheme, t4.runtime_detail.activation) == ("CompressedTensorsWNA4Int", "int8")


def test_9_8_w4a8_fp8_selects_cutlass_only_on_bf16():
    fp8 = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True, "symmetric": True}
    t = trace_scheme(_scheme("pack-quantized", W4, fp8), "sm90-h200")
    assert (t.scheme, t.selected) == ("CompressedTensorsW4A8Fp8", "CutlassW4A8LinearKernel")
    t16 = trace_scheme(_scheme("pack-quantized", W4, fp8, params_dtype="float16"), "sm90-h200")
    assert t16.selected == "HummingLinearKernel"
    assert t16.reasons[0] == (" CutlassW4A8LinearKernel cannot implement due to: Only bfloat16 "
                              "output type currently supportedgot c.out_type=torch.float16")


def test_1_3_format_decides_w4a8_routing():
    assert trace_scheme(_scheme("int-quantized", W4, A8), "x86-avx512").scheme == "CompressedTensorsW4A8Int"
    asym = {**A8, "symmetric": False}
    t = trace_scheme(_scheme("pack-quantized", W4, asym), "x86-avx512")
    assert t.scheme is None and t.error_type == "NotImplementedError"
    assert t.error.startswith("No compressed-tensors compatible scheme was found for "
                              "layer_name='model.layers.0.mlp.down_proj', weight_quant=QuantizationArgs(num_bits=4, ")
    assert "format='pack-quantized'" in t.error
    # int-quantized accepts an asymmetric input: input symmetry is not checked (§1.3 10e).
    assert trace_scheme(_scheme("int-quantized", W4, asym), "x86-avx512").selected == "Dynamic4bitLinearKernel"
