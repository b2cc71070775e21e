"""compressed-tensors (llm-compressor) checkpoints: config groups and layer tensors.

The config is parsed with compressed-tensors' own pydantic models (what vLLM does),
imported lazily because the library pulls transformers. Layers are found from tensor
names (a prefix with `weight_packed` or `weight_scale`), matched to a config group the
way the pinned vLLM matches them (`find_matched_target`: the layer name exactly or by a
`re:` pattern, then the class of the vLLM module it loads into, `workbench.layer.linear_class`,
by substring or `re:`, e.g. "Linear", "RowParallelLinear"), after the `ignore` list.

Tensor layouts read here (compressed-tensors 0.17.0):
- int-quantized / naive-quantized: `weight` int8 [N, K] holding signed int values,
  `weight_scale` [N, K/g] (group), [N, 1] (channel) or [1] (tensor), `weight_zero_point`
  int8 like the scale when asymmetric, `weight_g_idx` int32 [K] with group actorder.
- pack-quantized: `weight_packed` int32 [N, ceil(K * bits / 32)] packed along K with
  value + 2^(bits-1), `weight_shape` [2] = (N, K), `weight_scale`, `weight_zero_point`
  int32 [ceil(N * bits / 32), K/g] packed along N the same way, `weight_g_idx`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from workbench.checkpoints.errors import (
    BadScalesError, GroupSizeError, InvalidConfigError,
    TensorMismatchError, UnknownFormatError, UnsupportedLayerError, shown,
)
from workbench.checkpoints.patterns import check_pattern_count, compile_pattern
from workbench.checkpoints.reader_rules import ReaderRules
from workbench.checkpoints.safetensors_file import TensorInfo, need_tensor, read_small_ints, read_tensor
from workbench.layer import CheckpointFormat, LayerSpec, Provenance, QuantizedLayer, WeightPacking, linear_class
from workbench.quant_args import QuantArgs, QuantArgsError

if TYPE_CHECKING:
    import torch

__all__ = ["CTGroup", "CTConfig", "parse_ct_config", "ct_layer_specs", "load_ct_layer",
           "check_scales", "scale_notes", "READABLE_FORMATS"]

# Formats whose layers the workbench loads (integer weights).
READABLE_FORMATS = ("int-quantized", "naive-quantized", "pack-quantized")
_SCALE_DTYPES = ("F16", "BF16", "F32")


@dataclass(frozen=True)
class CTGroup:
    """One config group, its args validated and filled as compressed-tensors' QuantizationArgs."""

    name: str
    targets: tuple[str, ...]
    weights: QuantArgs | None
    input_activations: QuantArgs | None
    output_activations: QuantArgs | None
    format: str | None


@dataclass(frozen=True)
class CTConfig:
    groups: tuple[CTGroup, ...]
    ignore: tuple[str, ...]
    format: str | None
    notes: tuple[str, ...] = field(default=())

    @cached_property
    def _ignore_split(self) -> tuple[frozenset[str], tuple[str, ...]]:
        """(the exact names, the 're:' patterns) of `ignore`: whether any entry matches does not
        depend on their order, so a list of 10^5 names is one set lookup per layer."""
        return (frozenset(i for i in self.ignore if not i.startswith("re:")),
                tuple(i for i in self.ignore if i.startswith("re:")))

    def ignores(self, layer_name: str) -> bool:
        """`should_ignore_layer`'s any-match over `ignore` (is_equal_or_regex_match each)."""
        exact, patterns = self._ignore_split
        return layer_name in exact or any(_match(layer_name, pat) for pat in patterns)

    @cached_property
    def _targets_split(self) -> tuple[dict[str, tuple[int, CTGroup]], tuple[tuple[int, str, CTGroup], ...]]:
        """`target_map` as (exact name -> (position, group), the 're:' targets with their
        positions), so the first target to match is found without a scan over every name."""
        exact: dict[str, tuple[int, CTGroup]] = {}
        patterns: list[tuple[int, str, CTGroup]] = []
        for i, (target, group) in enumerate(self.target_map().items()):
            if target.startswith("re:"):
                patterns.append((i, target, group))
            else:
                exact[target] = (i, group)
        return exact, tuple(patterns)

    def first_target(self, layer_name: str) -> CTGroup | None:
        """The group of the first target (in target_map order) equal to or matching the name,
        as `_find_first_match` walks them (compressed_tensors/utils.py:115-135)."""
        exact, patterns = self._targets_split
        hit = exact.get(layer_name)
        for i, target, group in patterns:
            if hit is not None and i > hit[0]:
                break
            if _match(layer_name, target):
                return group
        return None if hit is None else hit[1]

    @cached_property
    def _by_class(self) -> dict[str, CTGroup | None]:
        return {}

    def class_target(self, module_class: str) -> CTGroup | None:
        """find_matched_target's last step, which depends on the module's class alone: each
        class is looked up in the targets once, not once per layer."""
        if module_class not in self._by_class:
            self._by_class[module_class] = next(
                (g for t, g in self.target_map().items() if _match(module_class, t, contains=True)), None)
        return self._by_class[module_class]

    def target_map(self) -> dict[str, CTGroup]:
        """target -> group, in config order; a later group's equal target replaces an
        earlier one, as in vLLM's target_scheme_map dict."""
        out: dict[str, CTGroup] = {}
        for g in self.groups:
            for t in g.targets:
                out[t] = g
        return out


def _args(raw: object, where: str) -> QuantArgs | None:
    """QuantizationArgs as compressed-tensors 0.17.0 validates and fills them.

    `workbench.quant_args` models the library's validator, so opening a checkpoint does not
    import compressed-tensors (which imports transformers: seconds on a cold start). Its
    `to_json()` is what `QuantizationArgs.model_validate(raw).model_dump(mode="json")` gives;
    tests/checkpoints/test_quant_args_dump.py holds the two equal.
    """
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidConfigError(f"{where}: expected an object of QuantizationArgs fields, "
                                 f"got {type(raw).__name__}")
    try:
        return QuantArgs.from_json(raw, where)
    except QuantArgsError as exc:
        raise InvalidConfigError(f"{where}: not valid QuantizationArgs: {exc}") from None


def _targets(raw: object, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(t, str) and t for t in raw):
        raise InvalidConfigError(f"{where}: 'targets' must be a non-empty list of strings "
                                 "(layer names, 're:' patterns or module class names)")
    check_pattern_count(sum(t.startswith("re:") for t in raw), f"{where}.targets")
    for t in raw:
        if t.startswith("re:"):
            compile_pattern(t[3:], f"{where}.targets")
    return tuple(raw)


def _format(raw: object, where: str, formats: tuple[str, ...]) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or raw not in formats:
        raise UnknownFormatError(f"{where}: format {shown(raw)} is not a compressed-tensors 0.17.0 "
                                 f"format; accepted: {', '.join(formats)}")
    return raw


_ARG_FIELDS = ("weights", "input_activations", "output_activations")


def parse_ct_config(qc: dict, where: str, rules: ReaderRules) -> CTConfig:
    """Parse a compressed-tensors quantization_config dict against `rules`' formats."""
    notes: list[str] = []
    groups_raw = qc.get("config_groups")
    if not isinstance(groups_raw, dict) or not groups_raw:
        raise InvalidConfigError(f"{where}.config_groups: must be a non-empty object of "
                                 "config groups")
    global_format = _format(qc.get("format"), f"{where}.format", rules.ct_formats)
    ignore = _ignore(qc.get("ignore"), f"{where}.ignore")
    groups: list[CTGroup] = []
    for gname, graw in groups_raw.items():
        gwhere = f"{where}.config_groups.{gname}"
        targets, fields, fmt = _group(gname, graw, gwhere, rules, notes)
        groups.append(CTGroup(gname, targets, *(_args(fields.get(k), f"{gwhere}.{k}") for k in _ARG_FIELDS), fmt))
    if qc.get("sparsity_config"):
        notes.append(f"sparsity_config is set: {rules.vllm} refuses it (sparsity support was removed)")
    notes.extend(_online_transforms(qc.get("transform_config"), rules))
    return CTConfig(tuple(groups), ignore, global_format, tuple(notes))


def _online_transforms(config: object, rules: ReaderRules) -> list[str]:
    """A note when `transform_config` rotates activations at run time: vLLM then wraps each
    matching layer's method in CompressedTensorsLinearTransformMethod (compressed_tensors.py:
    165-182, transform/linear.py:31-57), a Hadamard transform per call beside the kernel the
    listing names; offline (weight_input / weight_output) transforms are already in the weights."""
    groups = config.get("config_groups") if isinstance(config, dict) else None
    online = sorted({
        f"{name}: {args.get('location')}"
        for name, group in (groups.items() if isinstance(groups, dict) else ())
        for args in (group.get("apply") or [] if isinstance(group, dict) else [])
        if isinstance(args, dict) and args.get("location") in ("input", "output")})
    if not online:
        return []
    return [f"transform_config applies online transforms ({', '.join(online)}): {rules.vllm} runs the "
            "layers they target through CompressedTensorsLinearTransformMethod, a Hadamard rotation "
            "around the kernel listed here, which the workbench does not model or time"]


def _group(gname: str, graw: object, where: str, rules: ReaderRules,
           notes: list[str]) -> tuple[tuple[str, ...], dict, str | None]:
    """A config group's targets, its QuantizationArgs fields (still raw) and its format."""
    if isinstance(graw, list):
        # The preset form {"W4A8": ["Linear"]}: compressed-tensors expands it.
        from compressed_tensors.quantization import is_preset_scheme, preset_name_to_scheme

        if not is_preset_scheme(gname):
            raise InvalidConfigError(f"{where}: a list of targets needs the group to be named "
                                     "after a compressed-tensors preset (e.g. W4A8, W4A16)")
        targets = _targets(graw, where)
        # The library's own model, read field by field (its dump is its JSON form).
        dump = preset_name_to_scheme(gname, list(targets)).model_dump(mode="json")
        notes.append(f"config group {gname!r} is a preset reference; {rules.vllm} reads each "
                     "group's 'targets' and 'weights' directly and does not expand presets")
        return targets, dump, dump.get("format")
    if not isinstance(graw, dict):
        raise InvalidConfigError(f"{where}: expected an object (targets, weights, ...) or a "
                                 f"preset's target list, got {type(graw).__name__}")
    return (_targets(graw.get("targets"), where), graw,
            _format(graw.get("format"), f"{where}.format", rules.ct_formats))


def _ignore(raw: object, where: str) -> tuple[str, ...]:
    ignore = raw or []
    if not isinstance(ignore, list) or not all(isinstance(i, str) for i in ignore):
        raise InvalidConfigError(f"{where}: must be a list of layer names or 're:' patterns")
    check_pattern_count(sum(pat.startswith("re:") for pat in ignore), where)
    for pat in ignore:
        if pat.startswith("re:"):
            compile_pattern(pat[3:], where)
    return tuple(ignore)


def _match(value: str, target: str, contains: bool = False) -> bool:
    # vLLM's is_equal_or_regex_match (utils/config_utils.py:432-452): 're:' is re.match,
    # else equality (or substring, case-insensitive, for class names).
    if target.startswith("re:"):
        return compile_pattern(target[3:]).match(value)
    if contains:
        return target.lower() in value.lower()
    return target == value


def match_group(cfg: CTConfig, layer_name: str) -> CTGroup | None:
    """The group vLLM would pick for a layer, or None when ignored or unmatched."""
    if cfg.ignores(layer_name):
        return None
    group = cfg.first_target(layer_name)
    if group is not None:
        return group
    # find_matched_target's last step (compressed_tensors/utils.py:101-104): the module's class.
    return cfg.class_target(linear_class(layer_name))


# Tensors only a quantized layer holds; any one of them makes its prefix a quantized layer,
# so a layer that lost its `weight_scale` (or `weight_packed`) is reported missing that
# tensor instead of vanishing from the listing.
_QUANT_SUFFIXES = (".weight_packed", ".weight_scale", ".weight_shape", ".weight_zero_point",
                   ".weight_g_idx")
# An int-quantized / naive-quantized `weight` is stored as int8 (fp8 for float formats);
# a 16-bit `weight` is an unquantized module (norm, embedding, ignored linear).
_QUANT_WEIGHT_DTYPES = ("I8", "U8", "I32", "F8_E4M3", "F8_E5M2")


def quantized_prefixes(tensors: dict[str, TensorInfo]) -> list[str]:
    """Layer names that hold compressed-tensors quantized weights, in tensor order."""
    seen: dict[str, None] = {}
    for name, info in tensors.items():
        for suffix in _QUANT_SUFFIXES:
            if name.endswith(suffix):
                seen[name[: -len(suffix)]] = None
        if name.endswith(".weight") and info.dtype in _QUANT_WEIGHT_DTYPES:
            seen[name[: -len(".weight")]] = None
    return list(seen)


def _shape_error(info: TensorInfo, want: str, layer: str) -> TensorMismatchError:
    return TensorMismatchError(f"layer {layer}: {info.name} is {info.dtype} {list(info.shape)} "
                               f"in {info.file.name}; expected {want}")


def _layer_geometry(tensors: dict[str, TensorInfo], prefix: str, group: CTGroup,
                    fmt: str) -> tuple[int, int, int, dict[str, str]]:
    """(N, K, group_size, tensor role -> name), from headers and `weight_shape` only."""
    w = group.weights
    bits = w.num_bits
    names: dict[str, str] = {}
    if fmt == "pack-quantized":
        packed = need_tensor(tensors, f"{prefix}.weight_packed", prefix, "pack-quantized layout")
        shape_t = need_tensor(tensors, f"{prefix}.weight_shape", prefix, "pack-quantized layout")
        if packed.dtype != "I32" or len(packed.shape) != 2:
            raise _shape_error(packed, "I32 [N, ceil(K * bits / 32)]", prefix)
        if shape_t.dtype not in ("I64", "I32") or shape_t.shape != (2,):
            raise _shape_error(shape_t, "I64 [2] holding (N, K)", prefix)
        n, k = read_small_ints(shape_t)
        if n != packed.shape[0] or k <= 0 or -(-k * bits // 32) != packed.shape[1]:
            raise TensorMismatchError(
                f"layer {prefix}: weight_shape says (N, K) = ({n}, {k}) but weight_packed is "
                f"{list(packed.shape)}; {bits}-bit packing needs [{n}, ceil({k} * {bits} / 32)]")
        names.update(weight=packed.name, weight_shape=shape_t.name)
    else:
        weight = need_tensor(tensors, f"{prefix}.weight", prefix, f"{fmt} layout")
        want_dtype = "I8" if w.type == "int" else "F8_E4M3"
        if weight.dtype != want_dtype or len(weight.shape) != 2:
            raise _shape_error(weight, f"{want_dtype} [N, K] ({fmt} {w.type}{bits})", prefix)
        n, k = weight.shape
        names["weight"] = weight.name
    if n <= 0 or k <= 0:
        raise TensorMismatchError(f"layer {prefix}: (N, K) = ({n}, {k}); a layer needs at least "
                                  "one row and one column")
    strategy = w.strategy
    if strategy == "group":
        g = w.group_size
        if not isinstance(g, int) or g <= 0:
            raise InvalidConfigError(f"layer {prefix}: config group {group.name!r} has strategy 'group' "
                                     f"with group_size {shown(g)}; accepted: a positive integer")
        if k % g:
            raise GroupSizeError(f"layer {prefix}: group_size {g} does not divide in_features "
                                 f"K = {k}; accepted: a divisor of K (or strategy 'channel')")
        want_scale = (n, k // g)
    elif strategy == "channel":
        g, want_scale = -1, (n, 1)
    elif strategy == "tensor":
        g, want_scale = -1, (1,)
    else:
        raise UnsupportedLayerError(f"layer {prefix}: weight strategy {shown(strategy)}; the workbench "
                                    "reads 'group', 'channel' and 'tensor'")
    scale = need_tensor(tensors, f"{prefix}.weight_scale", prefix, "every quantized layer has one")
    ok_shapes = ((1,), (), (1, 1)) if strategy == "tensor" else (want_scale,)
    if scale.dtype not in _SCALE_DTYPES or scale.shape not in ok_shapes:
        raise _shape_error(scale, f"float {list(want_scale)} for strategy {strategy!r}"
                           + (f" and group_size {g}" if strategy == "group" else ""), prefix)
    names["scales"] = scale.name
    if not w.symmetric:
        zp = need_tensor(tensors, f"{prefix}.weight_zero_point", prefix, "asymmetric weights")
        if fmt == "pack-quantized":
            want = ("I32", (-(-n * bits // 32), want_scale[-1]))
        else:
            want = ("I8", tuple(scale.shape))
        if (zp.dtype, zp.shape) != want:
            raise _shape_error(zp, f"{want[0]} {list(want[1])}", prefix)
        names["zeros"] = zp.name
    gidx = tensors.get(f"{prefix}.weight_g_idx")
    if w.actorder == "group":
        # compressed-tensors writes weight_g_idx for group activation ordering
        # (PackedQuantizationCompressor.compression_param_names).
        gidx = need_tensor(tensors, f"{prefix}.weight_g_idx", prefix, "weights.actorder 'group'")
    if gidx is not None:
        if gidx.dtype not in ("I32", "I64") or gidx.shape != (k,):
            raise _shape_error(gidx, f"I32 [{k}]", prefix)
        names["g_idx"] = gidx.name
    bias = tensors.get(f"{prefix}.bias")  # left unquantized by the compressors, added after the GEMM
    if bias is not None:
        if bias.dtype not in _SCALE_DTYPES or bias.shape != (n,):
            raise _shape_error(bias, f"float ({', '.join(_SCALE_DTYPES)}) [N] = [{n}]", prefix)
        names["bias"] = bias.name
    return n, k, g, names


def ct_layer_specs(cfg: CTConfig, tensors: dict[str, TensorInfo], *, params_dtype: str,
                   source: str, rules: ReaderRules) -> list[LayerSpec]:
    """Every quantized layer of a compressed-tensors checkpoint, from headers only."""
    specs: list[LayerSpec] = []
    for prefix in quantized_prefixes(tensors):
        group = match_group(cfg, prefix)
        if group is None or group.weights is None:
            continue  # ignored, unmatched or activation-only: not a quantized weight
        fmt = group.format or cfg.format
        if fmt is None or fmt == "mixed-precision":
            raise InvalidConfigError(
                f"layer {prefix}: config group {group.name!r} has no 'format' and the global "
                f"format is {cfg.format!r}; a mixed-precision checkpoint names a format per group")
        w = group.weights
        bits = w.num_bits
        if w.type == "int" and not 1 <= bits <= 8:
            raise InvalidConfigError(f"config group {group.name!r}: weights.num_bits {bits!r}; "
                                     "accepted for int weights: 1..8")
        notes = list(cfg.notes)
        if w.actorder in ("group", "dynamic"):
            notes.append(f"weights.actorder = {w.actorder!r}: {rules.vllm} raises ValueError "
                         "(group/dynamic activation ordering is no longer supported)")
        main = tensors.get(f"{prefix}.weight_packed") or tensors.get(f"{prefix}.weight")
        reason = None
        if main is not None and len(main.shape) != 2:
            # e.g. fused MoE experts [E, N, K]: listed so the listing stays whole, not loaded.
            reason = (f"{main.name} is {len(main.shape)}-D {list(main.shape)}; the workbench loads "
                      "2-D Linear weights")
        elif fmt not in READABLE_FORMATS or w.type != "int":
            reason = (f"format {fmt!r} with {w.type} weights; the workbench loads integer weights "
                      f"in {', '.join(READABLE_FORMATS)}")
        if reason is None:
            n, k, g, names = _layer_geometry(tensors, prefix, group, fmt)
        else:
            for role in _LISTED_ROLES.get(fmt, ()):
                need_tensor(tensors, f"{prefix}.{role}", prefix, f"{fmt} layout")
            n, k, g, names = _header_geometry_loose(tensors, prefix)
            notes.append(f"listed, not loadable: {reason}")
        scale = tensors.get(f"{prefix}.weight_scale")
        files = sorted({tensors[t].file.name for t in names.values() if t in tensors})
        specs.append(LayerSpec(
            name=prefix, in_features=k, out_features=n, num_bits=w.num_bits, group_size=g,
            symmetric=w.symmetric, format=CheckpointFormat.COMPRESSED_TENSORS,
            weight_args=w, input_args=group.input_activations,
            output_args=group.output_activations, ct_format=fmt, params_dtype=params_dtype,
            scale_dtype=_DTYPE_NAME.get(scale.dtype, scale.dtype) if scale else "none",
            has_g_idx="g_idx" in names, quant_config={"config_group": group.name,
                                                      "unreadable": reason},
            provenance=Provenance(source, tuple(files), names), notes=tuple(notes),
        ))
    return specs


# What a layer listed but not loaded must still hold (compressed-tensors 0.17.0 compressors).
_LISTED_ROLES = {f: ("weight_packed", "weight_scale") for f in
                 ("pack-quantized", "nvfp4-pack-quantized", "mxfp4-pack-quantized")}
_LISTED_ROLES.update({f: ("weight", "weight_scale") for f in
                      ("int-quantized", "naive-quantized", "float-quantized", "mxfp8-quantized")})

_DTYPE_NAME = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F8_E4M3": "float8_e4m3fn",
               "F8_E8M0": "float8_e8m0fnu", "U8": "uint8"}


def _header_geometry_loose(tensors: dict[str, TensorInfo], prefix: str) -> tuple[int, int, int, dict[str, str]]:
    """Best-effort (N, K) of a layer in a format the workbench lists but does not load."""
    names = {role: f"{prefix}.{t}" for role, t in (("weight", "weight_packed"), ("weight", "weight"),
                                                     ("scales", "weight_scale")) if f"{prefix}.{t}" in tensors}
    info = tensors.get(names.get("weight", ""))
    if info is None or len(info.shape) < 2:
        return 0, 0, -1, names
    n, k = info.shape[-2], info.shape[-1]
    if info.name.endswith(".weight_packed") and info.dtype == "I32":
        k *= 8  # int32 words of 4-bit values (a guess for other widths; the layer is not loaded)
    return n, k, -1, names


def check_scales(scales: torch.Tensor, tensor_name: str, layer: str) -> None:
    """NaN, Inf or zero scales make a layer garbage: refuse, naming the first bad entry."""
    import torch

    bad = ~torch.isfinite(scales) | (scales == 0)
    if bool(bad.any()):
        count = int(bad.sum())
        first = tuple(int(i) for i in bad.nonzero()[0].tolist())
        value = float(scales[first])
        raise BadScalesError(
            f"layer {layer}: {tensor_name} holds {count} NaN, Inf or zero value(s), first "
            f"{value} at index {list(first)}; scales must be finite and non-zero")


def _check_range(t: torch.Tensor, lo: int, hi: int, what: str, layer: str,
                 allows: str = "its num_bits allows") -> None:
    if t.numel() and (int(t.min()) < lo or int(t.max()) > hi):
        raise TensorMismatchError(f"layer {layer}: {what} holds values in [{int(t.min())}, "
                                  f"{int(t.max())}], outside the {hi - lo + 1}-level range [{lo}, {hi}] "
                                  f"{allows}")


def scale_notes(scales: torch.Tensor, tensor_name: str) -> tuple[str, ...]:
    """A note when scales are negative: legal (vLLM multiplies by them as stored), but no
    quantization tool writes them, so the user should know the weights come out sign-flipped."""
    neg = scales < 0
    if not bool(neg.any()):
        return ()
    first = [int(i) for i in neg.nonzero()[0].tolist()]
    return (f"{tensor_name} holds {int(neg.sum())} negative value(s), first at {first}: used as "
            "stored (they flip the sign of those dequantized weights); quantization tools write "
            "positive scales",)


def load_ct_layer(spec: LayerSpec, tensors: dict[str, TensorInfo]) -> QuantizedLayer:
    """Read one compressed-tensors layer's tensors (only those bytes) into a QuantizedLayer."""
    import torch

    from w4a8_kernels import packing

    if spec.quant_config.get("unreadable"):
        raise UnsupportedLayerError(f"layer {spec.name}: listed but not loaded: "
                                    f"{spec.quant_config['unreadable']}")
    names = spec.provenance.tensors
    bits, n = spec.num_bits, spec.out_features
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    scales = read_tensor(tensors[names["scales"]])
    check_scales(scales, names["scales"], spec.name)
    scales = scales.reshape(-1, 1).expand(n, 1).contiguous() if scales.numel() == 1 else scales
    zeros = None
    if "zeros" in names and bits != 4:
        raise UnsupportedLayerError(f"layer {spec.name}: asymmetric {bits}-bit weights; the "
                                    "workbench loads asymmetric layers of 4 bits only")
    if "zeros" in names:
        zp = read_tensor(tensors[names["zeros"]])
        if spec.ct_format == "pack-quantized":
            if bits != 4:
                raise UnsupportedLayerError(f"layer {spec.name}: {bits}-bit packed zero points; "
                                            "the workbench unpacks 4-bit pack-quantized layers")
            # Packed along N: its transpose is the weight layout of a [G, N] tensor.
            zp = packing.unpack_int4_ct(zp.t().contiguous(), n).t().contiguous()
        _check_range(zp, lo, hi, names["zeros"], spec.name)
        zeros = (zp.to(torch.int16) - lo).to(torch.int8)  # signed -> unsigned convention
    g_idx = read_tensor(tensors[names["g_idx"]]).to(torch.int32) if "g_idx" in names else None
    if g_idx is not None:
        _check_range(g_idx, 0, spec.n_groups - 1, names["g_idx"], spec.name,
                     f"of group indices for K / group_size = {spec.n_groups} groups")
    if spec.ct_format == "pack-quantized":
        if bits != 4:
            raise UnsupportedLayerError(f"layer {spec.name}: {bits}-bit pack-quantized weights; "
                                        "the workbench unpacks 4-bit layers")
        qweight, pack = read_tensor(tensors[names["weight"]]), WeightPacking.COMPRESSED_TENSORS
    else:
        qweight, pack = read_tensor(tensors[names["weight"]]), WeightPacking.INT8
        _check_range(qweight, lo, hi, names["weight"], spec.name)
        if zeros is not None:
            qweight = (qweight.to(torch.int16) - lo).to(torch.int8)
    bias = read_tensor(tensors[names["bias"]]) if "bias" in names else None
    if bias is not None and not bool(torch.isfinite(bias).all()):
        first = int((~torch.isfinite(bias)).nonzero()[0])
        raise TensorMismatchError(f"layer {spec.name}: {names['bias']} holds {float(bias[first])} "
                                  f"at index {first}; a bias must be finite")
    fields = {f: getattr(spec, f) for f in spec.__dataclass_fields__}
    fields["notes"] = spec.notes + scale_notes(scales, names["scales"])
    return QuantizedLayer(**fields, qweight=qweight, packing=pack, scales=scales, zeros=zeros,
                          g_idx=g_idx, bias=bias)
