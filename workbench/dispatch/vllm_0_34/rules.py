"""vLLM 0.34.0's rule set: 0.33.0's with only what 0.34.0 changed, each change at its file:line.

Everything not named here is 0.33.0's rule, unchanged; its citations are carried to 0.34.0's
lines by `LINES_MOVED` (lines_moved.json, made from the two sdists by
`citations.moved_lines`). Paths are under vllm/ (KERNELS: its mixed_precision kernels).
"""
import dataclasses
import json
from pathlib import Path

from workbench.dispatch.trace import Stage
from workbench.dispatch.types import BF16, FP16, Runtime, activation_name, dtype
from workbench.dispatch.versions import Change, rule_set, takes_rules
from workbench.dispatch.vllm_0_33 import gptq_awq
from workbench.dispatch.vllm_0_33 import mp_kernels as K
from workbench.dispatch.vllm_0_34 import VLLM_VERSION

_base = rule_set("0.33.0")
KERNELS = "model_executor/kernels/linear/mixed_precision/"
QUANT = "model_executor/layers/quantization/"


class MarlinLinearKernel(K.MarlinLinearKernel):
    # marlin.py:46-49: one space now; 8-bit activations are refused first, so the W4A8 paths
    # of 0.33.0's runtime (its process_weights_after_loading: the Change's `was`) are never reached
    types_reason = "Quant type ({}) not supported by Marlin, supported types are: {}"

    @classmethod
    def can_implement(cls, c, p):
        if p.is_cuda() and c.act_type.itemsize == 1:  # marlin.py:40-41, after the CUDA check
            return False, "Marlin does not support 8-bit activations"
        return super().can_implement(c, p)


class ConchLinearKernel(K.ConchLinearKernel):
    @classmethod
    def can_implement(cls, c, p):
        if c.act_type not in (FP16, BF16):  # conch.py:30-31, its first check
            return False, "ConchLinearKernel only supports 16-bit activations"
        return super().can_implement(c, p)


_NEW = {k.__name__: k for k in (MarlinLinearKernel, ConchLinearKernel)}
ALL_KERNELS = tuple(_NEW.get(k.__name__, k) for k in _base.ALL_KERNELS)
POSSIBLE_KERNELS = {device: [_NEW.get(k.__name__, k) for k in kernels]
                    for device, kernels in _base.POSSIBLE_KERNELS.items()}

# envs.py:654-660: the variable is gone, and engine start refuses it (platforms/interface.py:1492)
REMOVED = (("VLLM_MARLIN_INPUT_DTYPE",
            "Marlin no longer supports 8-bit activations. Use `--quantization humming` and set "
            "the activation dtype with VLLM_HUMMING_INPUT_QUANT_CONFIG, e.g. "
            "'{\"dtype\":\"int8\"}'."),)
ENV = dataclasses.replace(
    _base.ENV, marlin_input_dtypes=(), removed=REMOVED,
    unset_pairs=tuple(kv for kv in _base.ENV.unset_pairs if kv[0] != "VLLM_MARLIN_INPUT_DTYPE"))


def engine_start(p, env):
    """0.33.0's checks, then `CpuPlatform.check_and_update_config` (platforms/cpu.py:242-243)."""
    refused = _base.engine_start(p, env)
    if refused is None and p.is_cpu() and p.cpu_arch == "x86" and not p.triton:
        refused = ("RuntimeError", "vLLM on x86 CPUs requires Triton (triton-cpu).")
    return refused


BATCH_INVARIANT_SOURCE = QUANT + "auto_gptq.py:488"


@takes_rules
def gptq_linear(R, bits, sym, group, layer, p, env, t, *, reads_env, method="AutoGPTQLinearMethod"):
    """AutoGPTQLinearMethod: in batch-invariant mode no Marlin check and no kernel selection
    (auto_gptq.py:323-331, 365-367); the weight is dequantized per call (auto_gptq.py:488-497)."""
    if not env.batch_invariant:
        return _base.entries["gptq_linear"](R, bits, sym, group, layer, p, env, t,
                                            reads_env=reads_env, method=method)
    t = gptq_awq.linear_method(t, method, scheme="AutoGPTQLinearMethod")
    t = t.noted("Using dequantize + batch-invariant matmul for AutoGPTQLinearMethod")
    return dataclasses.replace(t, reached=Stage.CREATE_WEIGHTS, runtime_detail=Runtime(
        "AutoGPTQLinearMethod", activation_name(dtype(layer.params_dtype)),
        gptq_awq.GPTQ_TYPES[(bits, sym)], "gptq_linear_batch_invariant", BATCH_INVARIANT_SOURCE,
        emulation=K.W4A16_PATH))


# QuantizationMethods (quantization/__init__.py:15-51): w4afp8, lut_b_moe and mxfp4_hadamard32
# are new, fp_quant is gone
_methods = [m for m in _base.QUANTIZATION_METHODS if m != "fp_quant"]
_after_fp8 = _methods.index("fp8") + 1
QUANTIZATION_METHODS = (_methods[:_after_fp8] + ["w4afp8"] + _methods[_after_fp8:]
                        + ["lut_b_moe", "mxfp4_hadamard32"])

CHANGES = (  # (rule, what, its 0.34.0 file:line, the 0.33.0 file:line it replaces)
    Change("MarlinLinearKernel", "Marlin refuses 8-bit activations (int8, fp8) first: its "
           "W4A8 compute path is gone", KERNELS + "marlin.py:40-41", KERNELS + "marlin.py:77-142"),
    Change("MarlinLinearKernel", "the quant-type reason lost its double space",
           KERNELS + "marlin.py:46-49", KERNELS + "marlin.py:43-47"),
    Change("ConchLinearKernel", "Conch refuses activations other than float16 / bfloat16 first",
           KERNELS + "conch.py:30-31", KERNELS + "conch.py:29"),
    Change("marlin_input_act_type", "VLLM_MARLIN_INPUT_DTYPE is no longer read: "
           "compressed-tensors WNA16, AutoGPTQ and AutoAWQ keep the params dtype",
           QUANT + "auto_gptq.py:360", QUANT + "auto_gptq.py:264"),
    Change("ENV", "VLLM_MARLIN_INPUT_DTYPE is removed; engine start refuses it",
           "envs.py:654-660", "envs.py:1560-1561"),
    Change("engine_start", "an x86 CPU without Triton (triton-cpu) fails at config time",
           "platforms/cpu.py:242-243", "platforms/cpu.py:241-244"),
    Change("gptq_linear", "VLLM_BATCH_INVARIANT: AutoGPTQ skips the Marlin check and kernel "
           "selection and runs a dequantize + batch-invariant matmul",
           QUANT + "auto_gptq.py:323-331", QUANT + "auto_gptq.py:317-320"),
    Change("QUANTIZATION_METHODS", "the method names vLLM accepts: w4afp8, lut_b_moe and "
           "mxfp4_hadamard32 added, fp_quant removed", QUANT + "__init__.py:15-51",
           QUANT + "__init__.py:15-49"),
)

RULES = _base.derive(
    VLLM_VERSION, __package__, CHANGES,
    ALL_KERNELS=ALL_KERNELS, KERNELS_BY_NAME={k.__name__: k for k in ALL_KERNELS},
    POSSIBLE_KERNELS=POSSIBLE_KERNELS, ENV=ENV, engine_start=engine_start,
    marlin_input_act_type=lambda env, p: None, gptq_linear=gptq_linear,
    QUANTIZATION_METHODS=QUANTIZATION_METHODS,
    LINES_MOVED=json.loads((Path(__file__).with_name("lines_moved.json")).read_text()),
    OWN_CITATIONS=frozenset({BATCH_INVARIANT_SOURCE}),
    # cpu.py:6 now calls the CPU ops from vllm._cpu_ops: cpu_gemm_wna16 reaches torch.ops._C there
    CITES_MOVED={("_custom_ops.py", 4638): "_cpu_ops.py:1516"},  # (the base's file, line)
)
