"""vLLM 0.33.0's dispatch of a compressed-tensors fused-MoE layer: the rules 0.34.0 shares.

`CompressedTensorsMoEMethod.get_moe_method` tests the experts' scheme in order and constructs
one MoE method; the methods traced here (W4A8-INT8, W4A8-FP8, WNA16) each run a MoE kernel
oracle in their constructor, which walks its backends and asks each backend's experts classes
`is_supported_config` (fused_moe/modular_kernel.py: the class's own checks, then the generic
ones), then `create_weights` checks the sizes. Every rule names its vLLM file:line through
`MoERules.src` (paths relative to the sdist's `vllm/`); 0.34.0's module (`vllm_0_34`) states
only what it changes, as a new `MoERules` value.

The deployment is TP=1, EP=1, no LoRA, no batch invariance, vLLM's default router (softmax
top-k, renormalized): the generic checks those settle (parallel config, hash routing,
routing method, router-logits dtype, shape, LoRA) pass for every class here, so the trace
shows the ones that decide (device, activation, quantization scheme, activation format).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Callable, Mapping

from workbench.dispatch.moe.layer import MoELayer
from workbench.dispatch.moe.trace import BackendStep, MoETrace
from workbench.dispatch.trace import Outcome, Predicate, Step
from workbench.dispatch.vllm_0_33.mp_kernels import SIMULATED_TORCH_VERSION
from workbench.dispatch.vllm_0_33.selector import prioritize_humming
from workbench.errors import InvalidInputError
from workbench.platforms import DYN_QUANT_OP, Platform

VLLM_VERSION = "0.33.0"

# vLLM's `MoEBackend` literal (config/kernel.py:122-147 of both releases): what KernelConfig
# accepts for --moe-backend; anything else pydantic refuses before a layer is built.
MOE_BACKENDS = ("auto", "triton", "batched_triton", "deep_gemm", "deep_gemm_mega_moe", "cutlass",
                "flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_cutedsl",
                "flashinfer_moe_ep_cutedsl", "flashinfer_b12x", "b12x",
                "flashinfer_moe_ep_mega_deep_gemm", "marlin", "humming", "triton_unfused",
                "aiter", "aiter_mega_moe", "aiter_triton_mxfp4_bf16", "aiter_triton_mxfp4_mxfp4",
                "flydsl", "hpc", "emulation", "rdna3")

# --------------------------------------------------------------------------- quant keys


@dataclass(frozen=True)
class QuantKey:
    """vLLM's `QuantKey` (quantization/utils/quant_utils.py): equal field by field, printed as
    its `__str__` prints (dtype abbreviations of torch.fx, ScalarTypes by name)."""

    dtype: str
    scale_dtype: str
    static: bool
    group: tuple[int, int]
    symmetric: bool = True

    def __str__(self) -> str:
        shape = {(-1, -1): "per_tensor", (1, -1): "per_token", (-1, 1): "per_channel"}.get(
            self.group, f"GroupShape(row={self.group[0]}, col={self.group[1]})")
        scale = f"{self.scale_dtype},{'static' if self.static else 'dynamic'},{shape}"
        return f"QuantKey({self.dtype},scale({scale}),{'' if self.symmetric else 'a'}symmetric)"


def _key_str(key: QuantKey | None) -> str:
    return str(key)  # None prints "None", as in vLLM's f-string


# quant_utils.py:278-301 (INT4_DTYPE = uint4b8, INT8_DTYPE = uint8b128, :24-25)
kInt4Static = QuantKey("uint4b8", "f16", True, (1, -1))
kInt4Static32 = QuantKey("uint4b8", "f16", True, (1, 32))
kInt4StaticAsym = QuantKey("uint4", "f16", True, (1, -1), False)
kInt4Static32Asym = QuantKey("uint4", "f16", True, (1, 32), False)
kInt8Static = QuantKey("uint8b128", "f16", True, (1, -1))
# quant_utils.py:307-331: the W4A8-INT8 keys (int4 values stored as int8)
kInt4W4A8StaticGroup128Sym = QuantKey("i8", "bf16", True, (1, 128))
kInt4W4A8StaticGroup64Sym = QuantKey("i8", "bf16", True, (1, 64))
kInt4W4A8StaticGroup32Sym = QuantKey("i8", "bf16", True, (1, 32))
kInt4W4A8StaticGroupSym = QuantKey("i8", "bf16", True, (1, -1))
kInt4W4A8StaticChannelSym = QuantKey("i8", "f32", True, (-1, 1))
kFp8DynamicTokenSym = QuantKey("f8e4m3fn", "f32", False, (1, -1))

# --------------------------------------------------------------------------- the config


@dataclass(frozen=True)
class MoEConfig:
    """The `FusedMoEConfig` fields the checks read (FusedMoEFactory, fused_moe/layer.py), with
    the platform vLLM's `current_platform` answers for."""

    layer: MoELayer
    platform: Platform
    moe_backend: str

    @property
    def activation(self) -> str:
        return self.layer.activation

    @property
    def in_dtype(self) -> str:
        return self.layer.params_dtype  # the model dtype (no separate model config here)


def activation_member(value: str) -> str:
    """How vLLM prints a MoEActivation in a reason: `MoEActivation.GELU_TANH`."""
    return "MoEActivation." + value.upper()


# fused_moe/activation.py:123-137 and :140-153 (the same in both releases)
APPLY_ACTIVATIONS = frozenset({"silu", "gelu", "gelu_tanh", "situ", "swigluoai",
                               "swigluoai_uninterleave", "swiglustep", "silu_no_mul",
                               "gelu_no_mul", "gelu_tanh_no_mul", "relu2_no_mul"})
MASKED_ACTIVATIONS = APPLY_ACTIVATIONS

# --------------------------------------------------------------------------- experts classes

STANDARD, PADDED, BATCHED = "standard", "padded_standard", "batched_experts"


@dataclass(frozen=True)
class Experts:
    """One `FusedMoEExperts` class as its `is_supported_config` decides.

    `pre`: the class's own checks that run before the generic ones (None: pass); `device`,
    `activations`, `quant`, `fmt`: what the generic checks ask (`_supports_current_device`,
    `_supports_activation`, `_supports_quant_scheme`, `activation_format`); `post`: the class's
    checks after the generic ones pass. `src`: the MoERules.src key of the class.
    """

    name: str
    src: str
    device: Callable[[Platform], bool]
    activations: frozenset[str]
    quant: Callable[[QuantKey | None, QuantKey | None], bool]
    fmt: str = STANDARD
    pre: Callable[["MoEConfig", "MoERules"], str | None] | None = None
    post: Callable[["MoEConfig", "MoERules"], str | None] | None = None
    runs: str = ""  # what it computes, in words, for the faces

    def is_supported_config(self, cfg: MoEConfig, w: QuantKey | None, a: QuantKey | None,
                            rules: "MoERules") -> tuple[bool, str | None]:
        """The class's answer and vLLM's reason (modular_kernel.py `is_supported_config`)."""
        if self.pre is not None and (why := self.pre(cfg, rules)) is not None:
            return False, why
        p = cfg.platform
        if not self.device(p):
            return False, f"kernel does not support current device {p.device}"
        if cfg.activation not in self.activations:
            return False, f"kernel does not support {activation_member(cfg.activation)} activation"
        if not self.quant(w, a):
            return False, f"kernel does not support quantization scheme {_key_str(w)}x{_key_str(a)}"
        if cfg.layer.routing != "softmax_topk":
            # the generic check's routing-method gate comes next (modular_kernel.py); each
            # class's `_supports_routing_method` for grouped top-k is not modelled
            raise RoutingNotTraced(
                f"{self.name}: the routing-method gate for {cfg.layer.routing} routing is not "
                "modelled; traced: softmax_topk (vLLM's default router)")
        if self.fmt == BATCHED:  # the layer's format is Standard (no EP): batched is no superset
            return False, "kernel does not support ('standard',) activation format"
        if self.post is not None and (why := self.post(cfg, rules)) is not None:
            return False, why
        return True, None


def _cpu_int4_w4a8_pre(cfg: MoEConfig, rules: "MoERules") -> str | None:
    """cpu_int4_moe.py `is_supported_config`: Arm first, then the dtype, then torch's ops."""
    p = cfg.platform
    if not p.is_cpu() or p.cpu_arch != "arm":
        return "kernel only supports Arm CPU"
    # in_dtype is one of float32 / bfloat16 / float16 here (MoELayer accepts no other)
    if not p.has_op(DYN_QUANT_OP):
        return (f"PyTorch {SIMULATED_TORCH_VERSION} does not support "
                "_dyn_quant_* 4bit ops. Install a newer version")
    return None


def _bf16_only_pre(cfg: MoEConfig, rules: "MoERules") -> str | None:
    """CutlassExpertsW4A8Fp8.is_supported_config: bfloat16 in and out, before anything else."""
    if cfg.in_dtype != "bfloat16":
        return f"kernel does not support torch.{cfg.in_dtype} input/output dtype"
    return None


def _zentorch_post(cfg: MoEConfig, rules: "MoERules") -> str | None:
    if cfg.in_dtype != "bfloat16":
        return "kernel requires bfloat16 activations"
    if cfg.layer.top_k < 2:
        return "kernel requires experts_per_token >= 2"
    return None


def _triton_post(cfg: MoEConfig, rules: "MoERules") -> str | None:
    """TritonExperts.is_supported_config on CUDA and ROCm: moe_align_block_size's limit."""
    if cfg.platform.is_cuda_alike() and (cfg.layer.num_experts + 31) // 32 * 32 >= 1024:
        return "kernel's moe_align_block_size requires fewer than 1024 padded experts"
    return None


def _humming_post(gemm_type: str) -> Callable[[MoEConfig, "MoERules"], str | None]:
    """HummingExpertsBase.is_supported_config: the class's GEMM type must be the preferred one,
    "indexed" without expert parallelism or VLLM_HUMMING_MOE_GEMM_TYPE (get_humming_moe_gemm_type)."""
    def post(cfg: MoEConfig, rules: "MoERules") -> str | None:
        preferred = "indexed"
        if preferred != gemm_type:
            return f"preferred gemm type {preferred} != supported gemm type {gemm_type}"
        return None
    return post


def _humming_device(p: Platform) -> bool:
    return p.has_package("humming") and p.is_cuda() and (p.capability or 0) >= 75


def _humming_wna16_key(w: QuantKey | None) -> bool:
    """fused_humming_moe.py `_is_supported_wna16_weight_key`: per-channel or (1, g>0) scales
    over an unsigned 2-8-bit integer (or int4/int8 storage) type."""
    if w is None:
        return False
    if not (w.group == (-1, 1) or (w.group[0] == 1 and w.group[1] > 0)):
        return False
    return w.dtype in ("uint4b8", "uint8b128", "u8") or (
        w.dtype.startswith("uint") and 2 <= int(w.dtype[4]) <= 8)


def _humming_quant(w: QuantKey | None, a: QuantKey | None) -> bool:
    """HummingExpertsBase._supports_quant_scheme, for the integer weights traced here."""
    listed = {(kInt4Static, None), (kInt4Static, kFp8DynamicTokenSym), (kInt8Static, None),
              (kInt8Static, kFp8DynamicTokenSym)}
    return (w, a) in listed or (a in (None, kFp8DynamicTokenSym) and _humming_wna16_key(w))


_MARLIN_W = (kInt4Static, kInt8Static, kInt4Static32, kInt4StaticAsym, kInt4Static32Asym)
_TRITON_WNA16_W = (kInt4Static, kInt4StaticAsym, kInt8Static, kInt4Static32, kInt4Static32Asym)
_TRITON_WNA16_ACTS = frozenset({"silu", "gelu", "gelu_tanh", "swigluoai",
                                "swigluoai_uninterleave", "swiglustep", "silu_no_mul",
                                "gelu_no_mul", "gelu_tanh_no_mul", "relu2_no_mul"})
_CPU_INT4_W4A8_W = (kInt4W4A8StaticChannelSym, kInt4W4A8StaticGroup128Sym,
                    kInt4W4A8StaticGroup64Sym, kInt4W4A8StaticGroup32Sym, kInt4W4A8StaticGroupSym)
# zentorch_utils `_ZENTORCH_MOE_ACTIVATIONS`: the gated SiLU path only
_ZENTORCH_ACTS = frozenset({"silu"})


def experts_classes(cpu_int4_activations: frozenset[str], zentorch_name: str,
                    zentorch_quant: tuple) -> dict[str, Experts]:
    """Every experts class the three oracles name, keyed by an id (two are `CPUExpertsInt4`)."""
    return {
        "cpu_int4_w4a8": Experts(
            "CPUExpertsInt4", "cls_cpu_int4_w4a8", lambda p: p.is_cpu(), cpu_int4_activations,
            lambda w, a: w in _CPU_INT4_W4A8_W and a is None, pre=_cpu_int4_w4a8_pre,
            runs="torch.ops._C.dynamic_4bit_int_moe: int8 per-token activations x int4 weights "
                 "packed by aten._dyn_quant_pack_4bit_weight (KleidiAI), one GEMM pair per expert"),
        "cpu_int4_amx": Experts(
            "CPUExpertsInt4", "cls_cpu_int4_amx",
            lambda p: p.is_cpu() and p.cpu_arch == "x86" and p.amx,
            frozenset({"silu", "gelu_tanh"}), lambda w, a: (w, a) == (kInt4Static, None),
            runs="fused_experts_cpu INT4_W4A8 on AMX: int4 weights, bf16 activations quantized "
                 "to int8 inside the op"),
        "zentorch": Experts(
            zentorch_name, "cls_zentorch",
            lambda p: p.is_zen_cpu() and p.has_op("zentorch.zentorch_fused_moe")
            and p.has_op("zentorch.zentorch_woq_repack_weight"),
            _ZENTORCH_ACTS, lambda w, a: (w, a) in zentorch_quant, post=_zentorch_post,
            runs="zentorch_fused_moe (AOCL DA8W4)"),
        "xpu_wna16": Experts(
            "XPUExpertsWNA16", "cls_xpu_wna16", lambda p: p.is_xpu(),
            frozenset({"silu", "gelu", "gelu_tanh", "swigluoai", "relu2_no_mul"}),
            lambda w, a: (w, a) in ((kInt4Static, None), (kInt4Static32, None)),
            runs="vllm-xpu-kernels fused MoE, int4 weights, 16-bit activations"),
        "rdna3": Experts(
            "Rdna3WNA16Experts", "cls_rdna3",
            lambda p: p.is_rocm() and p.gfx == "gfx1100"
            and p.has_op("_rocm_C.moe_gptq_gemm_rdna3"), APPLY_ACTIVATIONS,
            lambda w, a: a is None and w in (kInt4Static, kInt4Static32)),
        "trtllm_mxint4": Experts(
            "TrtLlmMxint4ExpertsMonolithic", "cls_trtllm_mxint4",
            lambda p: p.is_cuda() and (p.capability or 0) // 10 == 10
            and p.has_package("flashinfer"), frozenset({"silu", "swigluoai"}),
            lambda w, a: (w, a) == (kInt4Static32, None)),
        "marlin": Experts(
            "MarlinExperts", "cls_marlin", lambda p: p.is_cuda() and (p.capability or 0) >= 75,
            APPLY_ACTIVATIONS, lambda w, a: w in _MARLIN_W,
            runs="fused Marlin MoE: int4 weights dequantized in the GEMM, 16-bit activations"),
        "batched_marlin": Experts(
            "BatchedMarlinExperts", "cls_batched_marlin",
            lambda p: p.is_cuda() and (p.capability or 0) >= 75, MASKED_ACTIVATIONS,
            lambda w, a: w in _MARLIN_W, fmt=BATCHED),
        "triton_wna16": Experts(
            "TritonWNA16Experts", "cls_triton_wna16",
            lambda p: p.is_cuda_alike() or p.is_xpu(), _TRITON_WNA16_ACTS,
            lambda w, a: w in _TRITON_WNA16_W, fmt=PADDED, post=_triton_post,
            runs="fused_moe Triton WNA16 kernel: int4 weights dequantized, 16-bit activations"),
        "humming_batched": Experts(
            "BatchedHummingGroupedExperts", "cls_humming_batched", _humming_device,
            APPLY_ACTIVATIONS, _humming_quant, fmt=BATCHED,
            post=_humming_post("grouped_masked")),
        "humming_grouped": Experts(
            "HummingGroupedExperts", "cls_humming_grouped", _humming_device, APPLY_ACTIVATIONS,
            _humming_quant, fmt=PADDED, post=_humming_post("grouped_contiguous")),
        "humming_indexed": Experts(
            "HummingIndexedExperts", "cls_humming_indexed", _humming_device, APPLY_ACTIVATIONS,
            _humming_quant, fmt=PADDED, post=_humming_post("indexed"),
            runs="Humming indexed MoE GEMM (JIT-compiled), int4 weights"),
        "int4_emulation": Experts(
            "Int4EmulationTritonExperts", "cls_int4_emulation", lambda p: p.is_cuda_alike(),
            APPLY_ACTIVATIONS,
            lambda w, a: a is None and w in (kInt4Static, kInt4Static32, kInt4StaticAsym,
                                             kInt4Static32Asym),
            fmt=PADDED, post=_triton_post),
        "cutlass_w4a8": Experts(
            "CutlassExpertsW4A8Fp8", "cls_cutlass_w4a8",
            lambda p: p.is_cuda() and p.capability == 90, APPLY_ACTIVATIONS,
            lambda w, a: (w, a) == (kInt4Static, kFp8DynamicTokenSym), pre=_bf16_only_pre,
            runs="CUTLASS grouped W4A8 GEMM: int4 weights x fp8 per-token activations (SM90)"),
    }


# --------------------------------------------------------------------------- the rule set


class RoutingNotTraced(InvalidInputError):
    """A layer's routing reaches an experts class's routing-method gate, which is not modelled."""


class VllmRaised(Exception):
    """vLLM raised `error_type` with `message` at `stage`: the trace stops there."""

    def __init__(self, error_type: str, message: str, stage: str) -> None:
        super().__init__(message)
        self.error_type, self.message, self.stage = error_type, message, stage


@dataclass(frozen=True, eq=False)
class MoERules:
    """One release's MoE rules: the values and texts that differ between releases, the
    experts classes, and the file:line of every rule (`src`)."""

    version: str
    sources: Mapping[str, str]
    experts: Mapping[str, Experts]
    # The W4A8-INT8 oracle's refusal of an explicitly requested backend (unreachable through
    # KernelConfig, whose MoEBackend literal has no "cpu": see `trace_w4a8_int8`).
    w4a8_int8_unsupported: Callable[[str, str | None], str]
    # WNA16's refusal of a backend: the text its explicit path raises.
    wna16_unsupported: Callable[[str, str | None], str]
    zen_reasons: Callable[[MoELayer], str | None]
    has_w4afp8: bool = False  # `--quantization w4afp8` exists (0.34.0)

    def src(self, key: str) -> str:
        return f"vllm/{self.sources[key]}"


def _w4a8_int8_unsupported_0_33(backend: str, reason: str | None) -> str:
    """oracle/w4a8_int8.py:106-116 (0.33.0): quoted only when there is no reason."""
    if reason:
        return (f"W4A8 Int8 MoE backend {backend} does not support the "
                f"deployment configuration since {reason}.")
    return f"W4A8 Int8 MoE backend '{backend}' does not support the deployment configuration."


def _wna16_unsupported_0_33(backend: str, reason: str | None) -> str:
    """oracle/int_wna16.py `_make_log_unsupported` (0.33.0)."""
    since = f" since {reason}" if reason else ""
    return f"WNA16 MoE backend '{backend}' does not support the deployment configuration{since}."


def _zen_reasons_0_33(layer: MoELayer) -> str | None:
    """oracle/int_wna16.py `_backend_incompatibility_reason`, ZEN_CPU, for a CT layer
    (VLLM_CPU_INT4_W4A8 at its default, on)."""
    if not layer.weights.symmetric:
        return "zero points are not supported"
    g = layer.weights.group_size
    if g is None or g <= 0:
        return "DA8W4 requires group-quantized weights"
    if g % 4 != 0:
        return f"group size {g} is not a multiple of 4"
    return None


SOURCES = {  # rule -> its line in 0.33.0's vllm/ (found by line search, checked by a test)
    'get_moe_method': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:28',
    'pred_mxfp4_w4a8': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:66',
    'pred_mxfp4': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:76',
    'pred_mxfp8': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:83',
    'pred_wna16': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:90',
    'wna16_format_bits': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:91',
    'pred_nvfp4': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:145',
    'pred_fp8_w8a8': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:162',
    'pred_w8a8_int': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:173',
    'pred_fp8_w4a8': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:181',
    'pred_w4a8_int': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:190',
    'unsupported_scheme': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:199',
    'w4a8i_group_check': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a8_int8.py:65',
    'w4a8i_weight_key': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a8_int8.py:77',
    'w4a8i_select': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:72',
    'w4a8i_not_cpu': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:91',
    'w4a8i_priority': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:32',
    'w4a8i_map': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:59',
    'w4a8i_explicit': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:133',
    'w4a8i_loop': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:137',
    'w4a8i_none': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:154',
    'w4a8i_local_unsupported_msg': 'model_executor/layers/fused_moe/oracle/w4a8_int8.py:106',
    'cpu_int4_arm': 'model_executor/layers/fused_moe/experts/cpu_int4_moe.py:64',
    'cpu_int4_dyn_quant': 'model_executor/layers/fused_moe/experts/cpu_int4_moe.py:77',
    'cpu_int4_activations': 'model_executor/layers/fused_moe/experts/cpu_int4_moe.py:104',
    'cpu_int4_quant': 'model_executor/layers/fused_moe/experts/cpu_int4_moe.py:121',
    'generic_checks': 'model_executor/layers/fused_moe/modular_kernel.py:580',
    'wna16_weight_key': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py:81',
    'wna16_select_call': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py:102',
    'wna16_group_assert': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py:127',
    'wna16_hidden_group': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py:238',
    'wna16_inter_group': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py:244',
    'wna16_priority': 'model_executor/layers/fused_moe/oracle/int_wna16.py:126',
    'wna16_backend_classes': 'model_executor/layers/fused_moe/oracle/int_wna16.py:68',
    'wna16_incompat': 'model_executor/layers/fused_moe/oracle/int_wna16.py:146',
    'wna16_map': 'model_executor/layers/fused_moe/oracle/int_wna16.py:238',
    'wna16_select': 'model_executor/layers/fused_moe/oracle/int_wna16.py:256',
    'wna16_none': 'model_executor/layers/fused_moe/oracle/int_wna16.py:362',
    'humming_priority': 'model_executor/layers/quantization/utils/humming/priority.py:26',
    'marlin_moe_config': 'model_executor/layers/quantization/utils/marlin_utils.py:356',
    'w4a8f_asserts': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a8_fp8.py:47',
    'w4a8f_select_call': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a8_fp8.py:52',
    'w4a8f_256': 'model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a8_fp8.py:70',
    'w4a8f_select': 'model_executor/layers/fused_moe/oracle/w4a8.py:61',
    'w4a8f_none': 'model_executor/layers/fused_moe/oracle/w4a8.py:101',
    'cls_cpu_int4_w4a8': 'model_executor/layers/fused_moe/experts/cpu_int4_moe.py:26',
    'cls_cpu_int4_amx': 'model_executor/layers/fused_moe/experts/cpu_moe.py:855',
    'cls_zentorch': 'model_executor/layers/fused_moe/experts/zentorch_moe.py:30',
    'cls_xpu_wna16': 'model_executor/layers/fused_moe/experts/xpu_moe.py:273',
    'cls_rdna3': 'model_executor/layers/fused_moe/experts/rdna3_moe.py:55',
    'cls_trtllm_mxint4': 'model_executor/layers/fused_moe/experts/trtllm_mxint4_moe.py:21',
    'cls_marlin_base': 'model_executor/layers/fused_moe/experts/marlin_moe.py:566',
    'cls_marlin': 'model_executor/layers/fused_moe/experts/marlin_moe.py:681',
    'cls_batched_marlin': 'model_executor/layers/fused_moe/experts/marlin_moe.py:920',
    'cls_triton': 'model_executor/layers/fused_moe/experts/triton_moe.py:67',
    'cls_triton_wna16': 'model_executor/layers/fused_moe/experts/triton_moe.py:656',
    'cls_int4_emulation': 'model_executor/layers/fused_moe/experts/int4_emulation_moe.py:31',
    'cls_humming_base': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:129',
    'humming_gemm_type': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:112',
    'humming_wna16_key': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:89',
    'cls_humming_indexed': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:677',
    'cls_humming_grouped': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:889',
    'cls_humming_batched': 'model_executor/layers/fused_moe/experts/fused_humming_moe.py:1024',
    'cls_cutlass_w4a8': 'model_executor/layers/fused_moe/experts/cutlass_moe.py:1294',
    'apply_activations': 'model_executor/layers/fused_moe/activation.py:123',
    'masked_activations': 'model_executor/layers/fused_moe/activation.py:140',
    'moe_backend_literal': 'config/kernel.py:122',
    'quant_keys': 'model_executor/layers/quantization/utils/quant_utils.py:278',
    'w4a8_keys': 'model_executor/layers/quantization/utils/quant_utils.py:307',
    'factory': 'model_executor/layers/fused_moe/layer.py:92',
}

RULES = MoERules(
    version=VLLM_VERSION, sources=SOURCES,
    experts=experts_classes(frozenset({"silu", "swigluoai", "swiglustep"}), "ZentorchExpertsInt4",
                            ((kInt4Static, None), (kInt4Static32, None))),
    w4a8_int8_unsupported=_w4a8_int8_unsupported_0_33,
    wna16_unsupported=_wna16_unsupported_0_33, zen_reasons=_zen_reasons_0_33)


# --------------------------------------------------------------------------- method resolution


def _pred(name: str, check: tuple[bool, str], result: str) -> Predicate:
    ok, detail = check
    return Predicate(name, result if ok else "", ok, detail)


def resolve_method(layer: MoELayer, p: Platform, rules: MoERules) -> tuple[list[Predicate], str]:
    """get_moe_method's tests in order (compressed_tensors_moe.py:66-201): the predicates
    tried and the method class; raises VllmRaised where vLLM does."""
    from workbench.dispatch.vllm_0_33 import compressed_tensors as ct  # the linear predicates
    w, i = layer.weights, layer.input_activations
    if layer.format in ct.ACT_QUANT_FORMATS and i is None and w.type != "float":
        # the config's scheme map, before any layer: an activation-quantizing format without
        # input_activations is asserted to be W8A16-FP8 (compressed_tensors.py:359-368)
        raise VllmRaised("AssertionError", "", "resolve")
    preds: list[Predicate] = []

    def test(name: str, check: tuple[bool, str], result: str) -> bool:
        preds.append(_pred(name, check, result))
        return check[0]

    if test("_is_mxfp4_w4a8_fp8", ct._is_mxfp4_w4a8_fp8(w, i), "CompressedTensorsW4A8Mxfp4MoEMethod"):
        return preds, "CompressedTensorsW4A8Mxfp4MoEMethod"
    if test("_is_mxfp4", ct._is_mxfp4(w), "CompressedTensorsW4A4Mxfp4MoEMethod"):
        return preds, "CompressedTensorsW4A4Mxfp4MoEMethod"
    if test("_is_mxfp8", ct._is_mxfp8(w), "CompressedTensorsW8A8Mxfp8MoEMethod"):
        return preds, "CompressedTensorsW8A8Mxfp8MoEMethod"
    if test("_is_wNa16_group_channel", ct._is_wna16(w, i), "CompressedTensorsWNA16MoEMethod"):
        if w.num_bits not in (2, 3, 4, 8) or layer.format != "pack-quantized":
            raise VllmRaised("ValueError", (
                "For Fused MoE layers, only format: pack-quantized and bits: [2, 3, 4, 8] is "
                f"supported but got format: pack-quantized and bits: {w.num_bits}"), "resolve")
        return preds, "CompressedTensorsWNA16MoEMethod"
    if test("_is_nvfp4_format", ct._is_nvfp4(w), "CompressedTensorsW4A4Nvfp4MoEMethod"):
        return preds, "CompressedTensorsW4A4Nvfp4MoEMethod"
    fp8 = ct._fp8_w8a8(w, i)
    if test("_is_fp8_w8a8 (sm90 / sm100 / any)", fp8, "CompressedTensorsW8A8Fp8MoEMethod"):
        return preds, "CompressedTensorsW8A8Fp8MoEMethod"
    if i is None:  # _is_dynamic_token_w8a8 reads input_quant.num_bits without a None check
        raise VllmRaised("AttributeError", "'NoneType' object has no attribute 'num_bits'",
                         "resolve")
    if test("_is_dynamic_token_w8a8", ct._dynamic_token_w8a8(w, i),
            "CompressedTensorsW8A8Int8MoEMethod"):
        return preds, "CompressedTensorsW8A8Int8MoEMethod"
    if test("_is_fp8_w4a8", ct._is_fp8_w4a8(w, i), "CompressedTensorsW4A8Fp8MoEMethod"):
        return preds, "CompressedTensorsW4A8Fp8MoEMethod"
    if test("_is_dynamic_token_w4a8_int", ct._dynamic_token_w4a8_int(w, i),
            "CompressedTensorsW4A8Int8MoEMethod"):
        return preds, "CompressedTensorsW4A8Int8MoEMethod"
    raise VllmRaised("RuntimeError", f"Unsupported FusedMoe scheme: {w}, {i}", "resolve")


# --------------------------------------------------------------------------- the oracles


def _try(cfg: MoEConfig, backend: str, names: tuple[str, ...], w, a,
         rules: MoERules) -> tuple[BackendStep, str | None, str | None]:
    """Ask a backend's experts classes in order (MoEKernelOracle.try_backend): the step, the
    class that said yes (or None), and the last reason."""
    steps, reason = [], None
    for key in names:
        ex = rules.experts[key]
        ok, reason = ex.is_supported_config(cfg, w, a, rules)
        steps.append(Step(ex.name, Outcome.SELECTED if ok else Outcome.REJECTED, reason))
        if ok:
            return BackendStep(backend, probes=tuple(steps)), key, None
    return BackendStep(backend, probes=tuple(steps)), None, reason


def w4a8_int8_weight_key(layer: MoELayer) -> QuantKey:
    """CompressedTensorsW4A8Int8MoEMethod.__init__: channelwise fp32 scales, else bf16 groups."""
    g = layer.group_size
    return (QuantKey("i8", "f32", True, (-1, 1)) if g == -1
            else QuantKey("i8", "bf16", True, (1, g)))


def trace_w4a8_int8(t: MoETrace, cfg: MoEConfig, rules: MoERules) -> MoETrace:
    """CompressedTensorsW4A8Int8MoEMethod.__init__ and select_w4a8_int8_moe_backend."""
    ly, p = cfg.layer, cfg.platform
    g = ly.group_size
    t = replace(t, sources=t.sources + (rules.src("w4a8i_group_check"),))
    if g != -1 and (ly.hidden_size % g or ly.intermediate_size % g):
        raise _fail(t, "ValueError", (
            f"Group size ({g}) must evenly divide both hidden size ({ly.hidden_size}) and "
            f"intermediate size per partition ({ly.intermediate_size})."), "method")
    w = w4a8_int8_weight_key(ly)
    t = replace(t, oracle="select_w4a8_int8_moe_backend",
                sources=t.sources + (rules.src("w4a8i_weight_key"), rules.src("w4a8i_select"),
                                     rules.src("w4a8i_priority")))
    if not p.is_cpu():
        raise _fail(t, "NotImplementedError",
                         "W4A8 Int8 MoE is only supported on CPU platforms", "oracle")
    t = replace(t, candidates=("CPU_INT4",))
    if cfg.moe_backend != "auto":
        # map_w4a8_int8_backend accepts only "cpu", which KernelConfig's MoEBackend literal
        # does not hold: every backend a user can name is refused here.
        t = replace(t, sources=t.sources + (rules.src("w4a8i_map"),))
        raise _fail(t, "ValueError", (
            f"moe_backend='{cfg.moe_backend}' is not supported for W4A8 Int8 MoE. "
            "Expected one of ['cpu']."), "oracle")
    step, key, _ = _try(cfg, "CPU_INT4", ("cpu_int4_w4a8",), w, None, rules)
    t = replace(t, backends=(step,), sources=t.sources + (
        rules.src("w4a8i_loop"), rules.src("cls_cpu_int4_w4a8"), rules.src("cpu_int4_arm"),
        rules.src("cpu_int4_dyn_quant"), rules.src("generic_checks"),
        rules.src("cpu_int4_activations"), rules.src("cpu_int4_quant")))
    if key is None:
        t = replace(t, sources=t.sources + (rules.src("w4a8i_none"),))
        raise _fail(t, "NotImplementedError",
                                  "No W4A8 Int8 MoE backend supports the deployment configuration.",
                                  "oracle")
    return replace(t, backend="CPU_INT4", experts=rules.experts[key].name,
                   runs=rules.experts[key].runs,
                   notes=t.notes + ("Using CPU_INT4 W4A8 Int8 MoE backend out of potential "
                                    "backends: ['CPU_INT4'].",))


def _fail(t: MoETrace, error_type: str, message: str, stage: str) -> "_Stop":
    """vLLM's refusal, with the trace as far as the load got."""
    return _Stop(t, VllmRaised(error_type, message, stage))


class _Stop(Exception):
    """A refusal raised after the trace grew: carries the trace so far."""

    def __init__(self, trace: MoETrace, raised: VllmRaised) -> None:
        super().__init__(raised.message)
        self.trace, self.raised = trace, raised


def wna16_weight_key(layer: MoELayer) -> QuantKey:
    """CompressedTensorsWNA16MoEMethod.__init__: the type by bits and symmetry, the scale by
    bits and group (4-bit: group 32 or any other group; 8-bit: one generic group scale)."""
    w = layer.weights
    bias = 1 << (w.num_bits - 1)
    dtype = f"uint{w.num_bits}b{bias}" if w.symmetric else f"uint{w.num_bits}"
    g = layer.group_size
    if w.num_bits == 4:
        group = (1, 32) if g == 32 else (1, -1)
    elif w.num_bits == 8:
        group = (1, -1)
    else:
        group = (-1, 1) if g == -1 else (1, g)
    return QuantKey(dtype, "f16", True, group, w.symmetric)


WNA16_BACKEND_CLASSES = {
    "MARLIN": ("marlin",), "BATCHED_MARLIN": ("batched_marlin",),
    "HUMMING": ("humming_batched", "humming_grouped", "humming_indexed"),
    "CPU": ("cpu_int4_amx",), "ZEN_CPU": ("zentorch",), "FLASHINFER_TRTLLM": ("trtllm_mxint4",),
    "TRITON": ("triton_wna16",), "XPU": ("xpu_wna16",), "EMULATION": ("int4_emulation",),
    "RDNA3": ("rdna3",)}
WNA16_MOE_BACKENDS = {"triton": "TRITON", "marlin": "MARLIN", "humming": "HUMMING",
                      "flashinfer_trtllm": "FLASHINFER_TRTLLM", "emulation": "EMULATION",
                      "rdna3": "RDNA3"}


def wna16_priority(p: Platform) -> list[str]:
    """int_wna16.py `_get_priority_backends`: CPU, XPU, else the GPU list with Humming moved
    ahead of Marlin on SM90 (humming/priority.py)."""
    if p.is_cpu():
        return ["ZEN_CPU", "CPU"]
    if p.is_xpu():
        return ["XPU"]
    gpu = [SimpleNamespace(__name__=n) for n in ("RDNA3", "FLASHINFER_TRTLLM", "MARLIN",
                                                 "BATCHED_MARLIN", "TRITON", "HUMMING",
                                                 "EMULATION")]
    return [b.__name__ for b in prioritize_humming(gpu, p.capability if p.is_cuda() else None)]


def marlin_moe_supports(layer: MoELayer, p: Platform, allow_tile_padding: bool = True) -> bool:
    """marlin_utils.py `check_moe_marlin_supports_config`."""
    if p.is_rocm():
        return False
    g, h, i = layer.group_size, layer.hidden_size, layer.intermediate_size
    if allow_tile_padding:
        shape = h % 128 == 0 and (g <= 0 or i % g == 0)
    else:
        shape = h % 128 == 0 and i % max(64, g) == 0
    return shape and g in (-1, 32, 64, 128)


def wna16_incompatibility(backend: str, layer: MoELayer, p: Platform,
                          rules: MoERules) -> str | None:
    """int_wna16.py `_backend_incompatibility_reason` for a compressed-tensors layer
    (QuantizationArgs; may_have_zp = not symmetric, no bias, tile padding allowed)."""
    w = layer.weights
    zp = not w.symmetric
    if backend == "FLASHINFER_TRTLLM" and zp:
        return "zero points and bias are not supported"
    if backend == "RDNA3":
        if zp:
            return "asymmetric checkpoints are not supported"
        if w.actorder == "group":
            return "group activation ordering is not supported"
        if w.strategy != "group":
            return "only group-wise scales are supported"
    if backend == "ZEN_CPU":
        return rules.zen_reasons(layer)
    if backend == "TRITON" and w.actorder == "group":
        return "group activation ordering is not supported"
    if backend in ("MARLIN", "BATCHED_MARLIN") and not marlin_moe_supports(layer, p):
        return "Marlin not supported for this layer"
    return None


def trace_wna16(t: MoETrace, cfg: MoEConfig, rules: MoERules) -> MoETrace:
    """CompressedTensorsWNA16MoEMethod.__init__ (select_wna16_moe_backend), create_weights."""
    ly, p = cfg.layer, cfg.platform
    w = wna16_weight_key(ly)
    t = replace(t, oracle="select_wna16_moe_backend", sources=t.sources + (
        rules.src("wna16_weight_key"), rules.src("wna16_select_call"), rules.src("wna16_select"),
        rules.src("wna16_incompat"), rules.src("wna16_backend_classes"),
        rules.src("generic_checks")))
    if cfg.moe_backend != "auto":
        t = replace(t, sources=t.sources + (rules.src("wna16_map"),))
        backend = WNA16_MOE_BACKENDS.get(cfg.moe_backend)
        if backend is None:
            raise _fail(t, "ValueError", (
                f"moe_backend='{cfg.moe_backend}' is not supported for WNA16 MoE. "
                f"Expected one of {list(WNA16_MOE_BACKENDS)}."), "oracle")
        t = replace(t, candidates=(backend,))
        why = wna16_incompatibility(backend, ly, p, rules)
        if why is not None:
            t = replace(t, backends=(BackendStep(backend, why, checked=True),))
            raise _fail(t, "ValueError", rules.wna16_unsupported(backend, why),
                                      "oracle")
        step, key, last = _try(cfg, backend, WNA16_BACKEND_CLASSES[backend], w, None, rules)
        t = replace(t, backends=(replace(step, checked=True),))
        if key is None:
            raise _fail(t, "ValueError", rules.wna16_unsupported(backend, last),
                                      "oracle")
        return _wna16_chosen(t, cfg, rules, backend, key)
    order = wna16_priority(p)
    t = replace(t, candidates=tuple(order),
                sources=t.sources + (rules.src("wna16_priority"), rules.src("humming_priority")))
    steps: list[BackendStep] = []
    for backend in order:
        why = wna16_incompatibility(backend, ly, p, rules)
        if why is not None:
            steps.append(BackendStep(backend, why, checked=True))
            continue
        step, key, _ = _try(cfg, backend, WNA16_BACKEND_CLASSES[backend], w, None, rules)
        steps.append(replace(step, checked=True))
        if key is not None:
            return _wna16_chosen(replace(t, backends=tuple(steps)), cfg, rules, backend, key)
    t = replace(t, backends=tuple(steps), sources=t.sources + (rules.src("wna16_none"),))
    raise _fail(t, "NotImplementedError",
                              "No WNA16 MoE backend supports the deployment configuration.",
                              "oracle")


def _wna16_chosen(t: MoETrace, cfg: MoEConfig, rules: MoERules, backend: str,
                  key: str) -> MoETrace:
    """After selection: the constructor's asserts, then create_weights' size checks."""
    ly = cfg.layer
    ex = rules.experts[key]
    t = replace(t, backend=backend, experts=ex.name, runs=ex.runs or None,
                sources=t.sources + (rules.src(ex.src), rules.src("wna16_group_assert")))
    if backend not in ("MARLIN", "BATCHED_MARLIN") and ly.weights.strategy != "group":
        raise _fail(t, "AssertionError", "", "method")
    if ly.weights.strategy == "group":
        g = ly.group_size
        t = replace(t, sources=t.sources + (rules.src("wna16_hidden_group"),))
        if ly.hidden_size % g:
            raise _fail(t, "ValueError", (
                f"CompressedTensors WNA16 MoE requires hidden_size ({ly.hidden_size}) to be "
                f"divisible by group_size ({g})."), "create_weights")
        if ly.intermediate_size % g:
            raise _fail(t, "ValueError", (
                "CompressedTensors WNA16 MoE with static group scales requires the MoE "
                "intermediate size per tensor-parallel partition "
                f"({ly.intermediate_size}) to be divisible by group_size ({g}). Scale groups "
                "would otherwise cross TP shard boundaries; use a compatible TP size or enable "
                "expert parallelism."), "create_weights")
    return t


W4A8_FP8_BACKENDS = {"cutlass": "CUTLASS", "humming": "HUMMING"}
W4A8_FP8_BACKEND_CLASSES = {"CUTLASS": ("cutlass_w4a8",),
                            "HUMMING": ("humming_batched", "humming_grouped", "humming_indexed")}


def trace_w4a8_fp8(t: MoETrace, cfg: MoEConfig, rules: MoERules) -> MoETrace:
    """CompressedTensorsW4A8Fp8MoEMethod.__init__ (its asserts, select_w4a8_moe_backend with
    kInt4Static x kFp8DynamicTokenSym), then create_weights' CUTLASS reorder asserts."""
    ly = cfg.layer
    t = replace(t, sources=t.sources + (rules.src("w4a8f_asserts"),))
    if not ly.weights.symmetric:
        raise _fail(t, "AssertionError", "Only symmetric quantization is supported for W4A8 MoE",
                         "method")
    if ly.weights.group_size != 128:
        raise _fail(t, "AssertionError", "Only group size 128 supported for W4A8 MoE", "method")
    order = ["CUTLASS", "HUMMING"]
    t = replace(t, oracle="select_w4a8_moe_backend",
                sources=t.sources + (rules.src("w4a8f_select_call"), rules.src("w4a8f_select")))
    if cfg.moe_backend != "auto":
        if cfg.moe_backend not in W4A8_FP8_BACKENDS:
            raise _fail(t, "ValueError", (
                f"moe_backend='{cfg.moe_backend}' is not supported for W4A8 MoE. "
                f"Expected one of {list(W4A8_FP8_BACKENDS)}."), "oracle")
        order = [W4A8_FP8_BACKENDS[cfg.moe_backend]]
    t = replace(t, candidates=tuple(order))
    steps, reasons = [], []
    for backend in order:
        step, key, _ = _try(cfg, backend, W4A8_FP8_BACKEND_CLASSES[backend], kInt4Static,
                            kFp8DynamicTokenSym, rules)
        steps.append(step)
        reasons += [f"{s.kernel}: {s.reason}" for s in step.probes if s.outcome is not Outcome.SELECTED]
        if key is not None:
            ex = rules.experts[key]
            t = replace(t, backends=tuple(steps), backend=backend, experts=ex.name,
                        runs=ex.runs or None,
                        notes=t.notes + (f"Using {backend} W4A8 MoE backend.",),
                        sources=t.sources + (rules.src(ex.src), rules.src("w4a8f_256")))
            if ly.hidden_size % 256:
                raise _fail(t, "AssertionError",
                                          f"hidden_size={ly.hidden_size} must be divisible by 256",
                                          "create_weights")
            if ly.intermediate_size % 256:
                raise _fail(t, 
                    "AssertionError", f"intermediate_size_per_partition={ly.intermediate_size} "
                    "must be divisible by 256", "create_weights")
            return t
    t = replace(t, backends=tuple(steps), sources=t.sources + (rules.src("w4a8f_none"),))
    raise _fail(t, "NotImplementedError",
                              "No W4A8 MoE backend supports the deployment configuration: "
                              + "; ".join(reasons), "oracle")


METHOD_TRACERS = {"CompressedTensorsW4A8Int8MoEMethod": trace_w4a8_int8,
                  "CompressedTensorsWNA16MoEMethod": trace_wna16,
                  "CompressedTensorsW4A8Fp8MoEMethod": trace_w4a8_fp8}


class MethodNotTraced(InvalidInputError):
    """get_moe_method chose a method whose oracle the workbench does not model."""


def trace_moe(layer: MoELayer, p: Platform, moe_backend: str, rules: MoERules,
              platform_name: str) -> MoETrace:
    """The whole MoE load: resolution, the method's oracle, create_weights' checks."""
    cfg = MoEConfig(layer, p, moe_backend)
    t = MoETrace(layer=layer, platform=platform_name, moe_backend=moe_backend,
                 vllm_version=rules.version, sources=(rules.src("factory"),
                                                      rules.src("get_moe_method")))
    if layer.quantization == "w4afp8":
        if not rules.has_w4afp8:
            raise MethodNotTraced(f"quantization w4afp8: vLLM {rules.version} has no such method "
                                  "(it is new in 0.34.0)")
        # W4AFP8Config.get_quant_method: every routed-experts layer not ignored gets the
        # compressed-tensors W4A8-FP8 MoE method with the config's args, no scheme tests
        method = "CompressedTensorsW4A8Fp8MoEMethod"
        t = replace(t, method=method, sources=(rules.src("factory"), rules.src("w4afp8_method")))
        preds = []
    else:
        try:
            preds, method = resolve_method(layer, p, rules)
        except VllmRaised as r:
            return t.failed(r.error_type, r.message, r.stage)
    keys = {"_is_mxfp4_w4a8_fp8": "pred_mxfp4_w4a8", "_is_mxfp4": "pred_mxfp4",
            "_is_mxfp8": "pred_mxfp8", "_is_wNa16_group_channel": "pred_wna16",
            "_is_nvfp4_format": "pred_nvfp4", "_is_fp8_w8a8 (sm90 / sm100 / any)": "pred_fp8_w8a8",
            "_is_dynamic_token_w8a8": "pred_w8a8_int", "_is_fp8_w4a8": "pred_fp8_w4a8",
            "_is_dynamic_token_w4a8_int": "pred_w4a8_int"}
    t = replace(t, predicates=tuple(preds), method=method,
                sources=t.sources + tuple(rules.src(keys[q.name]) for q in preds))
    tracer = METHOD_TRACERS.get(method)
    if tracer is None:
        raise MethodNotTraced(f"{method}: its MoE oracle is not modelled (traced: "
                              f"{', '.join(METHOD_TRACERS)})")
    try:
        return tracer(t, cfg, rules)
    except _Stop as s:
        return s.trace.failed(s.raised.error_type, s.raised.message, s.raised.stage)
    except VllmRaised as r:
        return t.failed(r.error_type, r.message, r.stage)
