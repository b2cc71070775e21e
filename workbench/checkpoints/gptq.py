"""GPTQ, AWQ and AutoRound / INC checkpoints: `qweight`, `qzeros`, `scales`, `g_idx`.

Layouts (4-bit; K = in_features, N = out_features, G = K / group_size):
- GPTQ (AutoGPTQ, GPTQModel, AutoRound `auto_round:auto_gptq`): `qweight` int32 [K/8, N]
  packed along K; `qzeros` int32 [G, N/8] packed along N; `scales` [G, N] (fp16 as the
  tools write it); `g_idx` int32 [K] (group of each input row). The classic format
  (`checkpoint_format: gptq`, and AutoRound's export) stores zero point - 1 in `qzeros`;
  `gptq_v2` stores the zero point itself. The pinned vLLM reads symmetric GPTQ only and then
  ignores `qzeros` (uint4b8: zero point 8), so a symmetric checkpoint whose `qzeros` say
  otherwise is refused rather than loaded as a layer vLLM would compute differently.
- AWQ (AutoAWQ, AutoRound `auto_round:auto_awq`): `qweight` int32 [K, N/8] packed along N
  in nibble order 0,2,4,6,1,3,5,7; `qzeros` the same order, zero points stored as is.

Config fields follow vLLM's readers: AutoGPTQConfig.from_config (bits, group_size,
desc_act, sym required; lm_head, dynamic, checkpoint_format), INCConfig.from_config
(bits, group_size required; sym, data_type, packing_format, backend / vllm_backend,
block_name_to_quantize / to_quant_block_names, extra_config), AWQConfig (w_bit / bits,
q_group_size / group_size, zero_point, modules_to_not_convert).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from workbench.checkpoints.compressed_tensors import _DTYPE_NAME, check_scales, scale_notes
from workbench.checkpoints.errors import (
    GroupSizeError, InvalidConfigError, TensorMismatchError, shown,
    UnknownFormatError, UnsupportedLayerError,
)
from workbench.checkpoints.overrides import REGEX_SPECIAL, dynamic_body, gptq_layer, inc_layer, inc_regex
from workbench.checkpoints.patterns import check_pattern_count, compile_pattern
from workbench.checkpoints.reader_rules import ReaderRules
from workbench.checkpoints.safetensors_file import TensorInfo, need_tensor, read_tensor
from workbench.frozen import freeze
from workbench.layer import CheckpointFormat, LayerSpec, Provenance, QuantizedLayer, WeightPacking, is_lm_head
from workbench.quant_args import QuantArgs

__all__ = ["GPTQFamilyConfig", "parse_gptq_config", "parse_inc_config", "parse_awq_config",
           "gptq_layer_specs", "load_gptq_layer", "lm_head_notes"]

GPTQ_CHECKPOINT_FORMATS = ("gptq", "gptq_v2")
_SCALE_DTYPES = ("F16", "BF16", "F32")


def _inc_layout(packing_format: str) -> WeightPacking | None:
    """The tensors an AutoRound packing format holds, named as vLLM tells them apart
    (INCLayerConfig.is_gptq / is_awq, inc/config_parser.py:27-33: "awq" / "gptq" in the name);
    this also reads a legacy name such as "auto_round:gptq"."""
    return next((p for p in (WeightPacking.AWQ, WeightPacking.GPTQ) if p.value in packing_format), None)


@dataclass(frozen=True)
class GPTQFamilyConfig:
    """The parsed quantization config of a GPTQ, AWQ or INC checkpoint."""

    method: CheckpointFormat
    bits: int
    group_size: int
    sym: bool
    layout: WeightPacking  # GPTQ or AWQ: how the int32 tensors are packed
    zeros_minus_one: bool  # classic GPTQ stores zero point - 1 in qzeros
    fields: dict  # what vLLM's resolution reads, as the config wrote it (normalized)
    extra_config: dict = field(default_factory=dict)
    block_names: tuple[str, ...] = ()
    dynamic: dict = field(default_factory=dict)
    skip_modules: tuple[str, ...] = ()
    lm_head: bool = False  # GPTQ's `lm_head`: the ParallelLMHead is quantized too
    vllm: str = "vLLM"  # the rule set the config was read against, as the notes name it
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("fields", "extra_config", "dynamic"):
            object.__setattr__(self, name, freeze(getattr(self, name)))


def _get(qc: dict, keys: tuple[str, ...], where: str, default: object = ..., types: tuple = ()) -> object:
    for key in keys:
        if key in qc:
            value = qc[key]
            # bool is an int subclass: an int field must not accept true/false.
            ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
            if types and not ok:
                names = " or ".join(t.__name__ for t in types)
                raise InvalidConfigError(f"{where}.{key}: {shown(value)}; expected {names}")
            return value
    if default is ...:
        raise InvalidConfigError(f"{where}: missing required field {' / '.join(repr(k) for k in keys)}")
    return default


def _flag(qc: dict, key: str, where: str, *, truth: bool, gptq: bool = True) -> bool:
    """A GPTQ/AWQ/INC flag as vLLM reads it: `truth` (desc_act: `if desc_act`) by its truth
    value; otherwise (sym, zero_point) 1 and 0 equal True and False, a sym of any other value
    is what vLLM refuses at config (auto_gptq.py:151-155), anything else refused by name."""
    value = _get(qc, (key,), where)
    if truth and not isinstance(value, (str, list, dict)):  # null, 0 and 1 read as vLLM reads them
        return bool(value)
    if truth:  # vLLM takes "false" for true, then refuses desc_act=True: say what was meant
        raise InvalidConfigError(f"{where}.{key}: {shown(value)}; expected bool (vLLM reads any "
                                 "non-empty string or list as true)")
    if isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1)):
        return bool(value)
    if gptq and key == "sym" and not isinstance(value, (list, dict)):
        raise InvalidConfigError(f"{where}: vLLM refuses it at config: ValueError: Unsupported "
                                 f"quantization config: bits={qc.get('bits')}, sym={value}")
    raise InvalidConfigError(f"{where}.{key}: {shown(value)}; expected bool")


def _bits_group(qc: dict, where: str, bit_keys: tuple[str, ...], group_keys: tuple[str, ...]) -> tuple[int, int]:
    bits = _get(qc, bit_keys, where, types=(int,))
    group = _get(qc, group_keys, where, types=(int,))
    if not 1 <= bits <= 8:
        raise InvalidConfigError(f"{where}.{bit_keys[0]}: {bits}; accepted: 1..8")
    if group != -1 and group <= 0:
        raise InvalidConfigError(f"{where}.{group_keys[0]}: {group}; accepted: -1 or a positive integer")
    return bits, group


def parse_gptq_config(qc: dict, where: str, rules: ReaderRules) -> GPTQFamilyConfig:
    bits, group = _bits_group(qc, where, ("bits",), ("group_size",))
    desc_act = _flag(qc, "desc_act", where, truth=True)
    sym = _flag(qc, "sym", where, truth=False)
    fmt = _get(qc, ("checkpoint_format",), where, "gptq", (str,))
    if fmt not in GPTQ_CHECKPOINT_FORMATS:
        raise UnknownFormatError(f"{where}.checkpoint_format: {fmt!r}; accepted: "
                                 f"{', '.join(GPTQ_CHECKPOINT_FORMATS)}")
    if bits not in rules.gptq_bits:  # asymmetric 4/8-bit stays readable
        # AutoGPTQConfig.__init__ (auto_gptq.py:151-155) refuses it before any tensor is read.
        raise InvalidConfigError(f"{where}: {rules.vllm} refuses it at config: ValueError: Unsupported "
                                 f"quantization config: bits={bits}, sym={sym}")
    dynamic = _get(qc, ("dynamic",), where, {}, (dict, type(None))) or {}
    check_pattern_count(len(dynamic), f"{where}.dynamic")
    for pat, over in dynamic.items():
        compile_pattern(dynamic_body(pat), f"{where}.dynamic")
        if not isinstance(over, dict):
            raise InvalidConfigError(f"{where}.dynamic[{shown(pat)}]: {shown(over)}; accepted: an object of "
                                     "overrides (bits, group_size, sym, ...), {} for a '-:' rule")
    lm_head = _get(qc, ("lm_head",), where, False, (bool,))
    blocks = _get(qc, ("modules_in_block_to_quantize",), where, None, (list, type(None))) or []
    blocks = _flatten(blocks)
    if not all(isinstance(b, str) for b in blocks):
        raise InvalidConfigError(f"{where}.modules_in_block_to_quantize: {shown(blocks)}; accepted: "
                                 "a list (of lists) of module name strings")
    fields_ = {"bits": bits, "group_size": group, "sym": sym, "desc_act": desc_act,
               "checkpoint_format": fmt, "lm_head": lm_head, "dynamic": dynamic,
               "autoround_version": qc.get("autoround_version", "")}
    if blocks:
        fields_["modules_in_block_to_quantize"] = blocks
    return GPTQFamilyConfig(CheckpointFormat.GPTQ, bits, group, sym, WeightPacking.GPTQ,
                            fmt == "gptq", fields_, block_names=tuple(blocks), dynamic=dynamic,
                            lm_head=lm_head, vllm=rules.vllm)


def _flatten(items: list) -> list:
    """`flatten_list` (utils/gptq_utils.py:106-117): nested lists of module names, flat."""
    out: list = []
    for item in items:
        out.extend(_flatten(item) if isinstance(item, list) else [item])
    return out


def parse_inc_config(qc: dict, where: str, rules: ReaderRules) -> GPTQFamilyConfig:
    bits, group = _bits_group(qc, where, ("bits",), ("group_size",))
    data_type = _get(qc, ("data_type",), where, "int", (str,))
    data_type = "fp" if data_type == "fp8" else data_type
    sym = qc.get("sym", True)
    sym = _flag(qc, "sym", where, truth=False, gptq=False) if not isinstance(sym, bool) else sym
    packing_format = _get(qc, ("packing_format",), where, rules.inc_default_packing, (str,))
    backend = _get(qc, ("backend", "vllm_backend"), where, "auto", (str,))
    notes: list[str] = []
    formats = rules.inc_packing_formats
    layout = _inc_layout(packing_format)
    if packing_format in formats and packing_format not in rules.inc_int_packing:
        layout = None  # FP8 / MXFP8 tensors
    if packing_format not in formats:
        # An older AutoRound name (e.g. auto_round:gptq): the tensors are still readable,
        # but the pinned vLLM's INCConfig refuses the config.
        if layout is None:
            raise UnknownFormatError(f"{where}.packing_format: {shown(packing_format)}; accepted: "
                                     f"{', '.join(formats)}")
        notes.append(f"packing_format {shown(packing_format)}: {rules.vllm} raises ValueError "
                     f"(accepted: {', '.join(formats)})")
    if backend not in rules.inc_backends:
        notes.append(f"backend {shown(backend)}: {rules.vllm} raises ValueError (accepted: "
                     f"{', '.join(rules.inc_backends)})")
    if bits not in rules.inc_supported_bits:
        notes.append(f"bits {bits}: {rules.vllm} raises ValueError (accepted: {rules.inc_supported_bits})")
    if data_type != "int":
        raise UnknownFormatError(f"{where}.data_type: {shown(data_type)}; the workbench reads INC "
                                 "integer weights ('int') only")
    if layout is None:
        raise UnknownFormatError(f"{where}.packing_format: {shown(packing_format)} holds no integer "
                                 f"GPTQ/AWQ tensors; accepted: {', '.join(rules.inc_int_packing)}")
    blocks = _get(qc, ("block_name_to_quantize", "to_quant_block_names"), where, None, (str, list, type(None)))
    if isinstance(blocks, str):
        blocks = blocks.split(",")
    if blocks is not None and not all(isinstance(b, str) for b in blocks):
        raise InvalidConfigError(f"{where}.block_name_to_quantize: must be a string or a list of strings")
    extra = _get(qc, ("extra_config",), where, None, (dict, type(None))) or {}
    check_pattern_count(sum(isinstance(k, str) and any(c in REGEX_SPECIAL for c in k) for k in extra),
                        f"{where}.extra_config")  # the regex keys; exact layer names cost no matching
    for name, cfg in extra.items():
        inc_regex(name)  # a regex that cannot be run in bounded work is refused here
        if not isinstance(cfg, dict):
            raise InvalidConfigError(f"{where}.extra_config[{name!r}]: must be an object "
                                     "(bits, group_size, sym)")
    fields_ = {"bits": bits, "group_size": group, "sym": sym, "data_type": data_type,
               "packing_format": packing_format, "backend": backend,
               "checkpoint_format": packing_format, "desc_act": False,
               "autoround_version": qc.get("autoround_version", "")}
    if "act_bits" in qc:
        fields_["act_bits"] = _get(qc, ("act_bits",), where, types=(int,))
    # The per-layer rules travel with each layer, so the rule set resolves it as vLLM does
    # (the ParallelLMHead's exact key, say) from the values the listing resolved.
    if extra:
        fields_["extra_config"] = extra
    if blocks:
        fields_["block_name_to_quantize"] = list(blocks)
    return GPTQFamilyConfig(CheckpointFormat.INC, bits, group, sym, layout, layout is WeightPacking.GPTQ,
                            fields_, extra_config=extra, block_names=tuple(blocks or ()),
                            vllm=rules.vllm, notes=tuple(notes))


def parse_awq_config(qc: dict, where: str, rules: ReaderRules) -> GPTQFamilyConfig:
    bits, group = _bits_group(qc, where, ("w_bit", "bits"), ("q_group_size", "group_size"))
    zero_point = _flag(qc, "zero_point", where, truth=False)
    skip = _get(qc, ("modules_to_not_convert",), where, None, (list, type(None))) or []
    if not all(isinstance(m, str) for m in skip):
        raise InvalidConfigError(f"{where}.modules_to_not_convert: {shown(skip)}; accepted: a list of "
                                 "module name strings")
    fields_ = {"bits": bits, "group_size": group, "zero_point": zero_point,
               "sym": not zero_point, "checkpoint_format": "awq",
               "version": qc.get("version", "gemm"), "modules_to_not_convert": skip}
    return GPTQFamilyConfig(CheckpointFormat.AWQ, bits, group, not zero_point, WeightPacking.AWQ, False,
                            fields_, skip_modules=tuple(skip), vllm=rules.vllm)


def _layer_quant(cfg: GPTQFamilyConfig, name: str) -> tuple[int, int, bool] | None:
    """(bits, group_size, sym) of a layer, or None when vLLM leaves it unquantized: the
    policy of `workbench.checkpoints.overrides`, which the rule set applies too."""
    base = (cfg.bits, cfg.group_size, cfg.sym)
    if cfg.method is CheckpointFormat.GPTQ:
        return gptq_layer(name, lm_head=is_lm_head(name), lm_head_quantized=cfg.lm_head,
                          base=base, dynamic=cfg.dynamic, blocks=cfg.block_names)
    if cfg.method is CheckpointFormat.AWQ:
        return None if any(s in name for s in cfg.skip_modules) else base
    bits, group, sym = inc_layer(name, lm_head=is_lm_head(name), base=base,
                                 extra=cfg.extra_config, blocks=cfg.block_names)
    # INCLayerConfig.quantized is `bits < 16` (config_parser.py:73): 16.0 is unquantized too.
    numeric = isinstance(bits, (int, float)) and not isinstance(bits, bool)
    return None if numeric and bits >= 16 else (bits, group, sym)


def _check_override(quant: tuple, layer: str) -> tuple[int, int, bool]:
    """Per-layer values from extra_config / dynamic rules, checked like the base config."""
    bits, group, sym = quant
    if type(bits) is not int or not 1 <= bits <= 8:
        raise InvalidConfigError(f"layer {layer}: per-layer bits {shown(bits)}; accepted: 1..8 (or >= 16 "
                                 "for an unquantized layer)")
    if type(group) is not int or (group != -1 and group <= 0):
        raise InvalidConfigError(f"layer {layer}: per-layer group_size {shown(group)}; accepted: -1 or a "
                                 "positive integer")
    if not isinstance(sym, bool):
        raise InvalidConfigError(f"layer {layer}: per-layer sym {shown(sym)}; accepted: true or false")
    return bits, group, sym


def lm_head_notes(cfg: GPTQFamilyConfig, tensors: dict[str, TensorInfo]) -> tuple[str, ...]:
    """A note for an lm_head that holds quantized tensors the config leaves unquantized: vLLM
    builds it as an unquantized ParallelLMHead and looks for its float `weight` instead."""
    return tuple(
        f"{name.removesuffix('.qweight')} holds {name} but {cfg.vllm} leaves the lm_head "
        "unquantized" + (" (the config's lm_head is false)" if cfg.method is CheckpointFormat.GPTQ
                         and not cfg.lm_head else "") + "; not listed"
        for name in tensors if name.endswith(".qweight")
        and is_lm_head(name.removesuffix(".qweight"))
        and _layer_quant(cfg, name.removesuffix(".qweight")) is None)


def gptq_layer_specs(cfg: GPTQFamilyConfig, tensors: dict[str, TensorInfo], *,
                     params_dtype: str, source: str) -> list[LayerSpec]:
    """Every quantized layer (a prefix with any of `qweight`, `qzeros`, `scales`, `g_idx`),
    from headers only; a layer missing one of its required tensors is a MissingTensorError."""
    specs: list[LayerSpec] = []
    prefixes = dict.fromkeys(t.rsplit(".", 1)[0] for t in tensors
                             if t.endswith((".qweight", ".qzeros", ".scales", ".g_idx")))
    for prefix in prefixes:
        quant = _layer_quant(cfg, prefix)
        if quant is None:
            continue
        bits, group, sym = _check_override(quant, prefix)
        qweight = need_tensor(tensors, f"{prefix}.qweight", prefix, f"{cfg.layout.value} layout")
        scales = need_tensor(tensors, f"{prefix}.scales", prefix, f"{cfg.layout.value} layout")
        qzeros = need_tensor(tensors, f"{prefix}.qzeros", prefix, f"{cfg.layout.value} layout")
        for info in (qweight, qzeros):
            if info.dtype != "I32" or len(info.shape) != 2:
                raise TensorMismatchError(f"layer {prefix}: {info.name} is {info.dtype} "
                                          f"{list(info.shape)}; expected a 2-D I32 tensor")
        if scales.dtype not in _SCALE_DTYPES or len(scales.shape) != 2:
            raise TensorMismatchError(f"layer {prefix}: {scales.name} is {scales.dtype} "
                                      f"{list(scales.shape)}; expected float [G, N]")
        # vLLM's pack factor is 32 // bits (auto_gptq.py:146), whole values per int32 word.
        per_word = 32 // bits
        if cfg.layout is WeightPacking.GPTQ:
            k, n = qweight.shape[0] * per_word, qweight.shape[1]
            layout_text = f"qweight [K / {per_word}, N]"
        else:
            k, n = qweight.shape[0], qweight.shape[1] * per_word
            layout_text = f"qweight [K, N / {per_word}]"
        if k == 0 or n == 0:
            raise TensorMismatchError(f"layer {prefix}: {layout_text} = {list(qweight.shape)} gives "
                                      f"K = {k}, N = {n}; a layer needs at least one row and column")
        g = k if group == -1 else group
        if k % g:
            raise GroupSizeError(f"layer {prefix}: group_size {group} does not divide in_features "
                                 f"K = {k} (from {layout_text} = {list(qweight.shape)}); accepted: "
                                 "a divisor of K, or -1")
        n_groups = k // g
        if scales.shape != (n_groups, n):
            raise TensorMismatchError(
                f"layer {prefix}: scales is {list(scales.shape)} but {layout_text} = "
                f"{list(qweight.shape)} with bits {bits} and group_size {group} needs "
                f"[K / g, N] = [{n_groups}, {n}]")
        if qzeros.shape != (n_groups, n // per_word):
            raise TensorMismatchError(f"layer {prefix}: qzeros is {list(qzeros.shape)}; expected "
                                      f"[K / g, N / {per_word}] = [{n_groups}, {n // per_word}]")
        names = {"weight": qweight.name, "scales": scales.name, "zeros": qzeros.name}
        gidx = tensors.get(f"{prefix}.g_idx")
        if cfg.fields.get("desc_act") and group != -1:
            # Without g_idx the act-order permutation is lost: the layer would be computed
            # in the wrong group order.
            gidx = need_tensor(tensors, f"{prefix}.g_idx", prefix, "desc_act is true")
        if gidx is not None:
            if gidx.dtype not in ("I32", "I64") or gidx.shape != (k,):
                raise TensorMismatchError(f"layer {prefix}: g_idx is {gidx.dtype} {list(gidx.shape)}; "
                                          f"expected I32 [{k}]")
            names["g_idx"] = gidx.name
        bias = tensors.get(f"{prefix}.bias")
        if bias is not None:
            if bias.dtype not in _SCALE_DTYPES or bias.shape != (n,):
                raise TensorMismatchError(f"layer {prefix}: {bias.name} is {bias.dtype} "
                                          f"{list(bias.shape)}; expected float [N] = [{n}]")
            names["bias"] = bias.name
        # The equivalent compressed-tensors args (desc_act is group activation ordering).
        weight_args = QuantArgs(num_bits=bits, type="int", symmetric=sym,
                                strategy="channel" if group == -1 else "group",
                                group_size=None if group == -1 else group, dynamic=False,
                                actorder="group" if cfg.fields.get("desc_act") else None,
                                where=f"layer {prefix}")
        layer_fields = dict(cfg.fields, bits=bits, group_size=group, sym=sym)
        files = sorted({tensors[t].file.name for t in names.values()})
        specs.append(LayerSpec(
            name=prefix, in_features=k, out_features=n, num_bits=bits, group_size=group,
            symmetric=sym, format=cfg.method, weight_args=weight_args, params_dtype=params_dtype,
            scale_dtype=_DTYPE_NAME.get(scales.dtype, scales.dtype), has_g_idx="g_idx" in names,
            quant_config=layer_fields, provenance=Provenance(source, tuple(files), names),
            notes=cfg.notes,
        ))
    return specs


def load_gptq_layer(spec: LayerSpec, cfg: GPTQFamilyConfig,
                    tensors: dict[str, TensorInfo]) -> QuantizedLayer:
    """Read one GPTQ / AWQ / INC layer's tensors into a QuantizedLayer."""
    import torch

    from w4a8_kernels import packing

    if spec.num_bits != 4:
        raise UnsupportedLayerError(f"layer {spec.name}: {spec.num_bits}-bit weights; the "
                                    "workbench unpacks 4-bit GPTQ/AWQ layers")
    names = spec.provenance.tensors
    scales = read_tensor(tensors[names["scales"]])
    check_scales(scales, names["scales"], spec.name)
    scales = scales.t().contiguous()  # [G, N] on disk -> [N, G]
    qzeros = read_tensor(tensors[names["zeros"]])
    if cfg.layout is WeightPacking.GPTQ:
        z = packing.unpack_int4_gptq_zeros(qzeros).to(torch.int16)
        pack = WeightPacking.GPTQ
    else:
        z = packing.unpack_int4_awq_zeros(qzeros).to(torch.int16)
        pack = WeightPacking.AWQ
    if cfg.zeros_minus_one:
        z = z + 1
    if spec.symmetric:
        if bool((z != 8).any()):
            idx = (z != 8).nonzero()[0].tolist()
            raise TensorMismatchError(
                f"layer {spec.name}: config says sym=true but {names['zeros']} holds zero point "
                f"{int(z[idx[0], idx[1]])} at (channel {idx[0]}, group {idx[1]}); symmetric 4-bit "
                "zero points are 8 (stored as 7 in the classic GPTQ format). vLLM ignores qzeros "
                "for symmetric layers and would compute a different layer")
        zeros = None
    else:
        if bool((z > 15).any()):
            raise TensorMismatchError(f"layer {spec.name}: {names['zeros']} decodes to zero point 16 "
                                      "(stored 15 + 1), outside int4 [0, 15]")
        zeros = z.to(torch.int8)
    g_idx = None
    notes = list(spec.notes) + list(scale_notes(scales, names["scales"]))
    if "g_idx" in names:
        g_idx = read_tensor(tensors[names["g_idx"]]).to(torch.int32)
        trivial = torch.arange(spec.in_features, dtype=torch.int32) // spec.effective_group_size
        if torch.equal(g_idx, trivial):
            g_idx = None  # the identity grouping: nothing a kernel must know about
        elif not spec.quant_config.get("desc_act"):
            raise TensorMismatchError(
                f"layer {spec.name}: {names['g_idx']} reorders groups but desc_act is false; "
                f"{cfg.vllm} ignores g_idx and would compute a different layer")
        elif int(g_idx.min()) < 0 or int(g_idx.max()) >= spec.n_groups:
            raise TensorMismatchError(f"layer {spec.name}: {names['g_idx']} holds groups outside "
                                      f"[0, {spec.n_groups - 1}]")
    bias = read_tensor(tensors[names["bias"]]) if "bias" in names else None
    qweight = read_tensor(tensors[names["weight"]])
    fields = {f: getattr(spec, f) for f in spec.__dataclass_fields__}
    fields.update(has_g_idx=g_idx is not None, notes=tuple(notes))
    return QuantizedLayer(**fields, qweight=qweight, packing=pack, scales=scales, zeros=zeros,
                          g_idx=g_idx, bias=bias)
