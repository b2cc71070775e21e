"""`get_marlin_input_dtype` (layers/quantization/utils/marlin_utils.py:720-738).

Read after selection by compressed-tensors WNA16 (schemes/compressed_tensors_wNa16.py:156) and
before it by AutoGPTQ / AutoAWQ (`auto_gptq.py:264`, `auto_awq.py:332`), whose create_weights
put it into the MP config's act_type. INC builds those methods itself and never reads it.
"""
from __future__ import annotations

from workbench.dispatch.env import Env
from workbench.dispatch.types import FP8_E4M3, INT8, DType
from workbench.platforms import Platform


class MarlinInputError(ValueError):
    """vLLM's ValueError for fp8 activations outside SM89 / SM12x."""


FP8_DEVICE_ERROR = (
    "Marlin W4A8-FP8 only support SM89 or SM12x device (It is slower than Marlin W4A16 on other "
    "devices). You can consider using W4A8-INT8 instead(set VLLM_MARLIN_INPUT_DTYPE=int8).")


def marlin_input_act_type(env: Env, p: Platform) -> DType | None:
    """int8, fp8 (SM89 or the SM12x family only) or None; raises EnvChoiceError first."""
    choice = env.marlin_input_dtype
    if choice == "int8":
        return INT8
    if choice == "fp8":
        cap = p.capability
        # is_device_capability(89) / is_device_capability_family(120): no capability fails.
        if cap is None or (cap != 89 and cap // 10 != 12):
            raise MarlinInputError(FP8_DEVICE_ERROR)
        return FP8_E4M3
    return None
