"""The VllmConfig gate every quantization method passes before any layer is built."""
from __future__ import annotations

from workbench.dispatch.env import Env, removed_variable
from workbench.dispatch.vllm_0_33.errors import VllmError
from workbench.platforms import Platform

# (min capability, act dtypes) of each QuantizationConfig, for the VllmConfig gate.
CONFIG_GATES = {
    "compressed-tensors": (70, ("float32", "float16", "bfloat16")),  # compressed_tensors.py:119-124
    "inc": (60, ("float16", "bfloat16")),  # inc/inc.py:262-267
    "auto_gptq": (60, ("float16", "bfloat16")),  # auto_gptq.py:178-183
    "gptq": (60, ("float16", "bfloat16")),
    "gptq_marlin": (60, ("float16", "bfloat16")),
    "auto_awq": (75, ("float16", "bfloat16")),  # auto_awq.py:229-234
    "awq": (75, ("float16", "bfloat16")),
    "awq_marlin": (75, ("float16", "bfloat16")),
}


def engine_start(p: Platform, env: Env) -> tuple[str, str] | None:
    """What refuses the engine before any layer: (error type, vLLM's text), or None.

    `validate_environ` (platforms/interface.py:1458-1470) only warns about unknown variables
    here; a release that removes a variable refuses it (`EnvRules.removed`)."""
    removed = removed_variable(env)
    return None if removed is None else ("ValueError", removed)


def config_gate(method: str, p: Platform, params_dtype: str) -> None:
    """`VllmConfig._get_quantization_config` (config/vllm.py:926-943): capability, then dtype.

    `method` is `model_config.quantization` as vLLM names it after its overrides.
    """
    min_cap, dtypes = CONFIG_GATES[method]
    if p.capability is not None and p.capability < min_cap:
        raise VllmError("ValueError", (
            f"The quantization method {method} is not supported for the current GPU. Minimum "
            f"capability: {min_cap}. Current capability: {p.capability}."))
    if params_dtype not in dtypes:
        shown = ", ".join(f"torch.{d}" for d in dtypes)
        raise VllmError("ValueError", (f"torch.{params_dtype} is not supported for quantization "
                                       f"method {method}. Supported dtypes: [{shown}]"))
