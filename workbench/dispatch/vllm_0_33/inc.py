"""INC / AutoRound layer resolution in vLLM 0.33.0 (facts §5).

Models `vllm/model_executor/layers/quantization/inc/`: `config_parser.py` (`INCLayerConfig`),
`schemes/factory.py` (scheme order), `schemes/inc_wna16_scheme.py` (the per-platform branch and
the XPU `VLLM_XPU_INC_WNA16_BACKEND` table), `schemes/inc_w4a8_linear.py` (multiple-of-8
partitions, the 512-token per-call fallback, fp16 scales) and `schemes/inc_wna16_linear.py`
(the GPTQ route into `AutoGPTQLinearMethod`, whose `create_weights` runs the MP loop).
On XPU, INC never goes through `choose_mp_linear_kernel`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.dispatch.env import Env, EnvChoiceError
from workbench.dispatch.trace import Predicate, Trace
from workbench.dispatch.types import ST, MPConfig, Runtime, activation_name, dtype
from workbench.dispatch.vllm_0_33.mp_kernels import MARLIN_SUPPORTED_GROUP_SIZES, marlin_types
from workbench.dispatch.vllm_0_33.selector import select_into
from workbench.errors import InvalidInputError
from workbench.platforms import XPU_W4A8_OP, Platform

MIN_TOKENS_FOR_INT8 = 512  # INCXPUW4A8LinearMethod._MIN_TOKENS_FOR_INT8
DIM_ALIGNMENT = 8  # INCXPUW4A8LinearMethod._DIM_ALIGNMENT
XPU_WNA16_SUPPORTED_BITS = {2, 4}
CUDA_HUMMING_SUPPORTED_BITS = {2, 3, 5, 6, 7}
INC_DIR = "model_executor/layers/quantization/inc/"
XPU_W4A16_OP = "torch.ops._xpu_C.int4_gemm_w4a16"


@dataclass(frozen=True)
class INCLayerConfig:
    bits: int
    group_size: int
    sym: bool
    packing_format: str
    backend: str
    data_type: str
    quantized: bool

    def __repr__(self) -> str:  # the dataclass repr vLLM prints in its errors
        return (f"INCLayerConfig(bits={self.bits}, group_size={self.group_size!r}, sym={self.sym}, "
                f"packing_format={self.packing_format!r}, backend={self.backend!r}, "
                f"data_type={self.data_type!r}, quantized={self.quantized})")

    @property
    def is_gptq(self) -> bool:
        return "gptq" in self.packing_format or "gptq" in self.backend

    @property
    def is_awq(self) -> bool:
        return "awq" in self.packing_format or "awq" in self.backend


class _Raise(Exception):
    def __init__(self, error_type: str, message: str):
        super().__init__(message)
        self.error_type, self.message = error_type, message


def _parse(layer: Any) -> tuple[INCLayerConfig, dict]:
    if not isinstance(layer, dict):
        raise InvalidInputError(f"inc: expected a JSON object, got {type(layer).__name__}")
    bits = layer.get("bits", 4)
    if isinstance(bits, bool) or not isinstance(bits, int) or bits <= 0:
        raise InvalidInputError(f"inc.bits: expected a positive integer, got {bits!r}")
    group = layer.get("group_size", 128)
    if isinstance(group, bool) or not isinstance(group, int) or group < -1 or group == 0:
        raise InvalidInputError(f"inc.group_size: expected -1 or a positive integer, got {group!r}")
    dims = {}
    for key in ("in_features", "out_features"):
        value = layer.get(key, 4096)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidInputError(f"inc.{key}: expected a positive integer, got {value!r}")
        dims[key] = value
    for key, full in (("input_size_per_partition", "in_features"),
                      ("output_size_per_partition", "out_features")):
        value = layer.get(key, dims[full])
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidInputError(f"inc.{key}: expected a positive integer, got {value!r}")
        dims[key] = value
    dims["params_dtype"] = dtype(layer.get("params_dtype", "bfloat16"), "inc.params_dtype").name
    dims["scale_dtype"] = dtype(layer.get("scale_dtype", dims["params_dtype"]), "inc.scale_dtype").name
    dims["layer_name"] = str(layer.get("layer_name", "model.layers.0.mlp.down_proj"))
    config = INCLayerConfig(
        bits=bits, group_size=group, sym=bool(layer.get("sym", True)),
        packing_format=str(layer.get("packing_format", "auto_round:auto_gptq")),
        backend=str(layer.get("backend", "auto")),
        data_type=str(layer.get("data_type", "int")).replace("fp8", "fp"),
        quantized=bits < 16,
    )
    return config, dims


def _select_gptq(cfg: INCLayerConfig, d: dict, p: Platform, env: Env, t: Trace) -> None:
    """`INCWNA16LinearScheme._build_gptq_method` then `AutoGPTQLinearMethod.create_weights`."""
    types = {(4, True): "uint4b8", (8, True): "uint8b128"}
    key = (cfg.bits, cfg.sym)
    use_marlin = (cfg.backend == "auto" or "marlin" in cfg.backend) and key in types
    if use_marlin:  # check_marlin_supported (layers/quantization/utils/marlin_utils.py)
        use_marlin = (ST[types[key]] in marlin_types(not cfg.sym, p)
                      and cfg.group_size in MARLIN_SUPPORTED_GROUP_SIZES)
    if not use_marlin:
        raise _Raise("NotImplementedError", (
            f"INC quantization with bits={cfg.bits}, sym={cfg.sym} is not supported. Only 4-bit "
            "and 8-bit symmetric quantization is supported with Marlin kernels."))
    t.scheme = "INCWna16Scheme -> AutoGPTQLinearMethod"
    act = dtype(d["params_dtype"])
    marlin_in = env.marlin_input_dtype  # auto_gptq puts it into act_type before selection
    if marlin_in:
        act = dtype("int8" if marlin_in == "int8" else "float8_e4m3fn")
    config = MPConfig((d["in_features"], d["out_features"]),
                      (d["input_size_per_partition"], d["output_size_per_partition"]),
                      ST[types[key]], act, cfg.group_size, False)
    t.kernel_stage = True
    select_into(t, config, p, env)


def _act(d: dict) -> str:
    return activation_name(dtype(d["params_dtype"]))


def _xpu_w4a16(d: dict) -> Runtime:
    return Runtime("INCXPULinearMethod", _act(d), "int4", XPU_W4A16_OP,
                   INC_DIR + "schemes/inc_wna16_linear.py:339", emulation="w4a16_fallback")


def _ark(d: dict) -> Runtime:
    return Runtime("INCARKLinearMethod", _act(d), "int4", "torch.ops.vllm.inc_ark_woq_linear",
                   INC_DIR + "schemes/inc_wna16_linear.py:447", emulation="w4a16_fallback")


def _xpu(cfg: INCLayerConfig, d: dict, p: Platform, env: Env, t: Trace) -> None:
    prefix = d["layer_name"]
    if not (cfg.bits in XPU_WNA16_SUPPORTED_BITS and cfg.sym):
        raise _Raise("NotImplementedError", f"INC on XPU: unsupported config {cfg!r}")
    try:
        backend = env.xpu_inc_wna16_backend
    except EnvChoiceError as exc:
        raise _Raise("ValueError", str(exc)) from None
    t.gates.append(f"VLLM_XPU_INC_WNA16_BACKEND={backend}")
    if backend in ("w4a16", "w4a8"):
        if cfg.bits != 4:
            raise _Raise("NotImplementedError", f"VLLM_XPU_INC_WNA16_BACKEND={backend} only "
                         f"supports int4, got int{cfg.bits}. Layer: {prefix}.")
        if backend == "w4a8":
            if not p.has_op(XPU_W4A8_OP):
                raise _Raise("NotImplementedError", (
                    "VLLM_XPU_INC_WNA16_BACKEND=w4a8 requires the int4_gemm_w4a8 op, which this "
                    f"build of vllm-xpu-kernels does not provide. Layer: {prefix}."))
            if cfg.group_size <= 0 or cfg.group_size % 32 != 0:
                raise _Raise("NotImplementedError", (
                    "VLLM_XPU_INC_WNA16_BACKEND=w4a8 requires a group size that is a positive "
                    f"multiple of 32, got {cfg.group_size}. Layer: {prefix}."))
            t.selected = "INCXPUW4A8LinearMethod"
            k, n = d["input_size_per_partition"], d["output_size_per_partition"]
            bad = [(name, size) for name, size in (("input", k), ("output", n)) if size % DIM_ALIGNMENT]
            if bad:
                raise _Raise("NotImplementedError", (
                    "VLLM_XPU_INC_WNA16_BACKEND=w4a8 requires partitioned in/out sizes that are "
                    f"multiples of {DIM_ALIGNMENT}, got "
                    + ", ".join(f"{name}={size}" for name, size in bad)
                    + f". Partition shape: ({k}, {n})."))
            t.runtime_detail = Runtime(
                "INCXPUW4A8LinearMethod", "int8", "int4", "torch.ops._xpu_C.int4_gemm_w4a8",
                INC_DIR + "schemes/inc_w4a8_linear.py:91", emulation="inc_xpu_w4a8",
                output="fp16", min_tokens=MIN_TOKENS_FOR_INT8, fallback_op=XPU_W4A16_OP,
                scale_dtype="fp16")
            return
        t.selected = "INCXPULinearMethod"
        t.runtime_detail = _xpu_w4a16(d)
        return
    ark = p.has_package("auto_round_kernel")
    if backend == "ark" and not ark:
        raise _Raise("NotImplementedError", (
            "VLLM_XPU_INC_WNA16_BACKEND=ark was requested but auto_round_kernel is unavailable: "
            f"No module named 'auto_round_kernel'. Layer: {prefix}."))
    if ark:
        t.selected = "INCARKLinearMethod"
        t.runtime_detail = _ark(d)
        return
    if cfg.bits == 2:
        raise _Raise("NotImplementedError", (
            f"INC int2 on XPU requires the ARK backend. Layer: {prefix}. auto_round_kernel "
            "unavailable: No module named 'auto_round_kernel'"))
    t.selected = "INCXPULinearMethod"
    t.runtime_detail = _xpu_w4a16(d)


def trace_inc_layer(layer: Any, p: Platform, env: Env) -> Trace:
    cfg, d = _parse(layer)
    t = Trace(level="inc")
    try:
        # INCConfig.from_config reads bits and group_size with get_from_keys, no default
        # (inc/inc.py:278-281, base_config.py:185-192), in get_quant_config, before the
        # capability gate (config/vllm.py:925): a config without them does not load.
        for key in ("bits", "group_size"):
            if key not in layer:
                raise _Raise("ValueError", f"Cannot find any of {[key]} in the model's "
                                           "quantization config.")
        # INCConfig: min capability 60, act dtypes [half, bfloat16] (vllm/config/vllm.py gate).
        if p.capability is not None and p.capability < 60:
            raise _Raise("ValueError", (
                "The quantization method inc is not supported for the current GPU. Minimum "
                f"capability: 60. Current capability: {p.capability}."))
        if d["params_dtype"] not in ("float16", "bfloat16"):
            raise _Raise("ValueError", (
                f"torch.{d['params_dtype']} is not supported for quantization method inc. "
                "Supported dtypes: [torch.float16, torch.bfloat16]"))
        order = [("INCFp8Scheme", False), ("INCMxfp8Scheme", "mx_fp" in cfg.data_type and cfg.bits == 8),
                 ("INCWna16Scheme", cfg.data_type == "int" and cfg.quantized),
                 ("INCMxfp4Scheme", "mx_fp" in cfg.data_type and cfg.bits == 4)]
        chosen = None
        for name, match in order:
            t.predicates.append(Predicate(name, name if match else "", bool(match),
                                          "matches" if match else "does not match"))
            if match:
                chosen = name
                break
        if chosen is None:
            raise _Raise("NotImplementedError", f"No INC scheme found for layer config: {cfg!r}")
        t.scheme = chosen
        if chosen != "INCWna16Scheme":
            t.notes.append(f"{chosen} is outside the int4 W4A8/W4A16 story; not traced further.")
            return t
        if p.is_xpu():
            _xpu(cfg, d, p, env, t)
        elif p.is_cpu() and cfg.is_gptq:
            if not (cfg.bits == 4 and cfg.sym):
                raise _Raise("NotImplementedError", f"INC on CPU: unsupported config {cfg!r}")
            if p.has_package("auto_round_kernel"):
                t.selected, t.runtime_detail = "INCARKLinearMethod", _ark(d)
            else:
                _select_gptq(cfg, d, p, env, t)
        elif p.is_cuda() and cfg.bits in CUDA_HUMMING_SUPPORTED_BITS:
            t.selected = "HummingLinearMethod"
            t.runtime_detail = Runtime("HummingLinearMethod", activation_name(dtype(d["params_dtype"])),
                                       f"uint{cfg.bits}b{2 ** (cfg.bits - 1)}", "apply_humming_linear",
                                       INC_DIR + "schemes/inc_wna16_scheme.py:146")
        elif cfg.is_gptq:
            _select_gptq(cfg, d, p, env, t)
        elif cfg.is_awq:
            t.selected = "AutoAWQ (Marlin or Triton AWQ) linear method"
            t.notes.append("The AWQ route is named, not traced kernel by kernel.")
        else:
            raise _Raise("NotImplementedError", f"WNA16 linear scheme does not support {cfg!r}")
    except _Raise as exc:
        t.error, t.error_type = exc.message, exc.error_type
    return t
