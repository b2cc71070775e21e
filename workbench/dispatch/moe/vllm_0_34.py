"""vLLM 0.34.0's fused-MoE dispatch, as what it changes from 0.33.0's (`vllm_0_33`).

- `CPUExpertsInt4` (the W4A8-INT8 experts, fused_moe/experts/cpu_int4_moe.py:107-114) accepts
  GELU_TANH as well, run as activation kind 3 (:187-188).
- The oracles share `MoEKernelOracle` (fused_moe/oracle/base.py): a refused backend reads
  "<name> MoE backend '<B>' does not support the deployment configuration since <reason>."
  (base.py:168-177, raised by `return_or_raise`, :218-238), the backend quoted with or without
  a reason; 0.33.0's W4A8-INT8 oracle quoted it only without one (w4a8_int8.py:106-116).
  Neither is reachable for W4A8-INT8 through a config: only moe_backend "cpu" maps to its
  backend, and KernelConfig's MoEBackend literal (config/kernel.py:122-147) has no "cpu".
- WNA16's Zen CPU backend is `ZentorchExpertsWNA16` (it also takes 8-bit weights) and its
  backend-level reasons name the "dynamic-activation" path and check the weight width
  (oracle/int_wna16.py:197-221).
- `--quantization w4afp8` (INT4 g128 experts, FP8 per-token activations) is a new method
  (quantization/w4afp8.py): its routed experts get `CompressedTensorsW4A8Fp8MoEMethod` with
  the config's group size (:78-86), so the W4A8-FP8 oracle and asserts decide.
"""
from __future__ import annotations

from dataclasses import replace

from workbench.dispatch.moe import vllm_0_33 as base
from workbench.dispatch.moe.layer import MoELayer

VLLM_VERSION = "0.34.0"


def _unsupported(name: str):
    """MoEKernelOracle.make_log_unsupported (oracle/base.py:168-177), no LoRA."""
    def message(backend: str, reason: str | None) -> str:
        since = f" since {reason}" if reason else ""
        return (f"{name} MoE backend '{backend}' does not support the "
                f"deployment configuration{since}.")
    return message


def _zen_reasons(layer: MoELayer) -> str | None:
    """oracle/int_wna16.py:197-221 for a CT layer, VLLM_CPU_INT4_W4A8 at its default (on)."""
    w = layer.weights
    if not w.symmetric:
        return "zero points are not supported"
    if w.num_bits not in (4, 8):
        return f"unsupported weight width W{w.num_bits}A16"
    g = w.group_size
    if g is None or g <= 0:
        return "the dynamic-quant path requires group-quantized weights"
    if g % 4 != 0:
        return f"group size {g} is not a multiple of 4"
    return None


SOURCES = {**base.SOURCES,  # only the rules whose lines moved
    'w4a8i_group_check': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a8_int8.py:70',
    'w4a8i_weight_key': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a8_int8.py:82',
    'w4a8i_select': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:84',
    'w4a8i_not_cpu': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:103',
    'w4a8i_priority': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:33',
    'w4a8i_map': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:60',
    'w4a8i_explicit': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:109',
    'w4a8i_loop': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:113',
    'w4a8i_none': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:121',
    'oracle_unsupported_msg': 'model_executor/layers/fused_moe/oracle/base.py:168',
    'oracle_return_or_raise': 'model_executor/layers/fused_moe/oracle/base.py:218',
    'cpu_int4_arm': 'model_executor/layers/fused_moe/experts/cpu_int4_moe.py:65',
    'cpu_int4_dyn_quant': 'model_executor/layers/fused_moe/experts/cpu_int4_moe.py:78',
    'cpu_int4_activations': 'model_executor/layers/fused_moe/experts/cpu_int4_moe.py:107',
    'cpu_int4_quant': 'model_executor/layers/fused_moe/experts/cpu_int4_moe.py:125',
    'generic_checks': 'model_executor/layers/fused_moe/modular_kernel.py:640',
    'wna16_weight_key': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py:80',
    'wna16_select_call': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py:101',
    'wna16_group_assert': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py:125',
    'wna16_hidden_group': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py:233',
    'wna16_inter_group': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py:239',
    'wna16_priority': 'model_executor/layers/fused_moe/oracle/int_wna16.py:130',
    'wna16_backend_classes': 'model_executor/layers/fused_moe/oracle/int_wna16.py:72',
    'wna16_incompat': 'model_executor/layers/fused_moe/oracle/int_wna16.py:170',
    'wna16_map': 'model_executor/layers/fused_moe/oracle/int_wna16.py:267',
    'wna16_select': 'model_executor/layers/fused_moe/oracle/int_wna16.py:296',
    'wna16_none': 'model_executor/layers/fused_moe/oracle/int_wna16.py:360',
    'marlin_moe_config': 'model_executor/layers/quantization/utils/marlin_utils.py:355',
    'w4a8f_asserts': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a8_fp8.py:51',
    'w4a8f_select_call': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a8_fp8.py:56',
    'w4a8f_256': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a8_fp8.py:74',
    'w4a8f_select': 'model_executor/layers/fused_moe/oracle/w4a8.py:59',
    'w4a8f_none': 'model_executor/layers/fused_moe/oracle/w4a8.py:95',
    'cls_cpu_int4_w4a8': 'model_executor/layers/fused_moe/experts/cpu_int4_moe.py:27',
    'cls_zentorch': 'model_executor/layers/fused_moe/experts/zentorch_moe.py:41',
    'cls_xpu_wna16': 'model_executor/layers/fused_moe/experts/xpu_moe.py:253',
    'cls_marlin_base': 'model_executor/layers/fused_moe/experts/marlin_moe.py:514',
    'cls_marlin': 'model_executor/layers/fused_moe/experts/marlin_moe.py:628',
    'cls_batched_marlin': 'model_executor/layers/fused_moe/experts/marlin_moe.py:861',
    'cls_triton': 'model_executor/layers/fused_moe/experts/triton_moe.py:104',
    'cls_triton_wna16': 'model_executor/layers/fused_moe/experts/triton_moe.py:785',
    'cls_humming_base': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:128',
    'humming_gemm_type': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:111',
    'humming_wna16_key': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:88',
    'cls_humming_indexed': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:665',
    'cls_humming_grouped': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:877',
    'cls_humming_batched': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:1012',
    'cls_cutlass_w4a8': 'model_executor/layers/fused_moe/experts/cutlass_moe.py:1319',
    'quant_keys': 'model_executor/layers/quantization/utils/quant_utils.py:289',
    'w4a8_keys': 'model_executor/layers/quantization/utils/quant_utils.py:322',
    'factory': 'model_executor/layers/fused_moe/layer.py:93',
}

del SOURCES["w4a8i_local_unsupported_msg"]
SOURCES["w4afp8_method"] = "model_executor/layers/quantization/w4afp8.py:78"  # 0.34.0 formats it in MoEKernelOracle (base.py)

RULES = replace(
    base.RULES, version=VLLM_VERSION, sources=SOURCES,
    experts=base.experts_classes(frozenset({"silu", "swigluoai", "swiglustep", "gelu_tanh"}),
                                 "ZentorchExpertsWNA16",
                                 ((base.kInt4Static, None), (base.kInt4Static32, None),
                                  (base.kInt8Static, None))),
    w4a8_int8_unsupported=_unsupported("W4A8 Int8"), wna16_unsupported=_unsupported("WNA16"),
    zen_reasons=_zen_reasons, has_w4afp8=True)
