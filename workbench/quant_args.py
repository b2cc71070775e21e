"""compressed-tensors' `QuantizationArgs`, as version 0.17.0 (the one the rule set's vLLM release
pins) validates, fills and prints it.

vLLM parses each config group's `weights` / `input_activations` / `output_activations` with
`QuantizationArgs.model_validate` and embeds the model's repr in its NotImplementedError, so
the defaults it fills (strategy from group size, observer, zp_dtype) and the repr's field order
matter byte for byte. Modelled on `compressed_tensors/quantization/quant_args.py`; the library
itself is not imported (it pulls transformers and takes seconds to import).

`QuantArgs(...)` is frozen and validated at construction, field validators then the model
validator, as the library's pydantic model is; `QuantArgs.from_json` adds the spellings JSON
may use (upper case, "RxC" block strings, boolean actorder, "torch."-prefixed dtypes). The
checkpoint readers and the dispatch core share this one value; it imports neither.
"""
from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from functools import lru_cache
from typing import Any

from workbench.errors import InvalidInputError
from workbench.frozen import FrozenDict

__all__ = ["QuantArgs", "QuantArgsError", "QuantArgsNotImplemented", "TYPES", "STRATEGIES",
           "ACTORDERS", "FIELDS", "TORCH_DTYPES"]

TYPES = ("int", "float")
STRATEGIES = ("tensor", "channel", "group", "block", "token", "tensor_group", "attn_head")
ACTORDERS = {"group": "group", "weight": "weight", "dynamic": "group", "static": "weight"}
FIELDS = ("num_bits", "type", "symmetric", "group_size", "strategy", "block_structure",
          "dynamic", "actorder", "scale_dtype", "zp_dtype", "observer", "observer_kwargs")


# torch's dtype attributes (what `TorchDtype` accepts, `getattr(torch, name)`) and the name the
# dtype prints as; held as data because reading a config must not import torch.
_CANONICAL = {"bit": "uint1", "float": "float32", "double": "float64", "half": "float16", "short": "int16",
              "int": "int32", "long": "int64", "cfloat": "complex64", "cdouble": "complex128",
              "chalf": "complex32"}
TORCH_DTYPES = {name: _CANONICAL.get(name, name) for name in (
    "bfloat16", "bit", "bits16", "bits1x8", "bits2x4", "bits4x2", "bits8", "bool", "cdouble",
    "cfloat", "chalf", "complex128", "complex32", "complex64", "double", "float", "float16",
    "float32", "float4_e2m1fn_x2", "float64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
    "float8_e5m2fnuz", "float8_e8m0fnu", "half", "int", "int1", "int16", "int2", "int3", "int32",
    "int4", "int5", "int6", "int64", "int7", "int8", "long", "qint32", "qint8", "quint2x4",
    "quint4x2", "quint8", "short", "uint1", "uint16", "uint2", "uint3", "uint32", "uint4", "uint5",
    "uint6", "uint64", "uint7", "uint8")}


@lru_cache(maxsize=None)
def _validator(kind: str):
    from pydantic_core import SchemaValidator, core_schema

    return SchemaValidator(core_schema.int_schema() if kind == "int" else core_schema.bool_schema())


def _lax(value: Any, kind: str) -> Any:
    """pydantic's lax coercion of a JSON value to an int or bool field, which the library's
    model applies ("4", 4.0 and true are num_bits 4, 4 and 1; "yes", 1 and "off" are booleans);
    pydantic-core itself decides, so the spellings are exactly its own. A value it refuses
    is returned unchanged for the field check to name."""
    if value is None or (kind == "int" and _is_int(value)) or (kind == "bool" and isinstance(value, bool)):
        return value
    from pydantic_core import ValidationError

    try:
        return _validator(kind).validate_python(value)
    except ValidationError:
        return value


class QuantArgsError(InvalidInputError):
    """QuantizationArgs that compressed-tensors' validator refuses."""


class QuantArgsNotImplemented(QuantArgsError):
    """compressed-tensors raises NotImplementedError itself (float zp_dtype for odd bit widths);
    pydantic lets it through unwrapped, so vLLM reports it as that exception."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class QuantArgs:
    """One QuantizationArgs, validated and filled; `where` names it in errors (not stored)."""

    num_bits: int = 8
    type: str = "int"
    symmetric: bool = True
    group_size: int | None = None
    strategy: str | None = None  # None: the model validator infers it from group_size
    block_structure: tuple[int, int] | None = None
    dynamic: bool | str = False  # True, False or "local"
    actorder: str | None = None  # lowercased as written: group, weight, dynamic or static
    strategy_inferred: bool = False  # set when strategy was inferred: prints as the enum member
    scale_dtype: str | None = None  # torch dtype name without "torch."
    zp_dtype: str | None = None
    observer: str | None = None
    observer_kwargs: FrozenDict = field(default_factory=FrozenDict)
    where: InitVar[str] = "QuantizationArgs"

    def __post_init__(self, where: str) -> None:
        self._check_fields(where)
        self._fill(where)

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # frozen: only construction fills defaults

    def _check_fields(self, where: str) -> None:
        """compressed-tensors' field validators (types, accepted values)."""
        def bad(name: str, text: str) -> QuantArgsError:
            return QuantArgsError(f"{where}.{name}: {text}")

        if not _is_int(self.num_bits):
            raise bad("num_bits", f"expected an integer, got {self.num_bits!r}")
        if self.type not in TYPES:
            raise bad("type", f"{self.type!r} is not a quantization type; accepted: {TYPES}")
        if not isinstance(self.symmetric, bool):
            raise bad("symmetric", f"expected true or false, got {self.symmetric!r}")
        group = self.group_size
        if group is not None:
            if not _is_int(group):
                raise bad("group_size", f"expected an integer or null, got {group!r}")
            if group < -1:
                raise bad("group_size", f"Invalid group size {group}. Use group_size > 0 for "
                          "strategy='group' and group_size = -1 for 'channel'")
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise bad("strategy", f"{self.strategy!r} is not a strategy; accepted: {STRATEGIES}")
        block = self.block_structure
        if block is not None:
            if not isinstance(block, (list, tuple)) or len(block) != 2 or not all(
                    isinstance(v, int) for v in block):
                raise bad("block_structure", f"Invalid block_structure '{block}'. Must be a list "
                          "of ints [rows, cols].")
            self._set("block_structure", tuple(block))
        if isinstance(self.dynamic, str):
            if self.dynamic != "local":
                raise bad("dynamic", f"{self.dynamic!r}; accepted: true, false or 'local'")
        elif not isinstance(self.dynamic, bool):
            raise bad("dynamic", f"expected true, false or 'local', got {self.dynamic!r}")
        if self.actorder is not None and (not isinstance(self.actorder, str)
                                          or self.actorder not in ACTORDERS):
            raise bad("actorder", f"{self.actorder!r}; accepted: {sorted(ACTORDERS)}")
        for name in ("scale_dtype", "zp_dtype"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or value not in TORCH_DTYPES):
                raise bad(name, f"No such torch dtype `torch.{value}`; accepted: a torch dtype "
                          "name such as float16, bfloat16, float32")
            if value is not None:
                self._set(name, TORCH_DTYPES[value])  # torch.half prints as torch.float16
        if self.observer is not None and not isinstance(self.observer, str):
            raise bad("observer", f"expected a string or null, got {self.observer!r}")
        if not isinstance(self.observer_kwargs, dict):
            raise bad("observer_kwargs", f"expected an object, got {self.observer_kwargs!r}")
        if not isinstance(self.observer_kwargs, FrozenDict):
            self._set("observer_kwargs", FrozenDict(self.observer_kwargs))

    def _fill(self, where: str) -> None:
        """The model validator (validate_model_after): infers, checks and fills."""
        group, dynamic, observer = self.group_size, self.dynamic, self.observer
        strategy = self.strategy
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
            self._set("strategy_inferred", True)
        if strategy == "token" and not dynamic:
            raise QuantArgsError(f"{where}: Cannot perform static token quantization, please use "
                                 "`dynamic=True`")
        if strategy in ("group", "tensor_group") and (group is None or group <= 0):
            raise QuantArgsError(f"{where}: strategy {strategy} requires group_size to be set to a "
                                 "positive value")
        if group is not None and group > 0 and strategy not in ("group", "tensor_group"):
            raise QuantArgsError(f"{where}: group_size requires strategy to be set to 'group'")
        if strategy == "block" and self.block_structure is None:
            raise QuantArgsError(f"{where}: Block strategy requires block structure")
        if self.block_structure is not None and strategy != "block":
            raise QuantArgsError(f"{where}: Block structure requires block strategy")
        if ACTORDERS.get(self.actorder or "") == "group" and strategy not in ("group", "tensor_group"):
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
        if self.zp_dtype is None:
            if self.num_bits == 4 and self.type == "float":
                self._set("zp_dtype", "float8_e4m3fn")
            elif self.type == "float":
                if self.num_bits != 8:
                    raise QuantArgsNotImplemented("Only num_bits in (8) are supported")
                self._set("zp_dtype", "float8_e4m3fn")
            else:
                self._set("zp_dtype", "int8" if self.num_bits <= 8 else
                          "int16" if self.num_bits <= 16 else "int32")
        self._set("strategy", strategy)
        self._set("observer", observer)

    # -- faces ---------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"QuantizationArgs({', '.join(self._repr_parts())})"

    def __str__(self) -> str:
        """pydantic's `BaseModel.__str__`: the fields repr shows, space-separated, unwrapped
        (vLLM's MoE refusal formats the args with `{}`)."""
        return " ".join(self._repr_parts())

    def _repr_parts(self) -> list[str]:
        parts = []
        for name in FIELDS:
            value = getattr(self, name)
            if name in ("scale_dtype", "zp_dtype"):
                text = "None" if value is None else f"torch.{value}"
            elif name == "strategy" and self.strategy_inferred:
                # The model validator writes back an enum member, which use_enum_values leaves be.
                text = f"<QuantizationStrategy.{value.upper()}: {value!r}>"
            elif name == "block_structure" and value is not None:
                text = repr(list(value))
            elif name == "observer_kwargs":
                text = repr(dict(value))
            else:
                text = repr(value)
            parts.append(f"{name}={text}")
        return parts

    def to_json(self) -> dict:
        """What `model_dump(mode="json")` gives: dtypes as "torch.<name>", zp_dtype only for
        asymmetric args (compressed-tensors serializes it for those alone)."""
        out: dict = {name: getattr(self, name) for name in FIELDS}
        out["block_structure"] = None if self.block_structure is None else list(self.block_structure)
        out["observer_kwargs"] = dict(self.observer_kwargs)
        out["scale_dtype"] = None if self.scale_dtype is None else f"torch.{self.scale_dtype}"
        out["zp_dtype"] = None if self.symmetric else f"torch.{self.zp_dtype}"
        return out

    # -- JSON in -------------------------------------------------------------------------
    @classmethod
    def from_json(cls, data: Any, where: str) -> "QuantArgs":
        """`QuantizationArgs.model_validate(data)` of a JSON object: the spellings the
        library's field validators accept, then the constructor's checks."""
        if not isinstance(data, dict):
            raise QuantArgsError(f"{where}: expected an object of QuantizationArgs fields, got {data!r}")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:  # model_config = ConfigDict(extra="forbid")
            raise QuantArgsError(f"{where}: unknown field(s) {unknown}; accepted: {list(FIELDS)}")
        raw = dict(data)
        for name, accepted in (("type", TYPES), ("strategy", STRATEGIES), ("dynamic", ("local",)),
                               ("actorder", tuple(ACTORDERS))):
            value = raw.get(name)
            if isinstance(value, str) and value.lower() in accepted:
                raw[name] = value.lower()
        block = raw.get("block_structure")
        if isinstance(block, str):
            try:
                raw["block_structure"] = [int(x) for x in block.split("x")]
            except ValueError:
                raise QuantArgsError(f"{where}.block_structure: Invalid block_structure '{block}'. "
                                     "Must be a list of ints [rows, cols].") from None
        if isinstance(raw.get("actorder"), bool):
            raw["actorder"] = "group" if raw["actorder"] else None
        for name in ("scale_dtype", "zp_dtype"):
            if isinstance(raw.get(name), str):
                raw[name] = raw[name].removeprefix("torch.")
        # The int and bool fields in pydantic's lax mode; a string group_size stays refused
        # (the library's before-validator compares it with -1 and raises TypeError).
        for name, kind in (("num_bits", "int"), ("symmetric", "bool"), ("group_size", "int")):
            if name in raw and not (name == "group_size" and isinstance(raw[name], str)):
                raw[name] = _lax(raw[name], kind)
        if "dynamic" in raw and not isinstance(raw["dynamic"], str):  # DynamicType | bool
            raw["dynamic"] = _lax(raw["dynamic"], "bool")
        if raw.get("observer_kwargs", {}) is None:
            raw["observer_kwargs"] = None  # refused by the constructor, as the library does
        return cls(**raw, where=where)
