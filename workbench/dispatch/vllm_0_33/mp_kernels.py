"""The 14 mixed-precision kernels of vLLM 0.33.0, one class each, named as in vLLM.

Each class holds `min_capability` and `can_implement(c, p) -> (ok, reason)`, with the checks
in vLLM's order and reason strings byte-identical to vLLM's, quirks included (the two spaces
in "supported by  Marlin", "supportedgot", and so on). `vllm_file` names the file modelled,
relative to `vllm/model_executor/kernels/linear/mixed_precision/` unless it says otherwise.

Python's own semantics are kept where vLLM relies on them: `x % -1 == 0`, and `x % 0` raises
ZeroDivisionError (a group size of 0 crashes vLLM's Dynamic4bit check; so does ours).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar

from workbench.dispatch.env import Env
from workbench.dispatch.vllm_0_33 import humming_input
from workbench.dispatch.vllm_0_33.errors import VllmError
from workbench.dispatch.types import (BF16, FP16, FP32, FP8_E4M3, INT8, ST, DType, MPConfig,
                                      Runtime, activation_name)
from workbench.platforms import (DYN_QUANT_OP, RDNA3_OP, ZENTORCH_DA8W4_OP, ZENTORCH_WOQ_OPS,
                                 Platform)

Result = tuple[bool, "str | None"]

# How a checkpoint packs int4 weights: compressed-tensors packs along K with input_dim ==
# packed_dim == 1; GPTQ along K with dim 0; AWQ along N (converted to GPTQ order on load).
CT_PACKING = "compressed-tensors"
PACKINGS = (CT_PACKING, "gptq", "awq")
# The workbench paths that compute each kind of layer on a CPU (w4a8_kernels.registry names).
W4A16_PATH, W4A8_PATH = "w4a16_fallback", "w4a8_native"
MARLIN_INT8_PATH = "marlin_w4a8_int8"  # composed in workbench.execution
# marlin_act_int8_process_scales (utils/marlin_utils.py:544-548): with int8 activations the
# group scales become int16 multiples of max(s) / this (the path above computes with it).
MARLIN_INT8_SCALE_LEVELS = 4096
KERNELS_DIR = "model_executor/kernels/linear/mixed_precision/"
MARLIN_UTILS = "model_executor/layers/quantization/utils/marlin_utils.py"
QUANT_UTILS = "model_executor/layers/quantization/utils/quant_utils.py"


class MPKernel:
    """Base: vLLM's `MPLinearKernel` classmethods."""

    vllm_file: ClassVar[str]
    min_capability: ClassVar[int]
    # The op `apply_weights` calls and where (file:line under `vllm/`), for weight-only kernels.
    op: ClassVar[str] = ""
    op_source: ClassVar[str] = ""
    # (K, N) the partition must be multiples of, where the class checks it: the one copy of
    # the rule that can_implement, the alignment tables and the models read.
    shape_multiples: ClassVar[tuple[int, int] | None] = None

    @classmethod
    def can_implement(cls, c: MPConfig, p: Platform) -> Result:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def runtime(cls, c: MPConfig, p: Platform, env: Env, packing: str = CT_PACKING,
                input_schema: str | None = None, model_dtype: DType | None = None) -> Runtime:
        """What the kernel computes once selected (default: weight-only on 16-bit activations).

        `packing` is how the checkpoint packs its int4 weights (`PACKINGS`); `input_schema` the
        activation schema a scheme attached to the layer ("int8", "int4"; Humming reads it);
        `model_dtype` the layer's params dtype (its scales' dtype) when `c.act_type` is not it.
        """
        # A 1-byte act_type (VLLM_MARLIN_INPUT_DTYPE, read before selection by AutoGPTQ /
        # AutoAWQ) reaches only the kernels whose can_implement admits it: Marlin, Humming,
        # Machete and Conch say what they do with it; the other weight-only kernels refuse it.
        return Runtime(cls.__name__, activation_name(c.act_type), str(c.weight_type), cls.op,
                       cls.op_source, emulation=W4A16_PATH)


def _fmt(types) -> str:
    """Lists print `[ScalarType.a, ...]`, tuples `(ScalarType.a, ...)`, as Python prints them."""
    return repr(types)


# --------------------------------------------------------------------------- CUDA


class CutlassW4A8LinearKernel(MPKernel):
    vllm_file = "cutlass.py"
    min_capability = 90
    shape_multiples = (128, 128)
    op = "ops.cutlass_w4a8_mm"
    op_source = KERNELS_DIR + "cutlass.py:116"

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_cuda():
            return False, "CUTLASS only supported on CUDA"
        if not p.is_device_capability(90):
            return False, "CUTLASS W4A8 requires compute capability of 90 (Hopper)"
        if c.act_type != FP8_E4M3:
            return False, "CUTLASS W4A8 only supports FP8 (e4m3) activations"
        if c.zero_points:
            return False, "Zero points not supported by CUTLASS W4A8"
        if c.weight_type != ST["int4"]:
            return False, f"Quant type ({c.weight_type}) not supported by CUTLASS W4A8, only supported int4"
        if c.group_size != 128:
            return False, "Only group_size 128 is supported"
        k, n = c.partition_weight_shape
        mk, mn = cls.shape_multiples
        if k % mk or n % mn:
            return False, f"K and N must be divisible by {mk}, got {c.partition_weight_shape}"
        if c.out_type != BF16:
            return False, f"Only bfloat16 output type currently supportedgot c.out_type={c.out_type}"
        return True, None

    @classmethod
    def runtime(cls, c, p, env, packing=CT_PACKING, input_schema=None, model_dtype=None):
        return Runtime(cls.__name__, "fp8", str(c.weight_type), cls.op, cls.op_source)


def machete_types(zero_points: bool) -> list:
    """`query_machete_supported_quant_types` (layers/quantization/utils/machete_utils.py)."""
    return [ST["uint4"], ST["uint8"]] if zero_points else [ST["uint4b8"], ST["uint8b128"]]


def machete_group_sizes(act_type) -> list[int]:
    """`query_machete_supported_group_sizes`: 16-bit acts allow 64 too."""
    return [-1, 64, 128] if act_type in (FP16, BF16) else [-1, 128]


class MacheteLinearKernel(MPKernel):
    vllm_file = "machete.py"
    min_capability = 90
    shape_multiples = (64, 128)  # check_machete_supports_shape: prepacked block [64, 128]
    op = "ops.machete_mm"
    op_source = KERNELS_DIR + "machete.py:114"

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_cuda():
            return False, "Machete only supported on CUDA"
        if not p.is_device_capability(90):
            return False, "Machete requires compute capability of 90 (Hopper)"
        types = machete_types(c.zero_points)
        if c.weight_type not in types:
            return False, f"Quant type ({c.weight_type}) not supported by Machete, supported types are: {_fmt(types)}"
        groups = machete_group_sizes(c.act_type)
        if c.group_size not in groups:
            return False, f"Group size ({c.group_size}) not supported by Machete, supported group sizes are: {groups}"
        # check_machete_supports_shape: prepacked block shape [64, 128].
        k, n = c.partition_weight_shape
        mk, mn = cls.shape_multiples
        if k % mk != 0:
            return False, f"Input features size must be divisible by {mk}"
        if n % mn != 0:
            return False, f"Output features size must be divisible by {mn}"
        return True, None

    @classmethod
    def runtime(cls, c, p, env, packing=CT_PACKING, input_schema=None, model_dtype=None):
        """can_implement admits an int8 act_type (group sizes [-1, 128]); process_weights
        then prepacks with a_type = group_scales_type = act_type (machete.py:66-71), and the
        build generates prepack layouts for fp16 / bf16 activations only (GPTQ and AWQ type
        configs, csrc/quantization/machete/generate.py:555-600; W4A8 is commented out at 603), so
        prepack_B_dispatch raises (generate.py:234-240) through STD_TORCH_CHECK_NOT_IMPLEMENTED
        (csrc/torch_utils.h:18), a std::runtime_error that reaches Python as RuntimeError."""
        base = super().runtime(c, p, env)
        if c.act_type.itemsize != 1:
            return base
        a_type = _TORCH_SCALAR_NAME[c.act_type.name]
        return replace(
            base, emulation=None, fails_at="load", error_type="RuntimeError",
            error=(f"NotImplementedError: prepack_B_dispatch(..) is not implemented for atype = "
                   f"{a_type}, b_type = {c.weight_type}, with_group_scales_type= {a_type}"),
            failing_op="_C.machete_prepack_B", source=KERNELS_DIR + "machete.py:66",
            caveat=("Machete's prepack has no int8 or fp8 activation layout in this build, so "
                    "loading fails inside the compiled op. Its message starts with "
                    "'prepack_B_dispatch, <file>:<line>, ', where the file and line come from "
                    "the build (STD_TORCH_CHECK in torch/headeronly/util/Exception.h), so the "
                    "text shown omits that prefix."))


# torch's c10 ScalarType names (torch/headeronly/core/ScalarType.h), as toString prints them.
_TORCH_SCALAR_NAME = {"int8": "Char", "float8_e4m3fn": "Float8_e4m3fn"}


MARLIN_SUPPORTED_GROUP_SIZES = [-1, 32, 64, 128]


def marlin_padded_nk(n: int, k: int, group_size: int) -> tuple[int, int]:
    """`marlin_padded_nk` (layers/quantization/utils/marlin_utils.py): a tile-misaligned shard
    is zero-padded to the cheaper of (n % 64, k % lcm(128, g)) and (n % 128, k % lcm(64, g))."""
    g = group_size if group_size > 0 else 1
    cands = ((-(-n // 64) * 64, -(-k // math.lcm(128, g)) * math.lcm(128, g)),
             (-(-n // 128) * 128, -(-k // math.lcm(64, g)) * math.lcm(64, g)))
    return min(cands, key=lambda nk: (nk[0] * nk[1], nk[0] + nk[1]))


def marlin_types(zero_points: bool, p: Platform) -> list:
    """`query_marlin_supported_quant_types(has_zp)` (layers/quantization/utils/marlin_utils.py).

    It reads the platform's own capability (not the loop's): below 75, or unknown, gives [].
    """
    if p.is_cpu():
        return [ST["uint4"]] if zero_points else [ST["uint4b8"]]
    if p.is_xpu():
        return [ST["uint4"], ST["uint4b8"]]
    if not p.is_rocm() and (p.capability if p.capability is not None else -1) < 75:
        return []
    if zero_points:
        return [ST["uint4"]]
    return [ST["uint4b8"], ST["uint8b128"], ST["float8_e4m3fn"], ST["float4_e2m1f"]]


class MarlinLinearKernel(MPKernel):
    vllm_file = "marlin.py"
    min_capability = 75
    op = "torch.ops.vllm.marlin_gemm"
    op_source = MARLIN_UTILS + ":794"
    # marlin.py:45-46: the two f-strings join with two spaces
    types_reason = "Quant type ({}) not supported by  Marlin, supported types are: {}"

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_cuda():
            return False, "Marlin only supported on CUDA"
        types = marlin_types(c.zero_points, p)
        if c.weight_type not in types:
            return False, cls.types_reason.format(c.weight_type, _fmt(types))
        if c.group_size not in MARLIN_SUPPORTED_GROUP_SIZES:
            return False, (f"Group size ({c.group_size}) not supported by Marlin, supported group "
                           f"sizes are: {MARLIN_SUPPORTED_GROUP_SIZES}")
        # A group straddling TP ranks cannot be fixed by padding; tile misalignment can.
        k = c.partition_weight_shape[0]
        if c.group_size != -1 and c.group_size < c.full_weight_shape[0] and k % c.group_size != 0:
            return False, f"in_features per partition {k} is not divisible by group_size = {c.group_size}."
        return True, None

    @classmethod
    def runtime(cls, c, p, env, packing=CT_PACKING, input_schema=None, model_dtype=None):
        """`c.act_type` is what the scheme left after selection: `VLLM_MARLIN_INPUT_DTYPE`
        turns it into int8 or fp8 (`marlin_input_act_type`)."""
        base = super().runtime(c, p, env)
        eight_bit = c.act_type.itemsize == 1
        act = activation_name(c.act_type)
        if eight_bit and c.weight_type != ST["uint4b8"]:  # marlin.py:79-82, the first assert
            return replace(base, activation=act, emulation=None, fails_at="load",
                           error="W8A8 is not supported by marlin kernel.",
                           error_type="AssertionError", source=KERNELS_DIR + "marlin.py:80")
        k, n = c.partition_weight_shape
        if packing == "awq" and c.zero_points and c.group_size == -1 and k < c.full_weight_shape[0]:
            # AutoAWQMarlinLinearMethod sizes a channelwise layer's groups by the full K
            # (auto_awq.py:434, 469: K per partition // K zero-point rows, 0 on a K shard);
            # marlin.py:145-153 unpacks them as one group, and unpack_cols asserts the shape.
            pf = 32 // c.weight_type.size_bits
            return replace(base, activation=act if eight_bit else base.activation, emulation=None,
                           fails_at="load", error_type="AssertionError",
                           error=f"packed_q_w.shape = torch.Size([0, {n // pf}]) size_k = 1, "
                                 f"size_n = {n} pack_Factor = {pf}",
                           source=QUANT_UTILS + ":877")
        if not eight_bit:
            return base
        if c.act_type == FP8_E4M3:  # marlin.py:84: fp8 preprocess, scales x 512
            return replace(base, activation=act, op="per-token fp8 quant + " + cls.op,
                           emulation=None, source=KERNELS_DIR + "marlin.py:84")
        if c.group_size == -1 or k // c.group_size <= 1:
            # marlin.py:135-142 leaves input_global_scale None for a single group; the forward
            # then multiplies the activation scales by None (marlin_utils.py:786).
            return replace(base, activation=act, emulation=None, fails_at="forward",
                           error="unsupported operand type(s) for *: 'Tensor' and 'NoneType'",
                           error_type="TypeError", source=MARLIN_UTILS + ":786")
        # marlin.py:135-137: group scales become int16 multiples of max/4096 (see execution).
        return replace(base, activation=act, op="per_token_quant_int8 + " + cls.op,
                       emulation=MARLIN_INT8_PATH, source=KERNELS_DIR + "marlin.py:135")


_CONCH_TYPES = [ST["uint4"], ST["uint8"], ST["uint4b8"], ST["uint8b128"]]
_CONCH_GROUPS = [-1, 128]


class ConchLinearKernel(MPKernel):
    vllm_file = "conch.py"
    min_capability = 80
    op = "conch.ops.quantization.gemm.mixed_precision_gemm"
    op_source = KERNELS_DIR + "conch.py:125"

    @classmethod
    def can_implement(cls, c, p):
        # No platform check in vLLM: only the package decides.
        if c.weight_type not in _CONCH_TYPES:
            return False, f"Weight type ({c.weight_type}) not supported by ConchLinearKernel, supported types are: {_fmt(_CONCH_TYPES)}"
        if c.group_size not in _CONCH_GROUPS:
            return False, f"Group size ({c.group_size}) not supported by ConchLinearKernel, supported group sizes are: {_CONCH_GROUPS}"
        if not p.has_package("conch"):
            return False, ("conch-triton-kernels is not installed, please install it via "
                           "`pip install conch-triton-kernels` and try again!")
        return True, None

    @classmethod
    def runtime(cls, c, p, env, packing=CT_PACKING, input_schema=None, model_dtype=None):
        """Conch never reads act_type: process_weights only lays out the weights, scales and
        zero points (conch.py:60-117) and apply hands the layer's input to mixed_precision_gemm
        as it comes (conch.py:137-148). A 1-byte act_type still runs weight-only, on the
        model's dtype (the scales' dtype, which create_weights took from params_dtype)."""
        base = super().runtime(c, p, env)
        if c.act_type.itemsize != 1:
            return base
        caveat = None
        if model_dtype is None:  # an MP config alone does not say the model's dtype
            model_dtype = BF16
            caveat = ("Conch ignores the int8/fp8 act_type and computes on the model's dtype, "
                      "which an MP config does not give: bf16 is assumed here.")
        return replace(base, activation=activation_name(model_dtype),
                       source=KERNELS_DIR + "conch.py:140", caveat=caveat)


_EXLLAMA_TYPES = [ST["uint4b8"], ST["uint8b128"]]


class ExllamaLinearKernel(MPKernel):
    vllm_file = "exllama.py"
    min_capability = 60
    shape_multiples = (1, 8)  # for int4: N % (32 // num_bits)
    op = "ops.gptq_gemm"
    op_source = KERNELS_DIR + "exllama.py:140"

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_cuda_alike():
            return False, "Exllama is only supported on CUDA and ROCm"
        if c.partition_weight_shape[1] % (32 // c.weight_type.size_bits) != 0:
            return False, ("Output features must be a multiple of the pack factor (32 / num_bits) "
                           "so that we can correctly pack the zero points")
        if c.act_type != FP16:
            return False, "Exllama only supports float16 activations"
        if c.weight_type not in _EXLLAMA_TYPES:
            return False, f"Quant type ({c.weight_type}) not supported by Exllama, supported types are: {_fmt(_EXLLAMA_TYPES)}"
        if c.group_size <= 0:
            return False, f"Group size ({c.group_size}) must be positive, Exllama does not support channelwise quantization"
        if c.full_weight_shape[0] % c.group_size != 0:
            return False, (f"Group size ({c.group_size}) does not evenly divide the number of input "
                           f"features ({c.full_weight_shape[0]})")
        return True, None


_TRITON_TYPES = [ST["uint4b8"], ST["uint4"]]
_TRITON_GROUPS = [-1, 32, 64, 128, 256]


class TritonW4A16LinearKernel(MPKernel):
    vllm_file = "triton_w4a16.py"
    min_capability = 0
    shape_multiples = (1, 8)
    op = "torch.ops.vllm.triton_w4a16_gemm"
    op_source = KERNELS_DIR + "triton_w4a16.py:299"

    @classmethod
    def can_implement(cls, c, p):
        if not (p.is_rocm() or p.is_cuda()):
            return False, "TritonW4A16LinearKernel requires CUDA or ROCm"
        if c.weight_type not in _TRITON_TYPES:
            return False, f"Quant type {c.weight_type} not supported; supported: {_fmt(_TRITON_TYPES)}"
        if c.act_type not in (FP16, BF16):
            return False, "Only float16/bfloat16 activations are supported"
        n = c.partition_weight_shape[1]
        mn = cls.shape_multiples[1]
        if n % mn != 0:
            return False, f"Output features ({n}) must be divisible by {mn} ({mn} int4 values packed per int32)"
        gs = c.group_size
        if gs not in _TRITON_GROUPS and gs != c.full_weight_shape[0]:
            return False, (f"Group size {gs} not supported; supported: {_TRITON_GROUPS} "
                           f"or full K ({c.full_weight_shape[0]})")
        k = c.partition_weight_shape[0]
        eff = gs if gs != -1 else k
        if k % eff != 0:
            return False, f"Input features {k} not divisible by group size {eff}"
        return True, None


class HummingLinearKernel(MPKernel):
    vllm_file = "humming.py"
    min_capability = 75
    op = "apply_humming_linear"
    op_source = KERNELS_DIR + "humming.py:87"

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_cuda():
            return False, "Humming is only supported on CUDA"
        if not p.has_package("humming"):
            return False, "Humming is not installed"
        if c.act_type.itemsize == 1 and c.act_type not in (INT8, FP8_E4M3):
            return False, f"Activation type ({c.act_type}) not supported by Humming"
        return True, None

    @classmethod
    def runtime(cls, c, p, env, packing=CT_PACKING, input_schema=None, model_dtype=None):
        """What Humming computes after `check_and_fallback_input_schema` (humming_input.py):
        an int8 / fp8 act_type, else the scheme's input config (`input_schema`, a
        `humming_input.InputConfig`), else 16-bit; kept, dropped to 16-bit or fallen back."""
        base = super().runtime(c, p, env)
        param, caveat = model_dtype, None
        if param is None:  # an MP config alone: a 16-bit act_type is the params dtype
            param = c.act_type if c.act_type in (FP16, BF16) else BF16
            if c.act_type not in (FP16, BF16):
                caveat = ("the layer's params dtype is not given: bfloat16 is assumed for "
                          "Humming's input-schema decision")
        try:
            d = humming_input.humming_layer_input(
                c.weight_type.size_bits, c.group_size, c.zero_points, c.act_type.name,
                input_schema, param.name, p.capability)
        except VllmError as exc:
            where = (humming_input.VLLM_LINEAR + ":108" if "zero_point" in exc.message
                     else humming_input.VLLM_SCHEMA + (":270" if p.capability is None else ":396"))
            return replace(base, fails_at="load", error=exc.message, error_type=exc.error_type,
                           source=where, caveat=caveat)
        # A 16-bit a_dtype (the fallback's last step names the params dtype) quantizes nothing.
        a = d.schema.a_dtype if d.schema.bits < 16 else None
        requested = d.requested.a_dtype if d.requested.bits < 16 else None
        act = activation_name(param) if a is None else _HUMMING_ACT.get(a.name, a.name)
        asked = (activation_name(param) if requested is None
                 else _HUMMING_ACT.get(requested.name, requested.name))
        emulation = {"int8": W4A8_PATH if d.schema.group_size == 0 else None,
                     "bf16": W4A16_PATH, "fp16": W4A16_PATH}.get(act)
        return replace(base, activation=act, emulation=emulation, source=d.source,
                       activation_group_size=(d.schema.group_size or None) if a else None,
                       activation_dtype=None if a is None else a.name,
                       activation_requested=asked if asked != act else None,
                       warning=d.warning, caveat=caveat)


# Humming's dtype names -> `Runtime.activation` (the exact name stays in `activation_dtype`).
_HUMMING_ACT = {"int8": "int8", "int4": "int4", "float8e4m3": "fp8", "float8e3m4": "fp8",
                "float8e5m2": "fp8"}


# --------------------------------------------------------------------------- ROCm


class RDNA3W4A16LinearKernel(MPKernel):
    vllm_file = "rdna3_w4a16.py"
    min_capability = 60
    shape_multiples = (1, 8)
    op = "ops.gptq_gemm_rdna3"
    op_source = KERNELS_DIR + "rdna3_w4a16.py:158"
    _types = [ST["uint4b8"]]

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_rocm():
            return False, "RDNA3 W4A16 kernel is ROCm-only"
        if "gfx1100" not in (p.gfx or ""):  # vllm/platforms/rocm.py on_gfx1100()
            return False, "RDNA3 W4A16 kernel requires gfx1100"
        if not p.has_op(RDNA3_OP):
            return False, "torch.ops._rocm_C.gptq_gemm_rdna3 missing — rebuild C++ extension"
        if c.act_type not in (FP16, BF16):
            return False, "RDNA3 W4A16 kernel only supports fp16 and bf16"
        if c.weight_type not in cls._types:
            return False, f"Quant type ({c.weight_type}) not supported by RDNA3 W4A16 kernel; supported: {_fmt(cls._types)}"
        if c.group_size <= 0:
            return False, "RDNA3 W4A16 kernel does not support channelwise quantization"
        if c.full_weight_shape[0] % c.group_size != 0:
            return False, f"Group size ({c.group_size}) does not evenly divide K ({c.full_weight_shape[0]})"
        mn = cls.shape_multiples[1]
        if c.partition_weight_shape[1] % mn != 0:
            return False, f"Output features must be a multiple of {mn} for the RDNA3 W4A16 kernel (qzeros packing)"
        return True, None


def on_gfx1x(p: Platform) -> bool:
    """`on_gfx1x()` in vllm/platforms/rocm.py: gfx11/gfx12 and not CDNA (gfx9, gfx1250)."""
    gfx = p.gfx or ""
    rdna = any(a in gfx for a in ("gfx11", "gfx12"))
    cdna = any(a in gfx for a in ("gfx9", "gfx1250"))
    return p.is_rocm() and rdna and not cdna


class RDNAHybridW4A16LinearKernel(MPKernel):
    vllm_file = "rdna_hybrid_w4a16.py"
    min_capability = 0
    shape_multiples = (16, 1)
    op = "torch.ops.vllm.rdna_hybrid_w4a16_apply"
    op_source = KERNELS_DIR + "rdna_hybrid_w4a16.py:759"
    _types = [ST["uint4b8"], ST["uint4"]]
    _groups = [32, 64, 128]

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_rocm():
            return False, "RDNAHybridW4A16LinearKernel only targets ROCm"
        if not on_gfx1x(p):
            return False, "RDNAHybridW4A16LinearKernel only targets gfx11/gfx12"
        if c.weight_type not in cls._types:
            return False, f"Quant type {c.weight_type} not supported; supported: {_fmt(cls._types)}"
        if c.act_type not in (FP16, BF16):
            return False, "requires float16 or bfloat16 activations"
        gs = c.group_size
        if gs not in cls._groups:
            return False, f"Group size {gs} not supported; supported: {cls._groups}"
        k, mk = c.partition_weight_shape[0], cls.shape_multiples[0]
        if k % mk != 0:
            return False, f"K={k} must be divisible by {mk}"
        if k % gs != 0:
            return False, f"K={k} must be divisible by group_size={gs}"
        return True, None


# --------------------------------------------------------------------------- XPU


class XPUW4A8IntLinearKernel(MPKernel):
    vllm_file = "xpu.py"
    min_capability = -1
    shape_multiples = (8, 8)
    op = "torch.ops._xpu_C.int4_gemm_w4a8"
    op_source = KERNELS_DIR + "xpu.py:203"

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_xpu():
            return False, "XPUW4A8Int only supported on XPU"
        if c.act_type not in (BF16, FP16):
            return False, "XPUW4A8Int requires BF16/FP16 activations"
        if c.weight_type != ST["int4"]:
            return False, f"XPUW4A8Int requires int4 weights, got {c.weight_type}"
        if c.zero_points:
            return False, "XPUW4A8Int only supports symmetric weight quantization"
        if c.group_size != -1 and c.group_size % 32 != 0:
            return False, f"Group size ({c.group_size}) not supported by XPUW4A8Int, must be a multiple of 32"
        k, n = c.partition_weight_shape
        mk, mn = cls.shape_multiples
        if k % mk != 0 or n % mn != 0:
            return False, f"in/out sizes ({k}, {n}) must be multiples of {mk}"
        return True, None

    @classmethod
    def runtime(cls, c, p, env, packing=CT_PACKING, input_schema=None, model_dtype=None):
        """xpu.py:198-203: symmetric per-token int8 activations; the op returns float16."""
        warning = None
        if c.act_type != FP16:  # xpu.py:146-152, logged by can_implement
            warning = (f"XPUW4A8IntLinearKernel is running with model dtype {c.act_type}, but "
                       "int4_gemm_w4a8 produces float16 output. Recommend setting --dtype "
                       "float16 for best performance.")
        return Runtime(cls.__name__, "int8", str(c.weight_type), cls.op, cls.op_source,
                       emulation=W4A8_PATH, output="fp16", warning=warning)


_XPU_WNA16_TYPES = (ST["uint4"], ST["uint4b8"])


class XPUwNa16LinearKernel(MPKernel):
    vllm_file = "xpu.py"
    min_capability = -1
    shape_multiples = (32, 1)
    op = "torch.ops._xpu_C.int4_gemm_w4a16"
    op_source = KERNELS_DIR + "xpu.py:97"

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_xpu():
            return False, "XPUwNa16 only supported on XPU"
        if c.act_type != BF16 and c.act_type != FP16:
            return False, "XPUwNa16 only supports BF16/FP16 activations"
        if c.weight_type not in _XPU_WNA16_TYPES:
            return False, f"Quant type ({c.weight_type}) not supported by XPUwNa16, supported types are: {_fmt(_XPU_WNA16_TYPES)}"
        if c.group_size != -1 and c.group_size % 32 != 0:
            return False, f"Group size ({c.group_size}) not supported by XPUwNa16, supported group sizes are multiples of 32"
        mk = cls.shape_multiples[0]
        if c.partition_weight_shape[0] % mk != 0:
            return False, f"Input size ({c.partition_weight_shape[0]}) not supported by XPUwNa16, supported sizes are multiples of {mk}"
        return True, None


# --------------------------------------------------------------------------- CPU

# The torch version the simulated Arm host reports when the aten op is missing. vLLM prints
# `torch.__version__` of the machine it runs on; the oracle was recorded on 2.13.0+cpu.
SIMULATED_TORCH_VERSION = "2.13.0+cpu"


class Dynamic4bitLinearKernel(MPKernel):
    vllm_file = "dynamic_4bit.py"
    min_capability = 1
    op = "torch.ops.aten._dyn_quant_matmul_4bit"
    op_source = KERNELS_DIR + "dynamic_4bit.py:149"
    _types = [ST["int4"]]

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_cpu():
            return False, "Only CPU is supported"
        if c.weight_type not in cls._types:
            return False, f"Unsupported quant type {c.weight_type}"
        arm = p.cpu_arch == "arm"
        if arm and c.act_type not in (FP32, BF16, FP16):
            return False, "Dynamic4bitLinearKernel on Arm requires Float32 or BFloat16 or Float16 activations"
        if c.full_weight_shape[0] % c.group_size != 0:  # x % -1 == 0: channelwise passes
            return False, (f"Group size ({c.group_size}) does not evenly divide the number of input "
                           f"features ({c.full_weight_shape[0]})")
        if arm and not p.has_op(DYN_QUANT_OP):
            return False, (f"PyTorch {SIMULATED_TORCH_VERSION} does not support "
                           "_dyn_quant_matmul_4bit. Install a newer version")
        return True, None

    @classmethod
    def runtime(cls, c, p, env, packing=CT_PACKING, input_schema=None, model_dtype=None):
        """The aten op quantizes activations to int8 per row; KleidiAI micro-kernels exist
        only on Arm, other CPUs run torch's generic reference loop (very slow)."""
        return Runtime(cls.__name__, "int8", str(c.weight_type), cls.op, cls.op_source,
                       emulation="vllm_dynamic4bit",
                       impl="kleidiai" if p.cpu_arch == "arm" else "reference")


_CPUWNA16_TYPES = (ST["uint4"], ST["uint4b8"])


class ZentorchWNA16LinearKernel(MPKernel):
    vllm_file = "zentorch.py"
    min_capability = -1  # inherited from CPUWNA16LinearKernel
    op = "torch.ops.zentorch.zentorch_woq_linear"
    op_source = KERNELS_DIR + "zentorch.py:295"

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_zen_cpu():
            return False, "ZentorchWNA16 requires an AMD Zen CPU."
        if c.weight_type not in _CPUWNA16_TYPES:
            # The text says CPUWNA16: vLLM shares the parent's message.
            return False, f"Quant type ({c.weight_type}) not supported by CPUWNA16, supported types are: {_fmt(_CPUWNA16_TYPES)}"
        if c.group_size != -1:
            k = c.partition_weight_shape[0]
            if c.group_size <= 0 or k % c.group_size != 0:
                return False, f"Group size ({c.group_size}) must divide input size ({k})"
        # has_zentorch_op (kernels/linear/zentorch_utils.py) also requires the Zen platform.
        if not all(p.has_op(op) for op in ZENTORCH_WOQ_OPS):
            return False, "torch.ops.zentorch.{zentorch_woq_repack_weight, zentorch_woq_linear} are not registered."
        return True, None

    @classmethod
    def runtime(cls, c, p, env, packing=CT_PACKING, input_schema=None, model_dtype=None):
        """zentorch.py:184-204: DA8W4 if eligible, else the WOQ path for compressed-tensors
        packing, else CPUWNA16's own processing (GPTQ dim-0 and AWQ layouts)."""
        k = c.partition_weight_shape[0]
        groups = 1 if c.group_size == -1 else k // c.group_size
        woq = packing == CT_PACKING and groups > 0 and k % groups == 0  # zentorch.py:79-110
        if (woq and env.cpu_int4_w4a8 and p.has_op(ZENTORCH_DA8W4_OP) and not c.zero_points
                and c.weight_type != ST["uint4"] and c.act_type == BF16
                and (k // groups) % 4 == 0 and k % 2 == 0):  # zentorch.py:117-145
            return Runtime(cls.__name__, "int8", str(c.weight_type),
                           "torch.ops.zentorch.zentorch_dynamic_qlinear",
                           KERNELS_DIR + "zentorch.py:287", emulation=W4A8_PATH)
        if woq:
            return super().runtime(c, p, env)
        return replace(CPUWNA16LinearKernel.runtime(c, p, env, packing, model_dtype=model_dtype),
                       method=cls.__name__,
                       source=KERNELS_DIR + "zentorch.py:199")


class CPUWNA16LinearKernel(MPKernel):
    vllm_file = "cpu.py"
    min_capability = -1
    shape_multiples = (32, 32)
    op = "ops.cpu_gemm_wna16"
    op_source = KERNELS_DIR + "cpu.py:200"

    @classmethod
    def can_implement(cls, c, p):
        if not p.is_cpu():
            return False, "CPUWNA16 only supported on CPU"
        if c.weight_type not in _CPUWNA16_TYPES:
            return False, f"Quant type ({c.weight_type}) not supported by CPUWNA16, supported types are: {_fmt(_CPUWNA16_TYPES)}"
        if c.group_size != -1 and c.group_size % 2 != 0:
            return False, f"Group size ({c.group_size}) not supported by CPUWNA16, supported group sizes are multiples of 2"
        k, n = c.partition_weight_shape
        mk, mn = cls.shape_multiples
        if k % mk != 0:
            return False, f"Input size ({k}) not supported by CPUWNA16, supported sizes are multiples of {mk}"
        if n % mn != 0:
            return False, f"Output size ({n}) not supported by CPUWNA16, supported sizes are multiples of {mn}"
        return True, None

    @classmethod
    def runtime(cls, c, p, env, packing=CT_PACKING, input_schema=None, model_dtype=None):
        """cpu.py:170-182 picks int4_scaled_mm_cpu (W4A8, uint8 activations with zero point
        128) or cpu_gemm_wna16 with `_get_isa_hint` (cpu.py:212-224); an op the loaded build
        does not register fails at the first forward (csrc/cpu/torch_bindings.cpp)."""
        if env.cpu_int4_w4a8 and c.act_type == BF16 and (p.amx or p.cpu_arch == "riscv"):
            return Runtime(cls.__name__, "int8", str(c.weight_type), "ops.int4_scaled_mm_cpu",
                           KERNELS_DIR + "cpu.py:192", emulation="vllm_int4_scaled_mm")
        # cpu_gemm_wna16 reads the activations as the model gives them, and the isa hint
        # follows the scales' dtype (the params dtype), whatever act_type says.
        model = model_dtype or c.act_type
        if p.amx and model == BF16:
            isa = "amx"
        elif p.cpu_arch == "riscv":
            isa = "rvv"
        elif model == BF16 and p.cpu_arch == "powerpc":
            isa = "vsx"
        else:
            isa = "vec"
        base = Runtime(cls.__name__, activation_name(model), str(c.weight_type), cls.op,
                       cls.op_source, emulation=W4A16_PATH, isa_hint=isa)
        # torch_bindings.cpp:929-936 registers cpu_gemm_wna16 for AVX512F, RVV, s390x, Power.
        built = (p.cpu_arch in ("riscv", "s390x", "powerpc")
                 or (p.cpu_arch == "x86" and cpu_extension(p) != "_C_AVX2"))
        if built:
            return base
        return replace(base, emulation=None, fails_at="forward", error_type="AttributeError",
                       error="'_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'",
                       source="_custom_ops.py:4638")


def cpu_extension(p: Platform) -> str:
    """Which vLLM CPU extension `CpuPlatform.import_kernels` loads on x86 (platforms/cpu.py:657).

    AMX tiles come with AVX512-BF16 on every CPU that has them, so AMX means the `_C` build.
    """
    if p.amx or (p.avx512 and p.avx512_bf16):
        return "_C"
    return "_C_AVX512" if p.avx512 else "_C_AVX2"


ALL_KERNELS: tuple[type[MPKernel], ...] = (
    CutlassW4A8LinearKernel, MacheteLinearKernel, MarlinLinearKernel, ConchLinearKernel,
    ExllamaLinearKernel, TritonW4A16LinearKernel, HummingLinearKernel, RDNA3W4A16LinearKernel,
    RDNAHybridW4A16LinearKernel, XPUW4A8IntLinearKernel, XPUwNa16LinearKernel,
    Dynamic4bitLinearKernel, ZentorchWNA16LinearKernel, CPUWNA16LinearKernel,
)
KERNELS_BY_NAME = {k.__name__: k for k in ALL_KERNELS}
