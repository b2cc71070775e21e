"""compressed-tensors scheme resolution in vLLM 0.33.0, then the scheme's kernel selection.

Models, in `vllm/model_executor/layers/quantization/compressed_tensors/`:
- `compressed_tensors.py`: `_quantization_scheme_map_from_config` (what is stored),
  `_get_scheme_from_parts` (the predicates, first match wins), `get_scheme` and
  `_check_scheme_supported` (the per-layer capability gate);
- `schemes/*.py`: each MP scheme's constructor checks and `create_weights`, which builds the
  `MPLinearLayerConfig`, calls `choose_mp_linear_kernel`, and checks that quant groups do not
  straddle tensor-parallel shards (`vllm/distributed/utils.py`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from workbench.dispatch.env import Env
from workbench.dispatch.env import EnvChoiceError
from workbench.dispatch.trace import Level, Predicate, Stage, Trace
from workbench.dispatch.types import FP8_E4M3, ST, MPConfig, dtype
from workbench.dispatch.vllm_0_33.config_gate import config_gate
from workbench.dispatch.vllm_0_33.errors import VllmError
from workbench.dispatch.vllm_0_33.humming_input import InputConfig
from workbench.dispatch.versions import takes_rules
from workbench.dispatch.vllm_0_33.marlin_input import MarlinInputError
from workbench.errors import InvalidInputError
from workbench.layer import CTScheme
from workbench.platforms import Platform
from workbench.quant_args import QuantArgs, QuantArgsNotImplemented

ACT_QUANT_FORMATS = ("naive-quantized", "int-quantized", "float-quantized", "nvfp4-pack-quantized")
# compressed-tensors' CompressionFormat values (others are refused as input errors).
FORMATS = ("dense", "sparse-bitmask", "sparse-24-bitmask", "int-quantized", "float-quantized",
           "naive-quantized", "pack-quantized", "marlin-24", "mixed-precision",
           "nvfp4-pack-quantized", "mxfp4-pack-quantized", "mxfp8-quantized")

# Scheme class -> min capability (`get_min_capability` in
# vllm/model_executor/layers/quantization/compressed_tensors/schemes/*.py).
MIN_CAPABILITY = {
    "CompressedTensorsW4A4Fp4": 75, "CompressedTensorsW4A8Mxfp4": 80,
    "CompressedTensorsW4A4Mxfp4": 80, "CompressedTensorsW8A8Mxfp8": 75,
    "CompressedTensorsW4A8Fp8": 90, "CompressedTensorsWNA8O8Int": 70,
    "CompressedTensorsWNA8Int": 75, "CompressedTensorsWNA4Int": 75,
    "CompressedTensorsWNA16": 75, "CompressedTensorsW8A8Fp8": 89,
    "CompressedTensorsW8A16Fp8": 75, "CompressedTensorsW8A8Int8": 75,
    "CompressedTensorsW4A8Int": 1,
}
# Schemes whose create_weights runs `choose_mp_linear_kernel`; the others use the scaled-mm,
# FP8, NVFP4 or MX selectors, which this workbench names but does not walk.
MP_SCHEMES = {"CompressedTensorsW4A8Int", "CompressedTensorsW4A8Fp8", "CompressedTensorsWNA16",
              "CompressedTensorsWNA8Int", "CompressedTensorsWNA4Int", "CompressedTensorsWNA8O8Int"}

WNA16_TYPES = {2: "uint2b2", 3: "uint3b4", 4: "uint4b8", 5: "uint5b16", 6: "uint6b32",
               7: "uint7b64", 8: "uint8b128"}
WNA16_ZP_TYPES = {b: f"uint{b}" for b in range(2, 9)}
WNA8O8_TYPES = {2: "uint2b2", 4: "uint4b8", 8: "uint8b128"}


class SchemeError(VllmError):
    """vLLM raised while resolving or building the scheme; carries its type name and text."""


# --------------------------------------------------------------------------- the layer


@dataclass(frozen=True)
class SchemeInput:
    """One Linear layer of a compressed-tensors checkpoint, as vLLM's loader stores it
    (`_quantization_scheme_map_from_config`'s rules applied to a `CTScheme`)."""

    weights: QuantArgs | None
    input_activations: QuantArgs | None
    output_activations: QuantArgs | None
    format: str | None
    layer_name: str
    in_features: int
    out_features: int
    params_dtype: str
    input_size_per_partition: int
    output_size_per_partition: int

    @classmethod
    def of(cls, scheme: Any) -> "SchemeInput":
        """A SchemeInput as is, a `CTScheme` (the readers' typed layer), or scheme JSON."""
        if isinstance(scheme, cls):
            return scheme
        if isinstance(scheme, CTScheme):
            return cls.from_scheme(scheme)
        return cls.from_json(scheme)

    @classmethod
    def from_json(cls, data: Any) -> "SchemeInput":
        """Parse scheme JSON (the CLI's --batch files, recorded cases), then `from_scheme`.

        Raises InvalidInputError for malformed input and SchemeError for what vLLM itself refuses
        while parsing the config (group/dynamic actorder; the W8A16-FP8 assert).
        """
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"scheme: expected a JSON object, got {type(data).__name__}")
        known = {"weights", "input_activations", "output_activations", "format", "layer_name",
                 "in_features", "out_features", "params_dtype", "input_size_per_partition",
                 "output_size_per_partition"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidInputError(f"scheme: unknown field(s) {unknown}; accepted: {sorted(known)}")
        for key in ("in_features", "out_features"):
            if key not in data:
                raise InvalidInputError(f"scheme.{key}: missing (required)")
        # The shapes first (the order the checks always ran in), then the format and args.
        shape = CTScheme(weights=None,
                         layer_name=str(data.get("layer_name", "model.layers.0.mlp.down_proj")),
                         in_features=data["in_features"], out_features=data["out_features"],
                         params_dtype=data.get("params_dtype", "bfloat16"),
                         input_size_per_partition=data.get("input_size_per_partition"),
                         output_size_per_partition=data.get("output_size_per_partition"))
        fmt = data.get("format")
        if fmt is not None and fmt not in FORMATS:
            raise InvalidInputError(f"scheme.format: unknown format {fmt!r}; accepted: {', '.join(FORMATS)}")
        dtype(shape.params_dtype, "scheme.params_dtype")

        def args(key: str) -> QuantArgs | None:
            value = data.get(key)
            # An empty input/output object is no args (vLLM tests it for truth); weights {} is
            # QuantizationArgs' defaults.
            absent = value is None if key == "weights" else not value
            return None if absent else QuantArgs.from_json(value, f"scheme.{key}")

        try:
            scheme = replace(shape, format=fmt, weights=args("weights"),
                             input_activations=args("input_activations"),
                             output_activations=args("output_activations"))
        except QuantArgsNotImplemented as exc:
            raise SchemeError("NotImplementedError", str(exc)) from None
        return cls.from_scheme(scheme)

    @classmethod
    def from_scheme(cls, s: CTScheme) -> "SchemeInput":
        """`_quantization_scheme_map_from_config`'s storing rules on one typed layer."""
        if s.format is not None and s.format not in FORMATS:
            raise InvalidInputError(f"scheme.format: unknown format {s.format!r}; accepted: "
                                    f"{', '.join(FORMATS)}")
        params = dtype(s.params_dtype, "scheme.params_dtype").name
        w = s.weights
        if w is not None and w.actorder in ("group", "dynamic"):
            raise SchemeError("ValueError", (
                "Compressed-tensors group/dynamic activation ordering "
                f"(actorder={w.actorder!r}) is no longer supported. Use a checkpoint with "
                "static/weight activation ordering or without activation ordering."))
        inp = None
        # Stored when the format quantizes activations or the group lists input_activations.
        if s.format in ACT_QUANT_FORMATS or s.input_activations is not None:
            if s.input_activations is None:
                if w is not None and w.type != "float":
                    raise SchemeError("AssertionError", "")
            else:
                inp = s.input_activations
        k_part, n_part = s.partition
        return cls(weights=w, input_activations=inp, output_activations=s.output_activations,
                   format=s.format, layer_name=s.layer_name, in_features=s.in_features,
                   out_features=s.out_features, params_dtype=params,
                   input_size_per_partition=k_part, output_size_per_partition=n_part)


# --------------------------------------------------------------------------- predicates

Check = tuple[bool, str]


def _all(*conds: tuple[bool, str]) -> Check:
    """The first failing condition explains a miss; all true is a match."""
    for ok, text in conds:
        if not ok:
            return False, f"fails: {text}"
    return True, "all conditions hold"


def _is_nvfp4(a: QuantArgs | None) -> Check:
    if a is None:
        return False, "fails: no weight args"
    return _all((a.strategy == "tensor_group", "strategy == tensor_group"),
                (a.type == "float", "type == float"), (a.num_bits == 4, "num_bits == 4"),
                (a.group_size == 16, "group_size == 16"), (a.symmetric, "symmetric"))


def _is_mxfp4(a: QuantArgs | None) -> Check:
    if a is None:
        return False, "fails: no args"
    return _all((a.strategy == "group", "strategy == group"), (a.type == "float", "type == float"),
                (a.num_bits == 4, "num_bits == 4"), (a.group_size == 32, "group_size == 32"),
                (a.symmetric, "symmetric"))


def _is_mxfp4_w4a8_fp8(w, i) -> Check:
    ok, why = _is_mxfp4(w)
    if not ok:
        return False, "fails: weights are not MXFP4"
    if i is None:
        return False, "fails: no input activations"
    return _all((i.type == "float", "input type == float"), (i.num_bits == 8, "input num_bits == 8"),
                (not w.dynamic, "weights static"), (bool(i.dynamic), "input dynamic"),
                (i.strategy in ("token", "group"), "input strategy token or group"),
                (i.symmetric, "input symmetric"))


def _is_mxfp8(a) -> Check:
    if a is None:
        return False, "fails: no args"
    return _all((a.strategy == "group", "strategy == group"), (a.type == "float", "type == float"),
                (a.num_bits == 8, "num_bits == 8"), (a.group_size == 32, "group_size == 32"),
                (a.symmetric, "symmetric"), (a.scale_dtype == "uint8", "scale_dtype == torch.uint8"))


def _is_fp8_w4a8(w, i) -> Check:
    if not w or not i:
        return False, "fails: weights and input activations both required"
    return _all((w.type == "int", "weight type == int"), (i.type == "float", "input type == float"),
                (w.num_bits == 4, "weight num_bits == 4"), (i.num_bits == 8, "input num_bits == 8"),
                (w.strategy == "group", "weight strategy == group"),
                (i.strategy == "token", "input strategy == token"),
                (bool(w.symmetric and i.symmetric), "weight and input symmetric"),
                (bool(not w.dynamic and i.dynamic), "weight static, input dynamic"))


def _cap_exact(p: Platform, cap: int) -> bool:
    """`_check_scheme_supported(cap, error=False, match_exact=True)`: None capability fails."""
    return p.capability is not None and p.capability == cap


def _is_wna8o8_int(w, i, o, fmt) -> Check:
    return _all((fmt in ("pack-quantized", "int-quantized"), "format pack-quantized or int-quantized"),
                (w.type == "int" and not w.dynamic, "weight int and static"),
                (w.strategy in ("channel", "group"), "weight strategy channel or group"),
                (i is not None and i.type == "int" and i.strategy == "tensor" and i.num_bits == 8
                 and not i.dynamic, "static per-tensor int8 input"),
                (o is not None and o.type == "int" and o.strategy == "tensor" and o.num_bits == 8
                 and not o.dynamic, "static per-tensor int8 output"))


def _is_wnam_int(w, i, fmt) -> Check:
    if i is None:
        return False, "fails: no input activations"
    return _all((w.type == "int" and not w.dynamic, "weight int and static"),
                (w.strategy in ("channel", "group"), "weight strategy channel or group"),
                (fmt == "pack-quantized", f"format == pack-quantized (this layer's format is {fmt})"),
                (i.type == "int", "input type == int"), (i.symmetric, "input symmetric"),
                (bool(i.dynamic), "input dynamic"),
                (i.strategy in ("token", "group"), "input strategy token or group"))


def _is_wna16(w, i) -> Check:
    return _all((w.strategy in ("channel", "group"), "weight strategy channel or group"),
                (i is None, "no input activations"), (not w.dynamic, "weight static"))


def _fp8_w8a8(w, i) -> Check:
    if w is None or i is None:
        return False, "fails: weights and input activations both required"
    ok, why = _all((w.type == "float" and i.type == "float", "weight and input float"),
                   (w.symmetric, "weight symmetric"), (not w.dynamic, "weight static"),
                   (w.strategy in ("tensor", "channel", "block"), "weight strategy tensor/channel/block"))
    if not ok:
        return ok, why
    if i.dynamic:
        return True, "dynamic input"
    return _all((i.symmetric, "static input symmetric"), (i.strategy == "tensor", "static input per-tensor"))


def _fp8_w8a16(w, i) -> Check:
    if w is None:
        return False, "fails: no weights"
    return _all((w.type == "float", "weight type == float"), (w.symmetric, "weight symmetric"),
                (not w.dynamic, "weight static"),
                (w.strategy in ("tensor", "channel", "block"), "weight strategy tensor/channel/block"))


def _static_tensor_w8a8(w, i) -> Check:
    return _all((w.num_bits == i.num_bits == 8, "weight and input num_bits == 8"),
                (w.strategy in ("tensor", "channel") and i.strategy == "tensor",
                 "weight tensor/channel, input tensor"),
                (w.symmetric, "weight symmetric"), (not w.dynamic and not i.dynamic, "both static"))


def _dynamic_token_w8a8(w, i) -> Check:
    return _all((w.num_bits == i.num_bits == 8, "weight and input num_bits == 8"),
                (w.strategy in ("tensor", "channel") and i.strategy == "token",
                 "weight tensor/channel, input token"),
                (bool(not w.dynamic and i.dynamic), "weight static, input dynamic"),
                (w.symmetric, "weight symmetric"))


def _dynamic_token_w4a8_int(w, i) -> Check:
    if not w or not i:
        return False, "fails: weights and input activations both required"
    return _all((w.type == "int" and i.type == "int", "weight and input type int"),
                (w.num_bits == 4, "weight num_bits == 4"), (i.num_bits == 8, "input num_bits == 8"),
                (w.strategy in ("group", "channel") and i.strategy == "token",
                 "weight group/channel, input token"),
                (w.symmetric, "weight symmetric (input symmetry is not checked)"),
                (bool(not w.dynamic and i.dynamic), "weight static, input dynamic"))


# --------------------------------------------------------------------------- resolution


@dataclass
class Resolved:
    scheme: str
    # create_weights: the trace so far -> the trace with the kernel it builds, or its error
    build: Callable[[Any, "SchemeInput", Platform, Env, Trace], Trace] | None = None  # (R, ...)


def _not_found(s: SchemeInput) -> SchemeError:
    return SchemeError("NotImplementedError", (
        f"No compressed-tensors compatible scheme was found for layer_name={s.layer_name!r}, "
        f"weight_quant={s.weights!r}, input_quant={s.input_activations!r}, "
        f"output_quant={s.output_activations!r}, format={s.format!r}"))


def get_scheme_from_parts(s: SchemeInput, p: Platform, env: Env, preds: list[Predicate]) -> Resolved:
    """`_get_scheme_from_parts`: test each predicate in order, record it, return the first match."""
    w, i, o, fmt = s.weights, s.input_activations, s.output_activations, s.format

    def test(name: str, check: Check, result: str) -> bool:
        preds.append(Predicate(name, result if check[0] else "", check[0], check[1]))
        return check[0]

    if test("_is_nvfp4_format(weight)", _is_nvfp4(w), "CompressedTensorsW4A4Fp4"):
        if i is None:
            return Resolved("CompressedTensorsW4A4Fp4")  # use_a16=True: NVFP4A16
        if not _is_nvfp4(i)[0]:
            raise SchemeError("ValueError", "For NVFP4 weights, input quantization must also be "
                              "NVFP4 format, None for NVFP4A16")
        return Resolved("CompressedTensorsW4A4Fp4")
    if test("_is_mxfp4_w4a8_fp8(weight, input)", _is_mxfp4_w4a8_fp8(w, i), "CompressedTensorsW4A8Mxfp4"):
        return Resolved("CompressedTensorsW4A8Mxfp4")
    if test("_is_mxfp4(weight)", _is_mxfp4(w), "CompressedTensorsW4A4Mxfp4"):
        return Resolved("CompressedTensorsW4A4Mxfp4")
    if test("_is_mxfp8(weight)", _is_mxfp8(w), "CompressedTensorsW8A8Mxfp8"):
        return Resolved("CompressedTensorsW8A8Mxfp8")
    sm90 = _cap_exact(p, 90)
    check = _is_fp8_w4a8(w, i)
    if check[0] and not sm90:
        check = (False, f"fails: device capability is exactly 90 (current: {p.capability})")
    if test("_is_fp8_w4a8_sm90(weight, input)", check, "CompressedTensorsW4A8Fp8"):
        return Resolved("CompressedTensorsW4A8Fp8", _build_w4a8_fp8)
    if test("_is_wNa8o8_int(weight, input, output, format)", _is_wna8o8_int(w, i, o, fmt),
            "CompressedTensorsWNA8O8Int"):
        return Resolved("CompressedTensorsWNA8O8Int", _build_wna8o8)
    wnam = _is_wnam_int(w, i, fmt)
    check = wnam if not wnam[0] or i.num_bits == 8 else (False, "fails: input num_bits == 8")
    if test("_is_wNaM_int(weight, input, format) and input.num_bits == 8", check,
            "CompressedTensorsWNA8Int"):
        return Resolved("CompressedTensorsWNA8Int", _build_wnam("WNA8Int"))
    check = wnam if not wnam[0] or i.num_bits == 4 else (False, "fails: input num_bits == 4")
    if test("_is_wNaM_int(weight, input, format) and input.num_bits == 4", check,
            "CompressedTensorsWNA4Int"):
        return Resolved("CompressedTensorsWNA4Int", _build_wnam("WNA4Int"))
    check = _is_wna16(w, i)
    if check[0] and fmt != "pack-quantized":
        check = (False, f"fails: format == pack-quantized (this layer's format is {fmt})")
    if test("_is_wNa16_group_channel(weight, input) and format == pack-quantized", check,
            "CompressedTensorsWNA16"):
        return Resolved("CompressedTensorsWNA16", _build_wna16)
    if fmt not in ACT_QUANT_FORMATS:
        preds.append(Predicate("is_activation_quantization_format(format)", "", False,
                               f"fails: {fmt!r} is not one of {', '.join(ACT_QUANT_FORMATS)}; "
                               "the W8A8 and W4A8-INT predicates are skipped"))
        raise _not_found(s)
    if test("_is_fp8_w8a8(weight, input)", _fp8_w8a8(w, i), "CompressedTensorsW8A8Fp8 or W8A16Fp8"):
        if p.is_xpu():
            supported = env.linear_backend in ("xpu", "torch") or w.strategy == "block"
        else:
            supported = p.capability is None or p.capability >= 89
        return Resolved("CompressedTensorsW8A8Fp8" if supported else "CompressedTensorsW8A16Fp8")
    if test("_is_fp8_w8a16(weight, input)", _fp8_w8a16(w, i), "CompressedTensorsW8A16Fp8"):
        return Resolved("CompressedTensorsW8A16Fp8")
    if i is not None:
        if test("_is_static_tensor_w8a8(weight, input)", _static_tensor_w8a8(w, i),
                "CompressedTensorsW8A8Int8"):
            return Resolved("CompressedTensorsW8A8Int8")
        if test("_is_dynamic_token_w8a8(weight, input)", _dynamic_token_w8a8(w, i),
                "CompressedTensorsW8A8Int8"):
            return Resolved("CompressedTensorsW8A8Int8")
    else:
        # vLLM reads input_quant.num_bits here and would crash on None; a weight-only INT layer in
        # an activation format never gets this far in practice (the loader asserts first).
        raise SchemeError("AttributeError", "'NoneType' object has no attribute 'num_bits'")
    if test("_is_dynamic_token_w4a8_int(weight, input)", _dynamic_token_w4a8_int(w, i),
            "CompressedTensorsW4A8Int"):
        return Resolved("CompressedTensorsW4A8Int", _build_w4a8_int)
    raise _not_found(s)


# --------------------------------------------------------------------------- create_weights


def _verify_groups(k_part: int, group: int, layer_name: str | None) -> None:
    """`verify_group_size_divides_partition` (vllm/distributed/utils.py)."""
    if k_part % group == 0:
        return
    where = f" for layer '{layer_name}'" if layer_name else ""
    raise SchemeError("ValueError", (
        f"Weight input_size_per_partition={k_part}{where} is not divisible by group_size={group}. "
        "This happens when tensor_parallel_size splits the layer input into shards that are not "
        "a whole number of quant groups. Consider reducing tensor_parallel_size."))


def _verified(t: Trace, k_part: int, group: int, layer_name: str | None) -> Trace:
    """`t` once create_weights has verified whole groups, or stopped with vLLM's error."""
    try:
        _verify_groups(k_part, group, layer_name)
    except SchemeError as exc:
        return t.failed(exc.error_type, exc.message)
    return t


def _mp_config(s: SchemeInput, weight_type: str, act, group: int, zp: bool, out=None) -> MPConfig:
    return MPConfig(full_weight_shape=(s.in_features, s.out_features),
                    partition_weight_shape=(s.input_size_per_partition, s.output_size_per_partition),
                    weight_type=ST[weight_type], act_type=act, group_size=group, zero_points=zp,
                    out_type=out)


def _group(a: QuantArgs) -> int:
    return -1 if a.group_size is None else a.group_size


def _row_parallel(s: SchemeInput) -> bool:
    return s.in_features != s.input_size_per_partition


def _build_w4a8_int(R, s: SchemeInput, p: Platform, env: Env, t: Trace) -> Trace:
    """schemes/compressed_tensors_w4a8_int.py: effective group, verify, then select."""
    group = _group(s.weights)
    if group == -1:
        group = s.input_size_per_partition if _row_parallel(s) else s.in_features
    _verify_groups(s.input_size_per_partition, group, None)
    t = R.choose_mp_linear_kernel(_mp_config(s, "int4", dtype(s.params_dtype), group, False), p,
                                  env, t)
    return t.noted(f"Using {t.selected} for CompressedTensorsW4A8Int") if t.ok else t


def _build_w4a8_fp8(R, s: SchemeInput, p: Platform, env: Env, t: Trace) -> Trace:
    """schemes/compressed_tensors_w4a8_fp8.py: select, then verify (the group is 128)."""
    group = _group(s.weights)
    t = R.choose_mp_linear_kernel(_mp_config(s, "int4", FP8_E4M3, group, not s.weights.symmetric,
                                             dtype(s.params_dtype)), p, env, t)
    if not t.ok:
        return t
    return _verified(t.noted(f"Using {t.selected} for CompressedTensorsW4A8Fp8"),
                     s.input_size_per_partition, group, None)


def _check_bits(a: QuantArgs, message: str) -> None:
    """The WNA16-family constructors' num_bits checks (`message` may use {bits})."""
    if a.num_bits not in WNA16_TYPES:
        raise SchemeError("ValueError", message.format(bits=a.num_bits))


def _quant_type(a: QuantArgs) -> str:
    """WNA16_SUPPORTED_TYPES_MAP, or its zero-point twin for asymmetric weights."""
    return WNA16_ZP_TYPES[a.num_bits] if not a.symmetric else WNA16_TYPES[a.num_bits]


def _build_wna16(R, s: SchemeInput, p: Platform, env: Env, t: Trace) -> Trace:
    """schemes/compressed_tensors_wNa16.py: select (unless batch-invariant), then verify."""
    w = s.weights
    group = _group(w)
    t = replace(t, mp_config=_mp_config(s, _quant_type(w), dtype(s.params_dtype), group,
                                        not w.symmetric))
    if env.batch_invariant:
        t = t.noted("Using dequantize + batch-invariant matmul for CompressedTensorsWNA16 "
                    "(VLLM_BATCH_INVARIANT=1 skips choose_mp_linear_kernel)")
    else:
        t = _select_wna16(R, s, p, env, t)
        if not t.ok:
            return t
    if group == -1 and _row_parallel(s):
        return t
    return _verified(t, s.input_size_per_partition, group if group != -1 else s.in_features,
                     s.layer_name)


def _select_wna16(R, s: SchemeInput, p: Platform, env: Env, t: Trace) -> Trace:
    """The wNa16 scheme's kernel, and what it computes with the input dtype Marlin is given."""
    t = R.choose_mp_linear_kernel(t.mp_config, p, env, t)
    if not t.ok:
        return t
    t = t.noted(f"Using {t.selected} for CompressedTensorsWNA16")
    try:
        marlin_input = (R.marlin_input_act_type(env, p) if t.selected == "MarlinLinearKernel"
                        else None)
    except (EnvChoiceError, MarlinInputError) as exc:  # env_with_choices validates on first read
        return t.failed("ValueError", str(exc))
    # compressed_tensors_wNa16.py:156-159: the config, already selected with, now carries the
    # input dtype.
    run_with = t.mp_config if marlin_input is None else replace(t.mp_config, act_type=marlin_input)
    return replace(t, runtime_detail=R.kernel_runtime(t.selected, run_with, p, env,
                                                      model_dtype=dtype(s.params_dtype)))


def _build_wnam(short: str) -> Callable:
    """schemes/compressed_tensors_wNa8.py and wNa4.py: select, then assert whole groups."""
    def build(R, s: SchemeInput, p: Platform, env: Env, t: Trace) -> Trace:
        w, i = s.weights, s.input_activations
        group = _group(w)
        t = R.choose_mp_linear_kernel(_mp_config(s, _quant_type(w), dtype(s.params_dtype), group,
                                                 not w.symmetric), p, env, t)
        if not t.ok:
            return t
        t = t.noted(f"Using {t.selected} for CompressedTensors{short}")
        # Only Humming reads the `_humming_input_quant_config` the scheme attaches
        # (compressed_tensors_wNa8.py:114-132, 168-170; wNa4.py the same).
        config = InputConfig(i.num_bits, i.type, i.group_size or 0, i.dynamic, i.symmetric)
        t = replace(t, runtime_detail=R.kernel_runtime(t.selected, t.mp_config, p, env,
                                                       input_schema=config,
                                                       model_dtype=dtype(s.params_dtype)))
        g = group if group != -1 else s.in_features
        if not (group == -1 and _row_parallel(s)) and s.input_size_per_partition % g:
            return t.failed("AssertionError", "")
        return t
    return build


def _build_wna8o8(R, s: SchemeInput, p: Platform, env: Env, t: Trace) -> Trace:
    """schemes/compressed_tensors_wNa8o8.py: select, then register weights (verify)."""
    w = s.weights
    group = _group(w)
    t = R.choose_mp_linear_kernel(_mp_config(s, WNA8O8_TYPES[w.num_bits], dtype(s.params_dtype),
                                             group, False), p, env, t)
    if not t.ok or (group == -1 and _row_parallel(s)):
        return t
    return _verified(t, s.input_size_per_partition, group if group != -1 else s.in_features,
                     s.layer_name)


def _constructor_checks(r: Resolved, s: SchemeInput) -> None:
    """Checks the scheme classes run in `__init__`, before the capability gate."""
    w = s.weights
    if r.scheme in ("CompressedTensorsWNA8Int", "CompressedTensorsWNA4Int"):
        short = r.scheme.removeprefix("CompressedTensors")
        _check_bits(w, "Unsupported num_bits = {bits} for " + short + "; supported = "
                    + str(sorted(WNA16_TYPES)))
        # The predicate already required a symmetric, dynamic, token/group input.
    elif r.scheme == "CompressedTensorsWNA16":
        if _group(w) == -1 and w.strategy != "channel":
            raise SchemeError("ValueError", "Pack-quantized format requires group quantization or "
                              "channelwise quantization, but found no group size and strategy is "
                              "not channelwise.")
        _check_bits(w, "Unsupported num_bits = {bits}. Supported num_bits = "
                    + str(list(WNA16_TYPES)))
    elif r.scheme == "CompressedTensorsWNA8O8Int" and w.num_bits not in WNA8O8_TYPES:
        raise SchemeError("ValueError", f"Unsupported num_bits = {w.num_bits} for WNA8O8Int; "
                          f"supported = {sorted(WNA8O8_TYPES)}")
    elif r.scheme == "CompressedTensorsW4A8Fp8":
        if _group(w) != 128 or w.strategy != "group":
            raise SchemeError("ValueError", "W4A8 kernels require group quantization with group size 128")
    elif r.scheme == "CompressedTensorsW4A8Int" and w.num_bits != 4:
        raise SchemeError("ValueError", f"Unsupported num_bits = {w.num_bits}."
                          "Supported num_bits = dict_keys([4])")


@takes_rules
def trace_compressed_tensors(R, s: SchemeInput, p: Platform, env: Env) -> Trace:
    """Resolve the scheme, apply its gate, then run the kernel selection its weights need."""
    t = Trace(level=Level.SCHEME)
    predicates: list[Predicate] = []  # the predicates vLLM tried, up to where it stopped
    try:
        config_gate("compressed-tensors", p, s.params_dtype)
        if s.weights is None:
            return t.gated("no weight quantization: vLLM falls back to UnquantizedLinearMethod")
        resolved = get_scheme_from_parts(s, p, env, predicates)
        _constructor_checks(resolved, s)
        min_cap = MIN_CAPABILITY[resolved.scheme]
        # get_scheme -> _check_scheme_supported(min): no capability (CPU, XPU) always passes.
        if p.capability is not None and p.capability < min_cap:
            raise SchemeError("RuntimeError", (
                "Quantization scheme is not supported for the current GPU. "
                f"Min capability: {min_cap}. Current capability: {p.capability}."))
    except VllmError as exc:
        return replace(t, predicates=predicates).failed(exc.error_type, exc.message)
    t = replace(t, predicates=predicates, scheme=resolved.scheme).gated(
        f"{resolved.scheme}.get_min_capability() = {min_cap}: "
        + ("no device capability, gate skipped" if p.capability is None
           else f"current capability {p.capability} passes"))
    if resolved.build is None:
        return t.noted(f"{resolved.scheme} does not use the mixed-precision kernel list "
                       "(it selects from the scaled-mm / FP8 / NVFP4 / MX lists)")
    t = replace(t, reached=Stage.CREATE_WEIGHTS)
    try:
        return resolved.build(R, s, p, env, t)
    except SchemeError as exc:  # refused before it built anything on the trace
        return t.failed(exc.error_type, exc.message)
