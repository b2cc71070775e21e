"""compressed-tensors' `QuantizationArgs`, as version 0.17.0 (the one the rule set's vLLM release
pins) validates, fills and prints it.

vLLM parses each config group's `weights` / `input_activations` / `output_activations` with
`QuantizationArgs.model_validate` and embeds the model's repr in its NotImplementedError, so
the defaults it fills (strategy from group size, observer, zp_dtype) and the repr's field order
matter byte for byte. Modelled on `compressed_tensors/quantization/quant_args.py`; the library
itself is not imported (it pulls transformers and takes seconds to import).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.errors import InvalidInputError

TYPES = ("int", "float")
STRATEGIES = ("tensor", "channel", "group", "block", "token", "tensor_group", "attn_head")
ACTORDERS = {"group": "group", "weight": "weight", "dynamic": "group", "static": "weight"}
_FIELDS = ("num_bits", "type", "symmetric", "group_size", "strategy", "block_structure",
           "dynamic", "actorder", "scale_dtype", "zp_dtype", "observer", "observer_kwargs")


class QuantArgsError(InvalidInputError):
    """QuantizationArgs that compressed-tensors' validator refuses."""


class QuantArgsNotImplemented(QuantArgsError):
    """compressed-tensors raises NotImplementedError itself (float zp_dtype for odd bit widths);
    pydantic lets it through unwrapped, so vLLM reports it as that exception."""


@dataclass
class QuantArgs:
    num_bits: int = 8
    type: str = "int"
    symmetric: bool = True
    group_size: int | None = None
    strategy: str | None = None
    block_structure: list[int] | None = None
    dynamic: bool | str = False  # True, False or "local"
    actorder: str | None = None  # lowercased as written: group, weight, dynamic or static
    strategy_inferred: bool = False  # filled by the validator: prints as the enum member
    scale_dtype: str | None = None  # torch dtype name without "torch."
    zp_dtype: str | None = None
    observer: str | None = None
    observer_kwargs: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        parts = []
        for name in _FIELDS:
            value = getattr(self, name)
            if name in ("scale_dtype", "zp_dtype"):
                text = "None" if value is None else f"torch.{value}"
            elif name == "strategy" and self.strategy_inferred:
                # The model validator writes back an enum member, which use_enum_values leaves be.
                text = f"<QuantizationStrategy.{value.upper()}: {value!r}>"
            else:
                text = repr(value)
            parts.append(f"{name}={text}")
        return f"QuantizationArgs({', '.join(parts)})"

    def to_json(self) -> dict:
        return {name: getattr(self, name) for name in _FIELDS}

def _dtype_name(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise QuantArgsError(f"{where}: expected a torch dtype name, got {value!r}")
    return value.removeprefix("torch.")


def parse_quant_args(data: Any, where: str) -> QuantArgs:
    """`QuantizationArgs.model_validate(data)`: field validators, then the model validator."""
    if isinstance(data, QuantArgs):
        return data
    if not isinstance(data, dict):
        raise QuantArgsError(f"{where}: expected an object of QuantizationArgs fields, got {data!r}")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:  # model_config = ConfigDict(extra="forbid")
        raise QuantArgsError(f"{where}: unknown field(s) {unknown}; accepted: {list(_FIELDS)}")
    a = QuantArgs()
    num_bits = data.get("num_bits", 8)
    if isinstance(num_bits, bool) or not isinstance(num_bits, int):
        raise QuantArgsError(f"{where}.num_bits: expected an integer, got {num_bits!r}")
    a.num_bits = num_bits
    qtype = data.get("type", "int")
    if not isinstance(qtype, str) or qtype.lower() not in TYPES:
        raise QuantArgsError(f"{where}.type: {qtype!r} is not a quantization type; accepted: {TYPES}")
    a.type = qtype.lower()
    sym = data.get("symmetric", True)
    if not isinstance(sym, bool):
        raise QuantArgsError(f"{where}.symmetric: expected true or false, got {sym!r}")
    a.symmetric = sym
    group = data.get("group_size")
    if group is not None:
        if isinstance(group, bool) or not isinstance(group, int):
            raise QuantArgsError(f"{where}.group_size: expected an integer or null, got {group!r}")
        if group < -1:
            raise QuantArgsError(f"{where}.group_size: Invalid group size {group}. Use group_size > 0 "
                                 "for strategy='group' and group_size = -1 for 'channel'")
    a.group_size = group
    strategy = data.get("strategy")
    if strategy is not None:
        if not isinstance(strategy, str) or strategy.lower() not in STRATEGIES:
            raise QuantArgsError(f"{where}.strategy: {strategy!r} is not a strategy; accepted: {STRATEGIES}")
        strategy = strategy.lower()
    block = data.get("block_structure")
    if block is not None:
        if isinstance(block, str):
            try:
                block = [int(x) for x in block.split("x")]
            except ValueError:
                raise QuantArgsError(f"{where}.block_structure: Invalid block_structure '{block}'. "
                                     "Must be a list of ints [rows, cols].") from None
        if not isinstance(block, (list, tuple)) or len(block) != 2 or not all(
                isinstance(v, int) for v in block):
            raise QuantArgsError(f"{where}.block_structure: Invalid block_structure '{block}'. "
                                 "Must be a list of ints [rows, cols].")
        block = list(block)
    a.block_structure = block
    dynamic = data.get("dynamic", False)
    if isinstance(dynamic, str):
        if dynamic.lower() != "local":
            raise QuantArgsError(f"{where}.dynamic: {dynamic!r}; accepted: true, false or 'local'")
        dynamic = "local"
    elif not isinstance(dynamic, bool):
        raise QuantArgsError(f"{where}.dynamic: expected true, false or 'local', got {dynamic!r}")
    a.dynamic = dynamic
    actorder = data.get("actorder")
    if isinstance(actorder, bool):
        actorder = "group" if actorder else None
    elif isinstance(actorder, str):
        if actorder.lower() not in ACTORDERS:
            raise QuantArgsError(f"{where}.actorder: {actorder!r}; accepted: {sorted(ACTORDERS)}")
        actorder = actorder.lower()
    elif actorder is not None:
        raise QuantArgsError(f"{where}.actorder: {actorder!r}; accepted: {sorted(ACTORDERS)}")
    a.actorder = actorder
    a.scale_dtype = _dtype_name(data.get("scale_dtype"), f"{where}.scale_dtype")
    a.zp_dtype = _dtype_name(data.get("zp_dtype"), f"{where}.zp_dtype")
    observer = data.get("observer")
    if observer is not None and not isinstance(observer, str):
        raise QuantArgsError(f"{where}.observer: expected a string or null, got {observer!r}")
    kwargs = data.get("observer_kwargs", {})
    if not isinstance(kwargs, dict):
        raise QuantArgsError(f"{where}.observer_kwargs: expected an object, got {kwargs!r}")
    a.observer_kwargs = dict(kwargs)

    # -- the model validator (validate_model_after) --------------------------------
    if strategy is None:
        if group is None:
            strategy = "tensor"
        elif group > 0:
            strategy = "group"
        elif group == -1:
            strategy = "channel"
        else:
            raise QuantArgsError(f"{where}: Invalid group size {group}. Use group_size > 0 for "
                                 "strategy='group' and group_size = -1 for 'channel'")
    if strategy == "token" and not dynamic:
        raise QuantArgsError(f"{where}: Cannot perform static token quantization, please use "
                             "`dynamic=True`")
    if strategy in ("group", "tensor_group") and (group is None or group <= 0):
        raise QuantArgsError(f"{where}: strategy {strategy} requires group_size to be set to a "
                             "positive value")
    if group is not None and group > 0 and strategy not in ("group", "tensor_group"):
        raise QuantArgsError(f"{where}: group_size requires strategy to be set to 'group'")
    if strategy == "block" and block is None:
        raise QuantArgsError(f"{where}: Block strategy requires block structure")
    if block is not None and strategy != "block":
        raise QuantArgsError(f"{where}: Block structure requires block strategy")
    if ACTORDERS.get(actorder or "") == "group" and strategy not in ("group", "tensor_group"):
        raise QuantArgsError(f"{where}: Must use group or tensor_group quantization strategy in "
                             "order to apply group activation ordering")
    if dynamic:
        if strategy not in ("token", "tensor", "tensor_group", "group"):
            raise QuantArgsError(f"{where}: One of (token, tensor, tensor_group, group) must be "
                                 "used for dynamic quant.")
        if dynamic == "local" and strategy != "tensor_group":
            raise QuantArgsError(f"{where}: local is only supported for strategy tensor_group")
        if observer is not None:
            if dynamic is True:
                observer = None  # "No observer is used for dynamic quant., setting to None"
        elif dynamic == "local":
            observer = "minmax"
    elif observer is None:
        observer = "memoryless_minmax"
    if a.zp_dtype is None:
        if a.num_bits == 4 and a.type == "float":
            a.zp_dtype = "float8_e4m3fn"
        elif a.type == "float":
            if a.num_bits != 8:
                raise QuantArgsNotImplemented("Only num_bits in (8) are supported")
            a.zp_dtype = "float8_e4m3fn"
        else:
            a.zp_dtype = "int8" if a.num_bits <= 8 else "int16" if a.num_bits <= 16 else "int32"
    a.strategy_inferred = data.get("strategy") is None
    a.strategy = strategy
    a.observer = observer
    return a
