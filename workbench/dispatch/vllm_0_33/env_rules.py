"""The environment variables and kernel-config values vLLM 0.33.0 reads for this dispatch.

`vllm/envs.py` (`env_with_choices` lists, `bool(int(...))` flags) and `vllm/config/kernel.py`
(`KernelConfig`, validated by pydantic: the error text is pydantic 2.14's, the version the
reference cases were recorded with).
"""
from workbench.dispatch.env import EnvRules
from workbench.dispatch.vllm_0_33.selector import LINEAR_BACKENDS

XPU_INC_BACKENDS = ["auto", "ark", "w4a16", "w4a8"]  # envs.py VLLM_XPU_INC_WNA16_BACKEND
MARLIN_INPUT_DTYPES = ["int8", "fp8"]  # envs.py:1560 VLLM_MARLIN_INPUT_DTYPE
# Every key this dispatch reads, with what an unset key means, spelled as a value the env
# accepts ("" where vLLM has no string for it: the key is left unset).
UNSET_VALUES = {
    "VLLM_DISABLED_KERNELS": "",  # envs.py:1219-1222: [] when not in os.environ
    "VLLM_CPU_INT4_W4A8": "1",  # envs.py:924
    "VLLM_XPU_INC_WNA16_BACKEND": "",  # envs.py:2237-2238: unset reads "auto"
    "VLLM_MARLIN_INPUT_DTYPE": "",  # envs.py:1560-1561: None
    "VLLM_BATCH_INVARIANT": "0",  # envs.py:638
    "linear_backend": "auto",  # config/kernel.py:363
    "linear_backend_per_quant": "",  # config/kernel.py:392-394: None
}
KNOWN_KEYS = tuple(UNSET_VALUES)
PYDANTIC_URL = "https://errors.pydantic.dev/2.14/v/"

ENV_RULES = EnvRules(tuple(LINEAR_BACKENDS), tuple(XPU_INC_BACKENDS), tuple(MARLIN_INPUT_DTYPES),
                     tuple(UNSET_VALUES.items()), PYDANTIC_URL)

__all__ = ["ENV_RULES", "LINEAR_BACKENDS", "XPU_INC_BACKENDS", "MARLIN_INPUT_DTYPES", "KNOWN_KEYS",
           "UNSET_VALUES", "PYDANTIC_URL"]
