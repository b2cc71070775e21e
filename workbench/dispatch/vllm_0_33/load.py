"""`VllmConfig._get_quantization_config` (config/vllm.py:916-948): the model-wide config parsed
by its `from_config`, then the capability and dtype gate, before any layer is built."""
from __future__ import annotations

from typing import Any

from workbench.dispatch.trace import Trace
from workbench.dispatch.types import dtype
from workbench.dispatch.vllm_0_33.config_gate import CONFIG_GATES, config_gate
from workbench.dispatch.vllm_0_33.errors import VllmError
from workbench.dispatch.vllm_0_33.gptq_awq import awq_from_config, gptq_from_config
from workbench.dispatch.vllm_0_33.inc import inc_from_config
from workbench.errors import InvalidInputError
from workbench.platforms import Platform

# The from_config each modelled method runs first (compressed-tensors' own refusals are
# per layer in this workbench: see `SchemeInput.from_json`).
_FROM_CONFIG = {"inc": inc_from_config, "auto_gptq": gptq_from_config, "gptq": gptq_from_config,
                "auto_awq": awq_from_config, "awq": awq_from_config,
                "compressed-tensors": lambda qc: None}


def trace_config_gate(data: Any, p: Platform) -> Trace:
    """Input: `quantization` (the method name vLLM resolved), `quantization_config` (the
    checkpoint's dict) and `dtype` (the model dtype). The trace holds vLLM's error, or none."""
    if not isinstance(data, dict):
        raise InvalidInputError(f"config-gate: expected a JSON object, got {type(data).__name__}")
    method = data.get("quantization")
    if method not in CONFIG_GATES:
        raise InvalidInputError(f"config-gate.quantization: {method!r} is not modelled; "
                                f"accepted: {', '.join(CONFIG_GATES)}")
    qc = data.get("quantization_config", {})
    if not isinstance(qc, dict):
        raise InvalidInputError("config-gate.quantization_config: expected a JSON object")
    model_dtype = dtype(data.get("dtype", "bfloat16"), "config-gate.dtype").name
    t = Trace(level="config-gate")
    try:
        _FROM_CONFIG[method](qc)
        config_gate(method, p, model_dtype)
        t.gates.append(f"{method}: capability and dtype {model_dtype} pass")
    except VllmError as exc:
        t.error, t.error_type = exc.message, exc.error_type
    return t
