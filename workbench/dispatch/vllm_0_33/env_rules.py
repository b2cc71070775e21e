"""The environment variables and kernel-config values vLLM 0.33.0 reads for this dispatch.

`vllm/envs.py` (`env_with_choices` lists, `bool(int(...))` flags) and `vllm/config/kernel.py`
(`KernelConfig`, validated by pydantic: the error text is pydantic 2.14's, the version the
reference cases were recorded with).
"""
from workbench.dispatch.vllm_0_33.selector import LINEAR_BACKENDS

XPU_INC_BACKENDS = ["auto", "ark", "w4a16", "w4a8"]  # envs.py VLLM_XPU_INC_WNA16_BACKEND
MARLIN_INPUT_DTYPES = ["int8", "fp8"]  # envs.py:1560 VLLM_MARLIN_INPUT_DTYPE
KNOWN_KEYS = (
    "VLLM_DISABLED_KERNELS", "VLLM_CPU_INT4_W4A8", "VLLM_XPU_INC_WNA16_BACKEND",
    "VLLM_MARLIN_INPUT_DTYPE", "VLLM_BATCH_INVARIANT", "linear_backend",
    "linear_backend_per_quant",
)
PYDANTIC_URL = "https://errors.pydantic.dev/2.14/v/"

__all__ = ["LINEAR_BACKENDS", "XPU_INC_BACKENDS", "MARLIN_INPUT_DTYPES", "KNOWN_KEYS",
           "PYDANTIC_URL"]
