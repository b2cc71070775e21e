"""Loading a quantized checkpoint as vLLM's model load does, up to one layer's weights.

`ModelConfig._verify_quantization` (config/model.py:1383-1470) names the method from the
checkpoint's `quant_method` (the overrides, in their order of preference);
`VllmConfig._get_quantization_config` (config/vllm.py:916-948) parses the model-wide config
with that method's `from_config`, then applies the capability and dtype gate; the layer's
`get_quant_method` and `create_weights` follow (`gptq_awq`, `inc`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from workbench.dispatch.env import Env
from workbench.dispatch.trace import Level, Trace
from workbench.dispatch.types import dtype
from workbench.dispatch.vllm_0_33.config_gate import CONFIG_GATES, config_gate
from workbench.dispatch.vllm_0_33.errors import VllmError
from workbench.dispatch.versions import takes_rules
from workbench.dispatch.vllm_0_33.gptq_awq import awq_from_config, gptq_from_config
from workbench.dispatch.vllm_0_33.inc import inc_from_config
from workbench.errors import InvalidInputError
from workbench.platforms import Platform

# `QUANTIZATION_METHODS` (model_executor/layers/quantization/__init__.py:15-49), in order.
QUANTIZATION_METHODS = [
    "awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4",
    "modelopt_mxfp8", "modelopt_mixed", "auto_gptq", "gptq", "gptq_marlin", "awq_marlin",
    "humming", "compressed-tensors", "experts_int8", "quark", "moe_wna16", "torchao", "inc",
    "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8", "online", "fp8_per_tensor", "fp8_per_block",
    "fp8_per_channel", "int8_per_channel_weight_only", "nvfp4_per_token", "mxfp8",
]
# The config class behind each modelled name (`method_to_config`, quantization/__init__.py).
FAMILY = {"auto_gptq": "gptq", "gptq": "gptq", "gptq_marlin": "gptq", "awq": "awq",
          "auto_awq": "awq", "awq_marlin": "awq", "inc": "inc",
          "compressed-tensors": "compressed-tensors"}
_FROM_CONFIG = {"gptq": gptq_from_config, "awq": awq_from_config, "inc": inc_from_config,
                "compressed-tensors": lambda qc: None}  # CT's refusals are per layer here
# each family's layer trace, by its name in the rule set
_LAYER = {"gptq": "trace_gptq_layer", "awq": "trace_awq_layer", "inc": "trace_inc_layer"}


def resolve_quantization(R, qc: dict, p: Platform) -> str:
    """The method name `_verify_quantization` settles on for a checkpoint's config."""
    if "quant_method" not in qc:  # quant_cfg["quant_method"]
        raise VllmError("KeyError", "'quant_method'")
    quant_method = qc["quant_method"]
    low = quant_method.lower() if isinstance(quant_method, str) else quant_method
    if low == "gptq":  # AutoGPTQConfig.override_quantization_method (auto_gptq.py:214-233)
        name = "auto_gptq"
    elif low == "awq" and not p.is_cpu():  # AutoAWQConfig's, off CPU (auto_awq.py:263-286)
        name = "auto_awq"
    elif quant_method == "auto-round":  # INCConfig's (inc/inc.py:361-368)
        name = "inc"
    else:
        name = quant_method if quant_method != "" else None
    if name is not None and name not in R.QUANTIZATION_METHODS:
        raise VllmError("ValueError", f"Unknown quantization method: {name}. Must be one of "
                        f"{R.QUANTIZATION_METHODS}.")
    if name not in FAMILY:
        raise InvalidInputError(f"quantization_config.quant_method: {quant_method!r} loads as "
                                f"{name!r}, which is not modelled; modelled: "
                                f"{', '.join(FAMILY)}")
    return name


@takes_rules
def trace_config_gate(R, data: Any, p: Platform) -> Trace:
    """Input: `quantization_config` (the checkpoint's, with `quant_method`) and `dtype` (the
    model dtype, resolved as ModelConfig resolves it; bfloat16 when absent is the workbench's
    stand-in, not a vLLM default); `quantization` may name the method instead. The trace holds
    vLLM's error."""
    if not isinstance(data, dict):
        raise InvalidInputError(f"config-gate: expected a JSON object, got {type(data).__name__}")
    qc = data.get("quantization_config", {})
    if not isinstance(qc, dict):
        raise InvalidInputError("config-gate.quantization_config: expected a JSON object")
    model_dtype = dtype(data.get("dtype", "bfloat16"), "config-gate.dtype").name
    t = Trace(level=Level.CONFIG_GATE)
    try:
        name = data.get("quantization") or resolve_quantization(R, qc, p)
        if name not in CONFIG_GATES:
            raise InvalidInputError(f"config-gate.quantization: {name!r} is not modelled; "
                                    f"accepted: {', '.join(CONFIG_GATES)}")
        t = replace(t, quantization=name)
        _FROM_CONFIG[FAMILY[name]](qc)
        config_gate(name, p, model_dtype)
        return t.gated(f"{name}: capability and dtype {model_dtype} pass")
    except VllmError as exc:
        return t.failed(exc.error_type, exc.message)


@takes_rules
def trace_quant_layer(R, level: str, data: Any, p: Platform, env: Env, gate: bool = True) -> Trace:
    """A GPTQ / AWQ / INC layer. With a `quantization_config` that names its `quant_method`,
    the method is resolved as vLLM resolves it (which may be another family than `level`)."""
    qc = data.get("quantization_config") if isinstance(data, dict) else None
    if not isinstance(qc, dict) or "quant_method" not in qc:
        return getattr(R, _LAYER[level])(data, p, env, gate)
    try:
        name = resolve_quantization(R, qc, p)
    except VllmError as exc:
        return Trace(level=level, error=exc.message, error_type=exc.error_type)
    if FAMILY[name] not in _LAYER:
        raise InvalidInputError(f"{level}.quantization_config: {name!r} is a compressed-tensors "
                                "checkpoint: trace its layers with trace_scheme")
    # the family's trace, under the level that was asked for
    return replace(getattr(R, _LAYER[FAMILY[name]])(data, p, env, gate, name), level=level,
                   quantization=name)
