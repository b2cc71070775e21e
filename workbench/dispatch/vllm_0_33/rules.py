"""The rule set of this release, as `versions.rule_set()` hands it out: `RULES`.

Everything outside the version package reads this release's facts from the `RuleSet` built
here: the candidate lists, backend names, the env's accepted values, INC's accepted values and
token threshold, the compressed-tensors formats, the partition multiples each kernel (or INC
method) checks, Marlin's int8 scale levels, the docs table and the notes a trace gets. The
seams a later release replaces (a kernel class, the Marlin input dtype read, the GPTQ linear
method) are named here too: the modules call them through the rule set they are handed.
"""
from workbench.dispatch.versions import RuleSet
from workbench.dispatch.vllm_0_33 import VLLM_VERSION
from workbench.dispatch.vllm_0_33.config_gate import engine_start
from workbench.dispatch.vllm_0_33.compressed_tensors import (ACT_QUANT_FORMATS, FORMATS,
                                                            SchemeError, SchemeInput,
                                                            trace_compressed_tensors)
from workbench.dispatch.vllm_0_33.docs_table import CUDA_COLUMNS as DOCS_CUDA_COLUMNS
from workbench.dispatch.vllm_0_33.docs_table import DOCS_TABLE
from workbench.dispatch.vllm_0_33.docs_table import HARDWARE as DOCS_HARDWARE
from workbench.dispatch.vllm_0_33.env_rules import ENV_RULES as ENV
from workbench.dispatch.vllm_0_33.gptq_awq import (GPTQ_TYPES, gptq_linear, trace_awq_layer,
                                                   trace_gptq_layer)
from workbench.dispatch.vllm_0_33.inc import (DEFAULT_INT_PACKING_FORMAT, DIM_ALIGNMENT, INC_BACKENDS,
                                              INC_INT_PACKING_FORMATS, INC_PACKING_FORMATS,
                                              INC_SUPPORTED_BITS, MIN_TOKENS_FOR_INT8,
                                              trace_inc_layer)
from workbench.dispatch.vllm_0_33.load import (QUANTIZATION_METHODS, trace_config_gate,
                                               trace_quant_layer)
from workbench.dispatch.vllm_0_33.marlin_input import marlin_input_act_type
from workbench.dispatch.vllm_0_33.mp_kernels import (ALL_KERNELS, KERNELS_BY_NAME,
                                                     MARLIN_INT8_SCALE_LEVELS, marlin_padded_nk)
from workbench.dispatch.vllm_0_33.notes import ambiguity_notes
from workbench.dispatch.vllm_0_33.runtime import kernel_runtime
from workbench.dispatch.vllm_0_33.selector import (ERROR_HEADER, LINEAR_BACKEND_MP_KERNELS,
                                                   LINEAR_BACKENDS, POSSIBLE_KERNELS,
                                                   choose_mp_linear_kernel)


def shape_multiples(kernels) -> tuple:
    """(who checks it, K multiple, N multiple) for every partition-shape rule of `kernels`."""
    return tuple(
        [(k.__name__.removesuffix("LinearKernel") + (" (int4)" if k.__name__.startswith("Exllama")
                                                     else ""), *k.shape_multiples)
         for k in kernels if k.shape_multiples]
        + [("INC w4a8 on XPU", DIM_ALIGNMENT, DIM_ALIGNMENT)])


SHAPE_MULTIPLES = shape_multiples(ALL_KERNELS)

RULES = RuleSet.root(VLLM_VERSION, __package__, dict(
    # entry points
    choose_mp_linear_kernel=choose_mp_linear_kernel,
    trace_compressed_tensors=trace_compressed_tensors, trace_quant_layer=trace_quant_layer,
    trace_config_gate=trace_config_gate, kernel_runtime=kernel_runtime,
    marlin_padded_nk=marlin_padded_nk, ambiguity_notes=ambiguity_notes, engine_start=engine_start,
    SchemeInput=SchemeInput, SchemeError=SchemeError,
    # seams the modules call through the rule set
    trace_gptq_layer=trace_gptq_layer, trace_awq_layer=trace_awq_layer,
    trace_inc_layer=trace_inc_layer, gptq_linear=gptq_linear,
    marlin_input_act_type=marlin_input_act_type,
    LINEAR_BACKEND_MP_KERNELS=LINEAR_BACKEND_MP_KERNELS, QUANTIZATION_METHODS=QUANTIZATION_METHODS,
    # pinned values
    ENV=ENV, ACT_QUANT_FORMATS=ACT_QUANT_FORMATS, FORMATS=FORMATS, INC_BACKENDS=INC_BACKENDS,
    INC_PACKING_FORMATS=INC_PACKING_FORMATS, INC_INT_PACKING_FORMATS=INC_INT_PACKING_FORMATS,
    DEFAULT_INT_PACKING_FORMAT=DEFAULT_INT_PACKING_FORMAT, INC_SUPPORTED_BITS=INC_SUPPORTED_BITS,
    MIN_TOKENS_FOR_INT8=MIN_TOKENS_FOR_INT8, DIM_ALIGNMENT=DIM_ALIGNMENT,
    ERROR_HEADER=ERROR_HEADER, LINEAR_BACKENDS=LINEAR_BACKENDS, POSSIBLE_KERNELS=POSSIBLE_KERNELS,
    SHAPE_MULTIPLES=SHAPE_MULTIPLES, ALL_KERNELS=ALL_KERNELS, KERNELS_BY_NAME=KERNELS_BY_NAME,
    GPTQ_TYPES=GPTQ_TYPES, MARLIN_INT8_SCALE_LEVELS=MARLIN_INT8_SCALE_LEVELS,
    DOCS_HARDWARE=DOCS_HARDWARE, DOCS_TABLE=DOCS_TABLE, DOCS_CUDA_COLUMNS=DOCS_CUDA_COLUMNS,
))

__all__ = ["RULES", "VLLM_VERSION", "shape_multiples"]
