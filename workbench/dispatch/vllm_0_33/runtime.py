"""What the selected kernel computes on the platform, after selection.

Selection is not the end of the story: several kernels pick their real path when weights are
processed (`process_weights_after_loading`) or depend on which compiled vLLM build loads. Each
MP kernel class answers for itself (`MPKernel.runtime`); this module looks the class up.
"""
from __future__ import annotations

from workbench.dispatch.env import Env
from workbench.dispatch.types import DType, MPConfig, Runtime
from workbench.dispatch.versions import takes_rules
from workbench.dispatch.vllm_0_33.mp_kernels import CT_PACKING
from workbench.platforms import Platform


@takes_rules
def kernel_runtime(R, kernel: str, c: MPConfig, p: Platform, env: Env, packing: str = CT_PACKING,
                   input_schema: str | None = None, model_dtype: DType | None = None) -> Runtime:
    """`R.KERNELS_BY_NAME[kernel].runtime(...)`: `c` holds the act_type the kernel runs with."""
    return R.KERNELS_BY_NAME[kernel].runtime(c, p, env, packing, input_schema, model_dtype)
