"""INC / AutoRound layer resolution in vLLM 0.33.0.

Models `vllm/model_executor/layers/quantization/inc/`: `inc.py` (`INCConfig`: its accepted
values, checks and `get_quant_method`'s unquantized layers), `config_parser.py`
(`INCLayerConfig`, per-layer `extra_config`), `schemes/factory.py` (scheme order),
`schemes/inc_wna16_scheme.py` (the per-platform branch and the XPU `VLLM_XPU_INC_WNA16_BACKEND`
table), `schemes/inc_w4a8_linear.py` (multiple-of-8 partitions, the 512-token per-call
fallback, fp16 scales) and `schemes/inc_wna16_linear.py` (the GPTQ and AWQ routes into
AutoGPTQ / AutoAWQ methods it builds itself, and the XPU / ARK weight shapes).
On XPU, INC never goes through `choose_mp_linear_kernel`.

Input: `bits`, `group_size` (an int, or a 2-list for block FP8), `sym`, `packing_format`,
`backend` (or `vllm_backend`), `data_type`, `extra_config`, `block_name_to_quantize` (the
quantization config) and `in_features`, `out_features`, `input/output_size_per_partition`,
`params_dtype`, `scale_dtype`, `layer_name` (the layer).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from workbench.dispatch.env import Env, EnvChoiceError
from workbench.dispatch.trace import Level, Predicate, Trace
from workbench.dispatch.types import ST, Runtime, activation_name, dtype
from workbench.dispatch.vllm_0_33 import mxfp8
from workbench.dispatch.versions import takes_rules
from workbench.dispatch.vllm_0_33.config_gate import config_gate
from workbench.dispatch.vllm_0_33.errors import VllmError
from workbench.dispatch.vllm_0_33.gptq_awq import (GPTQ_TYPES, Layer, awq_config,
                                                   awq_marlin_linear, awq_triton_linear,
                                                   check_marlin_supported,
                                                   linear_method, quant_config,
                                                   unquantized_runtime)
from workbench.errors import InvalidInputError
from workbench.platforms import XPU_W4A8_OP, Platform

MIN_TOKENS_FOR_INT8 = 512  # INCXPUW4A8LinearMethod._MIN_TOKENS_FOR_INT8
DIM_ALIGNMENT = 8  # INCXPUW4A8LinearMethod._DIM_ALIGNMENT
XPU_WNA16_SUPPORTED_BITS = {2, 4}
XPU_ONEDNN_BACKENDS = ("w4a16", "w4a8")
CUDA_HUMMING_SUPPORTED_BITS = {2, 3, 5, 6, 7}
INC_DIR = "model_executor/layers/quantization/inc/"
XPU_W4A16_OP = "torch.ops._xpu_C.int4_gemm_w4a16"
INC_LINEAR = "INCLinearMethod"  # get_linear_method wraps every INC scheme's method in it

# INCConfig's accepted values (inc/inc.py:30-47), as sets in vLLM's declaration order: vLLM
# prints them with str(set), whose order follows string hashing (PYTHONHASHSEED).
INC_SUPPORTED_BITS = (2, 3, 4, 5, 6, 7, 8)
INC_PACKING_FORMATS = ("auto_round:auto_gptq", "auto_round:auto_awq", "auto_round:fp8",
                       "auto_round:llm_compressor")
INC_BACKENDS = ("auto", "gptq", "gptq:marlin", "awq", "awq:marlin", "marlin")
SUPPORTED_BITS = set(INC_SUPPORTED_BITS)
DEFAULT_INT_PACKING_FORMAT = "auto_round:auto_gptq"
SUPPORTED_DTYPES = {"int", "mx_fp", "fp"}
SUPPORTED_FORMATS = set(INC_PACKING_FORMATS)
SUPPORTED_BACKENDS = set(INC_BACKENDS)
INC_INT_PACKING_FORMATS = (DEFAULT_INT_PACKING_FORMAT, "auto_round:auto_awq")
INT_PACKING_FORMATS = set(INC_INT_PACKING_FORMATS)
FP8_BLOCK_PACKING_FORMAT = "auto_round:fp8"
MXFP8_PACKING_FORMAT = "auto_round:llm_compressor"


@dataclass(frozen=True)
class INCLayerConfig:
    bits: int
    group_size: int | tuple[int, int]
    sym: bool
    packing_format: str
    backend: str
    data_type: str
    quantized: bool

    def __repr__(self) -> str:  # the dataclass repr vLLM prints in its errors
        return (f"INCLayerConfig(bits={self.bits!r}, group_size={self.group_size!r}, "
                f"sym={self.sym!r}, packing_format={self.packing_format!r}, "
                f"backend={self.backend!r}, data_type={self.data_type!r}, "
                f"quantized={self.quantized!r})")

    @property
    def is_gptq(self) -> bool:
        return "gptq" in self.packing_format or "gptq" in self.backend

    @property
    def is_awq(self) -> bool:
        return "awq" in self.packing_format or "awq" in self.backend

    @property
    def is_fp8_block(self) -> bool:  # config_parser.py:47-56
        return (self.data_type == "fp" and self.bits == 8 and self.sym and self.quantized
                and self.packing_format == FP8_BLOCK_PACKING_FORMAT
                and isinstance(self.group_size, tuple) and len(self.group_size) == 2)


@dataclass(frozen=True)
class INCConfig:
    """The model-wide config as `INCConfig.from_config` builds and checks it."""

    bits: int
    group_size: int | tuple[int, int]
    sym: bool
    packing_format: str
    backend: str
    data_type: str
    extra_config: dict
    block_name_to_quantize: list | None


def _group_size(value: Any, field: str) -> int | tuple[int, int]:
    """`INCConfigParser._normalize_group_size` (config_parser.py:217-230)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                      for v in value):
            raise VllmError("ValueError", "INC block-wise FP8 requires group_size to be a 2-D "
                            f"integer sequence, but found {value!r}.")
        return (value[0], value[1])
    if isinstance(value, bool) or not isinstance(value, int) or value < -1 or value == 0:
        raise InvalidInputError(f"{field}: expected -1, a positive integer or a 2-list, "
                                f"got {value!r}")
    return value


def _string(value: Any, field: str) -> None:
    """A config's text fields are JSON strings; anything else would crash the membership tests."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{field}: expected a string, got {value!r}")


def inc_from_config(layer: dict) -> INCConfig:
    """`INCConfig.from_config` then `__init__` (inc/inc.py:65-117, 280-318)."""
    for key in ("bits", "group_size"):  # get_from_keys: no default (base_config.py:185-192)
        if key not in layer:
            raise VllmError("ValueError", f"Cannot find any of {[key]} in the model's "
                            "quantization config.")
    data_type = layer.get("data_type", "int")
    _string(data_type, "inc.data_type")
    data_type = "fp" if data_type == "fp8" else data_type  # _normalize_data_type: equality
    bits = layer["bits"]
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise InvalidInputError(f"inc.bits: expected an integer, got {bits!r}")
    group = _group_size(layer["group_size"], "inc.group_size")
    packing = layer.get("packing_format")
    if packing is None:
        if data_type == "fp" and bits == 8 and isinstance(group, tuple):
            packing = FP8_BLOCK_PACKING_FORMAT
        elif "mx_fp" in data_type:
            packing = MXFP8_PACKING_FORMAT
        else:
            packing = DEFAULT_INT_PACKING_FORMAT
    backend = layer.get("backend", layer.get("vllm_backend", "auto"))
    _string(packing, "inc.packing_format")
    _string(backend, "inc.backend")
    if bits not in SUPPORTED_BITS:
        raise VllmError("ValueError", f"Unsupported weight_bits: {bits}, currently only support "
                        f"{SUPPORTED_BITS}.")
    if data_type not in SUPPORTED_DTYPES and "mx_fp" not in data_type:
        raise VllmError("ValueError", f"Unsupported data_type: {data_type}, currently only "
                        f"support {SUPPORTED_DTYPES}.")
    if packing not in SUPPORTED_FORMATS:
        raise VllmError("ValueError", f"Unsupported packing_format: {packing}, currently only "
                        f"support {SUPPORTED_FORMATS}.")
    if backend not in SUPPORTED_BACKENDS:
        raise VllmError("ValueError", f"Unsupported backend: {backend}, currently only support "
                        f"{SUPPORTED_BACKENDS}.")
    sym = layer.get("sym", True)
    if not isinstance(sym, bool) and isinstance(sym, (int, float)) and sym in (0, 1):
        sym = bool(sym)  # 1 == True: the (bits, sym) lookups vLLM makes find the same entry
    if not isinstance(sym, bool):
        raise InvalidInputError(f"inc.sym: expected true or false, got {sym!r}")
    _validate(bits, group, sym, packing, backend, data_type)
    extra = layer.get("extra_config") or {}
    if not isinstance(extra, dict) or not all(isinstance(v, dict) for v in extra.values()):
        raise InvalidInputError("inc.extra_config: expected an object of layer name -> "
                                "{bits, group_size, sym}")
    from workbench.checkpoints.overrides import REGEX_SPECIAL  # the readers' bound, at call time
    from workbench.checkpoints.patterns import check_pattern_count

    check_pattern_count(sum(any(c in REGEX_SPECIAL for c in k) for k in extra), "inc.extra_config")
    blocks = layer.get("block_name_to_quantize", layer.get("to_quant_block_names"))
    if isinstance(blocks, str):
        blocks = blocks.split(",")
    return INCConfig(bits, group, sym, packing, backend, data_type, extra, blocks)


def _validate(bits, group, sym, packing, backend, data_type) -> None:
    """`_validate_supported_quantization` (inc/inc.py:219-225): assertions, vLLM's texts."""
    def check(ok: bool, text: str) -> None:
        if not ok:
            raise VllmError("AssertionError", text)

    if data_type == "int":
        check(isinstance(group, int), "INC int quantization requires scalar group_size, but "
              f"found group_size={group!r}.")
        check(packing in INT_PACKING_FORMATS, "INC int quantization only supports packing_format "
              f"in {sorted(INT_PACKING_FORMATS)!r}, but found packing_format={packing!r}.")
    elif data_type == "fp":
        check(bits == 8, f"INC block-wise FP8 only supports bits=8, but found bits={bits}.")
        check(isinstance(group, tuple), "INC block-wise FP8 requires a 2-D group_size, but "
              f"found group_size={group!r}.")
        check(bool(sym), "INC block-wise FP8 only supports symmetric weights.")
        check(packing == FP8_BLOCK_PACKING_FORMAT, "INC block-wise FP8 only supports "
              f"packing_format={FP8_BLOCK_PACKING_FORMAT!r}, but found {packing!r}.")
        check(backend == "auto", f"INC block-wise FP8 only supports backend='auto', but found "
              f"backend={backend!r}.")
    elif data_type == "mx_fp":
        check(bits in {4, 8}, f"INC MXFP only supports bits=4 or bits=8, but found bits={bits}.")
        check(group == 32, f"INC MXFP only supports group_size=32, but found group_size={group}.")
        check(bool(sym), "INC MXFP only supports symmetric weights.")
        check(packing == MXFP8_PACKING_FORMAT, "INC MXFP only supports "
              f"packing_format={MXFP8_PACKING_FORMAT!r}, but found {packing!r}.")
        check(backend == "auto", f"INC MXFP only supports backend='auto', but found "
              f"backend={backend!r}.")


def _resolve(c: INCConfig, d: Layer) -> INCLayerConfig:
    """`INCConfigParser.resolve` for one layer (config_parser.py:62-214), by the policy the
    checkpoint reader lists layers with (`workbench.checkpoints.overrides.inc_layer`)."""
    # The checkpoint package imports this rule set: imported here, not at module load.
    from workbench.checkpoints.overrides import inc_layer

    bits, group, sym = inc_layer(d.layer_name, lm_head=d.is_lm_head, base=(c.bits, c.group_size, c.sym),
                                 extra=c.extra_config, blocks=c.block_name_to_quantize or (),
                                 where="inc.extra_config")
    group = _group_size(group, "inc.extra_config.group_size")
    return INCLayerConfig(bits, group, sym, c.packing_format, c.backend, c.data_type, bits < 16)


def _xpu_w4a16(d: Layer) -> Runtime:
    return Runtime("INCXPULinearMethod", activation_name(dtype(d.params_dtype)), "int4",
                   XPU_W4A16_OP, INC_DIR + "schemes/inc_wna16_linear.py:339",
                   emulation="w4a16_fallback")


def _ark(d: Layer) -> Runtime:
    return Runtime("INCARKLinearMethod", activation_name(dtype(d.params_dtype)), "int4",
                   "torch.ops.vllm.inc_ark_woq_linear", INC_DIR + "schemes/inc_wna16_linear.py:447",
                   emulation="w4a16_fallback")


def _ark_state(p: Platform) -> str | None:
    """`get_ark_state` (schemes/inc_ark_ops.py:19-38): None when ARK is usable, else its error."""
    if not p.has_package("auto_round_kernel"):
        return "No module named 'auto_round_kernel'"
    if not p.ark_backend_lib:
        return "No ARK backend library is available."
    return None


def _group_scales(cfg: INCLayerConfig, d: Layer) -> None:
    """The scales a create_weights allocates, [K // group_size, N]: a channelwise group (-1)
    makes their first dimension negative, and torch.empty refuses it. Both creators divide
    the partition's K by the group size as given: `INCXPULinearBase._create_inc_weights`
    (schemes/inc_wna16_linear.py:188-250) and, for HummingLinearMethod.create_weights
    (quantization/humming.py:493-509), humming-kernels 0.1.19's GPTQ and AWQ weight schemas
    (humming/schema/gptq.py:41-44, awq.py:40-43; their qweight before it is never negative)."""
    groups = d.input_size_per_partition // cfg.group_size
    if groups < 0:
        shape = [groups, d.output_size_per_partition]
        raise VllmError("RuntimeError", f"Trying to create tensor with negative dimension "
                        f"{groups}: {shape}")


def _choose(t: Trace, method: str, runtime: Runtime, cfg: INCLayerConfig, d: Layer) -> Trace:
    """`INCLinearMethod(method)` is returned, then its create_weights runs."""
    t = linear_method(t, INC_LINEAR, selected=method, inner=(method,))
    try:
        _group_scales(cfg, d)
    except VllmError as exc:
        return t.failed(exc.error_type, exc.message)
    return replace(t, runtime_detail=runtime)


def _xpu(cfg: INCLayerConfig, d: Layer, p: Platform, env: Env, t: Trace) -> Trace:
    """`INCWna16Scheme.get_linear_method` on XPU (schemes/inc_wna16_scheme.py:67-120)."""
    if not (cfg.bits in XPU_WNA16_SUPPORTED_BITS and cfg.sym):
        raise VllmError("NotImplementedError", f"INC on XPU: unsupported config {cfg!r}")
    try:
        backend = env.xpu_inc_wna16_backend
    except EnvChoiceError as exc:
        raise VllmError("ValueError", str(exc)) from None
    t = t.gated(f"VLLM_XPU_INC_WNA16_BACKEND={backend}")
    try:
        return _xpu_backend(backend, cfg, d, p, t)
    except VllmError as exc:  # the backend read, and refused
        return t.failed(exc.error_type, exc.message)


def _xpu_backend(backend: str, cfg: INCLayerConfig, d: Layer, p: Platform, t: Trace) -> Trace:
    """The `VLLM_XPU_INC_WNA16_BACKEND` table (schemes/inc_wna16_scheme.py:82-120)."""
    prefix = d.layer_name
    if backend in XPU_ONEDNN_BACKENDS:
        if cfg.bits != 4:
            raise VllmError("NotImplementedError", f"VLLM_XPU_INC_WNA16_BACKEND={backend} only "
                            f"supports int4, got int{cfg.bits}. Layer: {prefix}.")
        if backend == "w4a8":
            return _xpu_w4a8(cfg, d, p, t)
        return _choose(t, "INCXPULinearMethod", _xpu_w4a16(d), cfg, d)
    ark_error = _ark_state(p)
    if backend == "ark" and ark_error:
        raise VllmError("NotImplementedError", (
            "VLLM_XPU_INC_WNA16_BACKEND=ark was requested but auto_round_kernel is unavailable: "
            f"{ark_error}. Layer: {prefix}."))
    if not ark_error:
        return _choose(t, "INCARKLinearMethod", _ark(d), cfg, d)
    if cfg.bits == 2:
        raise VllmError("NotImplementedError", (
            f"INC int2 on XPU requires the ARK backend. Layer: {prefix}. auto_round_kernel "
            f"unavailable: {ark_error}"))
    return _choose(t, "INCXPULinearMethod", _xpu_w4a16(d), cfg, d)


def _xpu_w4a8(cfg: INCLayerConfig, d: Layer, p: Platform, t: Trace) -> Trace:
    """`_check_xpu_w4a8_supported`, then `INCXPUW4A8LinearMethod.create_weights`."""
    prefix = d.layer_name
    if not p.has_op(XPU_W4A8_OP):
        raise VllmError("NotImplementedError", (
            "VLLM_XPU_INC_WNA16_BACKEND=w4a8 requires the int4_gemm_w4a8 op, which this "
            f"build of vllm-xpu-kernels does not provide. Layer: {prefix}."))
    if cfg.group_size <= 0 or cfg.group_size % 32 != 0:
        raise VllmError("NotImplementedError", (
            "VLLM_XPU_INC_WNA16_BACKEND=w4a8 requires a group size that is a positive "
            f"multiple of 32, got {cfg.group_size}. Layer: {prefix}."))
    t = linear_method(t, INC_LINEAR, selected="INCXPUW4A8LinearMethod",
                      inner=("INCXPUW4A8LinearMethod",))
    k, n = d.input_size_per_partition, d.output_size_per_partition
    bad = [(name, size) for name, size in (("input", k), ("output", n)) if size % DIM_ALIGNMENT]
    if bad:
        return t.failed("NotImplementedError", (
            "VLLM_XPU_INC_WNA16_BACKEND=w4a8 requires partitioned in/out sizes that are "
            f"multiples of {DIM_ALIGNMENT}, got "
            + ", ".join(f"{name}={size}" for name, size in bad)
            + f". Partition shape: ({k}, {n})."))
    return replace(t, runtime_detail=Runtime(
        "INCXPUW4A8LinearMethod", "int8", "int4", "torch.ops._xpu_C.int4_gemm_w4a8",
        INC_DIR + "schemes/inc_w4a8_linear.py:91", emulation="inc_xpu_w4a8", output="fp16",
        min_tokens=MIN_TOKENS_FOR_INT8, fallback_op=XPU_W4A16_OP, scale_dtype="fp16"))


def _wna16_scheme(R, cfg: INCLayerConfig, d: Layer, p: Platform, env: Env, t: Trace) -> Trace:
    """`INCWNA16LinearScheme._build_inner_method` (schemes/inc_wna16_linear.py:35-133): INC
    builds the AutoGPTQ / AutoAWQ methods itself, so `VLLM_MARLIN_INPUT_DTYPE` is never read."""
    t = _wna16_inner(R, cfg, d, p, env, t)  # raises only before it has built a method
    # INCLinearMethod -> INCWNA16LinearScheme -> the method it built
    return replace(t, inner=("INCWNA16LinearScheme", t.scheme)) if t.method is not None else t


def _wna16_inner(R, cfg: INCLayerConfig, d: Layer, p: Platform, env: Env, t: Trace) -> Trace:
    marlin_ok = cfg.backend == "auto" or "marlin" in cfg.backend
    if cfg.is_gptq:
        key = (cfg.bits, cfg.sym)
        use_marlin = marlin_ok and key in GPTQ_TYPES and check_marlin_supported(
            ST[GPTQ_TYPES[key]], cfg.group_size, not cfg.sym, p)[0]
        if not use_marlin:
            raise VllmError("NotImplementedError", (
                f"INC quantization with bits={cfg.bits}, sym={cfg.sym} is not supported. Only "
                "4-bit and 8-bit symmetric quantization is supported with Marlin kernels."))
        return R.gptq_linear(cfg.bits, cfg.sym, cfg.group_size, d, p, env, t, reads_env=False,
                             method=INC_LINEAR)
    if cfg.is_awq:
        awq_type = {4: "uint4", 8: "uint8"}.get(cfg.bits)
        use_marlin = marlin_ok and awq_type is not None and check_marlin_supported(
            ST[awq_type], cfg.group_size, not cfg.sym, p)[0]
        awq_config(4 if use_marlin else cfg.bits)  # AutoAWQConfig refuses 8-bit
        if use_marlin:
            return awq_marlin_linear(R, cfg.group_size, not cfg.sym, d, p, env, t,
                                     input_dtype=None, method=INC_LINEAR)
        return awq_triton_linear(cfg.bits, cfg.group_size, d, t, method=INC_LINEAR)
    raise VllmError("NotImplementedError", f"WNA16 linear scheme does not support {cfg!r}")


def _mxfp8(d: Layer, p: Platform, env: Env, t: Trace) -> Trace:
    """`INCMxfp8Scheme.get_linear_method` (schemes/inc_mxfp8_scheme.py:21-31), then
    `INCMxfp8LinearScheme.create_weights` (schemes/inc_mxfp8_linear.py:24-72): the K check,
    the [N, K] weight and `init_mxfp8_linear_kernel(weight_shape=(N, K))`."""
    t = linear_method(t, INC_LINEAR, inner=("INCMxfp8LinearScheme",))
    k = d.input_size_per_partition
    if k % mxfp8.BLOCK != 0:
        return t.failed("ValueError", f"INC MXFP8 requires input_size_per_partition ({k}) to "
                        f"be divisible by {mxfp8.BLOCK}.")
    return mxfp8.init_mxfp8_linear_kernel(d.output_size_per_partition, k, p, env, t, d.params_dtype)


def _schemes_tried(cfg: INCLayerConfig) -> tuple[Predicate, ...]:
    """`resolve_scheme`'s loop (schemes/factory.py:11-28): the schemes asked, in order, up to
    the first that can handle the config."""
    order = [("INCFp8Scheme", cfg.is_fp8_block),
             ("INCMxfp8Scheme", "mx_fp" in cfg.data_type and cfg.bits == 8),
             ("INCWna16Scheme", cfg.data_type == "int" and cfg.quantized),
             ("INCMxfp4Scheme", "mx_fp" in cfg.data_type and cfg.bits == 4)]
    tried = []
    for name, match in order:
        tried.append(Predicate(name, name if match else "", bool(match),
                               "matches" if match else "does not match"))
        if match:
            break
    return tuple(tried)


def _at_least_16(bits: Any) -> bool:
    """`extra_config[layer_name].get("bits", 16) >= 16` (inc/inc.py:329) on a JSON value: a
    string, list, object or null raises Python's own TypeError there, as in vLLM."""
    if not isinstance(bits, (int, float)):
        raise VllmError("TypeError", "'>=' not supported between instances of "
                        f"'{type(bits).__name__}' and 'int'")
    return bits >= 16


@takes_rules
def trace_inc_layer(R, layer: Any, p: Platform, env: Env, gate: bool = True,
                    quantization: str = "inc") -> Trace:
    """One Linear layer of an INC / AutoRound checkpoint (`quantization_config` as the
    checkpoint has it, or its fields on the layer object; see the module docstring)."""
    if not isinstance(layer, dict):
        raise InvalidInputError(f"inc: expected a JSON object, got {type(layer).__name__}")
    d = Layer.from_json(layer, "inc")
    dtype(layer.get("scale_dtype", d.params_dtype), "inc.scale_dtype")
    t = Trace(level=Level.INC)
    try:
        c = inc_from_config(quant_config(layer, "inc"))  # get_quant_config, before the gate
        if gate:
            config_gate(quantization, p, d.params_dtype)
        # get_quant_method (inc/inc.py:337-345): an extra_config entry of 16+ bits.
        for name, entry in c.extra_config.items():
            if name in (d.layer_name, f"model.{d.layer_name}") and _at_least_16(entry.get("bits", 16)):
                return _unquantized(t, d)
        cfg = _resolve(c, d)
        if not cfg.quantized:
            return _unquantized(t, d)
        t = replace(t, predicates=_schemes_tried(cfg))
        if not t.predicates[-1].matched:  # resolve_scheme (schemes/factory.py:28)
            raise VllmError("NotImplementedError", f"No INC scheme found for layer config: {cfg!r}")
        t = replace(t, scheme=t.predicates[-1].result)
        if t.scheme == "INCMxfp8Scheme":
            return _mxfp8(d, p, env, t)
        if t.scheme != "INCWna16Scheme":
            return t.noted(f"{t.scheme} is outside the int4 W4A8/W4A16 story; not traced further.")
        if p.is_xpu():
            return _xpu(cfg, d, p, env, t)
        if p.is_cpu() and cfg.is_gptq:
            if not (cfg.bits == 4 and cfg.sym):
                raise VllmError("NotImplementedError", f"INC on CPU: unsupported config {cfg!r}")
            if _ark_state(p) is None:
                return _choose(t, "INCARKLinearMethod", _ark(d), cfg, d)
            return _wna16_scheme(R, cfg, d, p, env, t)
        if p.is_cuda() and cfg.bits in CUDA_HUMMING_SUPPORTED_BITS:
            # _build_humming_linear_method imports humming's schemas (vllm/utils/humming.py).
            if not p.has_package("humming"):
                raise VllmError("ModuleNotFoundError", "No module named 'humming'")
            t = linear_method(t, "HummingLinearMethod", selected="HummingLinearMethod")
            _group_scales(cfg, d)  # its create_weights; a failure is caught below, on this t
            return replace(t, runtime_detail=Runtime(
                "HummingLinearMethod", activation_name(dtype(d.params_dtype)),
                f"uint{cfg.bits}b{2 ** (cfg.bits - 1)}", "apply_humming_linear",
                INC_DIR + "schemes/inc_wna16_scheme.py:146", emulation="w4a16_fallback"))
        return _wna16_scheme(R, cfg, d, p, env, t)
    except VllmError as exc:
        return t.failed(exc.error_type, exc.message)


def _unquantized(t: Trace, d: Layer) -> Trace:
    """`UnquantizedLinearMethod`: the layer stays in its params dtype."""
    return linear_method(t, "UnquantizedLinearMethod", selected="UnquantizedLinearMethod",
                         runtime_detail=unquantized_runtime(d))
