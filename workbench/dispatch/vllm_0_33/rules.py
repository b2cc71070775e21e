"""The entry points of this rule set, as `workbench.dispatch.versions.rules()` hands them out."""
from workbench.dispatch.vllm_0_33 import VLLM_VERSION
from workbench.dispatch.vllm_0_33.compressed_tensors import (SchemeError, SchemeInput,
                                                            trace_compressed_tensors)
from workbench.dispatch.vllm_0_33.gptq_awq import trace_awq_layer, trace_gptq_layer
from workbench.dispatch.vllm_0_33.inc import trace_inc_layer
from workbench.dispatch.vllm_0_33.runtime import kernel_runtime
from workbench.dispatch.vllm_0_33.selector import choose_mp_linear_kernel

__all__ = ["VLLM_VERSION", "SchemeError", "SchemeInput", "trace_compressed_tensors",
           "trace_inc_layer", "trace_gptq_layer", "trace_awq_layer", "kernel_runtime",
           "choose_mp_linear_kernel"]
