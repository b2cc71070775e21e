"""The entry points and pinned values of this rule set, as `versions.rule_set()` hands them out.

Everything outside the version package reads 0.33-pinned facts from the `RuleSet` built from
here: the candidate lists, backend names, the env's accepted values, INC's accepted values and
token threshold, the compressed-tensors formats, the partition multiples each kernel (or INC
method) checks, Marlin's int8 scale levels, the docs table and the notes a trace gets.
"""
from workbench.dispatch.vllm_0_33 import VLLM_VERSION
from workbench.dispatch.vllm_0_33.compressed_tensors import (ACT_QUANT_FORMATS, FORMATS,
                                                            SchemeError, SchemeInput,
                                                            trace_compressed_tensors)
from workbench.dispatch.vllm_0_33.docs_table import CUDA_COLUMNS as DOCS_CUDA_COLUMNS
from workbench.dispatch.vllm_0_33.docs_table import DOCS_TABLE
from workbench.dispatch.vllm_0_33.docs_table import HARDWARE as DOCS_HARDWARE
from workbench.dispatch.vllm_0_33.env_rules import ENV_RULES as ENV
from workbench.dispatch.vllm_0_33.gptq_awq import GPTQ_TYPES
from workbench.dispatch.vllm_0_33.inc import (DEFAULT_INT_PACKING_FORMAT, DIM_ALIGNMENT, INC_BACKENDS,
                                              INC_INT_PACKING_FORMATS, INC_PACKING_FORMATS,
                                              INC_SUPPORTED_BITS, MIN_TOKENS_FOR_INT8)
from workbench.dispatch.vllm_0_33.load import trace_config_gate, trace_quant_layer
from workbench.dispatch.vllm_0_33.mp_kernels import (ALL_KERNELS, KERNELS_BY_NAME,
                                                     MARLIN_INT8_SCALE_LEVELS, marlin_padded_nk)
from workbench.dispatch.vllm_0_33.notes import ambiguity_notes
from workbench.dispatch.vllm_0_33.runtime import kernel_runtime
from workbench.dispatch.vllm_0_33.selector import (ERROR_HEADER, LINEAR_BACKENDS,
                                                   POSSIBLE_KERNELS, choose_mp_linear_kernel)

# (who checks it, K multiple, N multiple) for every partition-shape rule of this version.
SHAPE_MULTIPLES = tuple(
    [(k.__name__.removesuffix("LinearKernel") + (" (int4)" if k.__name__.startswith("Exllama")
                                                 else ""), *k.shape_multiples)
     for k in ALL_KERNELS if k.shape_multiples]
    + [("INC w4a8 on XPU", DIM_ALIGNMENT, DIM_ALIGNMENT)])

__all__ = ["VLLM_VERSION", "SchemeError", "SchemeInput", "trace_compressed_tensors",
           "trace_quant_layer", "trace_config_gate",
           "kernel_runtime", "ambiguity_notes", "ENV", "DOCS_HARDWARE", "DOCS_TABLE",
           "DOCS_CUDA_COLUMNS",
           "choose_mp_linear_kernel", "ACT_QUANT_FORMATS", "FORMATS", "INC_BACKENDS",
           "INC_PACKING_FORMATS", "INC_INT_PACKING_FORMATS", "DEFAULT_INT_PACKING_FORMAT", "INC_SUPPORTED_BITS", "MIN_TOKENS_FOR_INT8", "DIM_ALIGNMENT",
           "ERROR_HEADER", "LINEAR_BACKENDS", "POSSIBLE_KERNELS", "SHAPE_MULTIPLES",
           "ALL_KERNELS", "KERNELS_BY_NAME", "GPTQ_TYPES", "marlin_padded_nk", "MARLIN_INT8_SCALE_LEVELS"]
