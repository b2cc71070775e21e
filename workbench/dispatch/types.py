"""The values vLLM's mixed-precision dispatch compares: scalar types, torch dtypes, layer configs.

vLLM prints these in its reason strings, so each type here prints exactly as vLLM's does:
- `ScalarType` models `vllm/scalar_type.py` (`str()` gives `uint4b8`, `repr()` gives
  `ScalarType.uint4b8`; lists of them print with the repr).
- `DType` models a `torch.dtype` (`str()` gives `torch.bfloat16`) without importing torch.
- `MPConfig` models `MPLinearLayerConfig` in
  `vllm/model_executor/kernels/linear/mixed_precision/MPLinearKernel.py` (the pinned release
  has no `has_g_idx` field).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from workbench.errors import InvalidInputError

# --------------------------------------------------------------------------- scalar types


@dataclass(frozen=True)
class ScalarType:
    """A quantized element type, equal by its bit layout as in vLLM's frozen dataclass."""

    exponent: int
    mantissa: int
    signed: bool
    bias: int
    finite_values_only: bool = False
    nan_repr: int = 1  # vLLM's NanRepr: 0 NONE, 1 IEEE_754, 2 EXTD_RANGE_MAX_MIN

    @property
    def size_bits(self) -> int:
        return self.exponent + self.mantissa + int(self.signed)

    def is_floating_point(self) -> bool:
        return self.exponent != 0

    def is_ieee_754(self) -> bool:
        return self.nan_repr == 1 and not self.finite_values_only

    def __str__(self) -> str:
        if self.is_floating_point():
            name = f"float{self.size_bits}_e{self.exponent}m{self.mantissa}"
            if not self.is_ieee_754():
                name += "f" if self.finite_values_only else ""
                name += "n" if self.nan_repr != 0 else ""
            return name
        name = ("int" if self.signed else "uint") + str(self.size_bits)
        return name + (f"b{self.bias}" if self.bias else "")

    def __repr__(self) -> str:
        return "ScalarType." + str(self)


def _int(bits: int, bias: int = 0) -> ScalarType:
    return ScalarType(0, bits - 1, True, bias)


def _uint(bits: int, bias: int = 0) -> ScalarType:
    return ScalarType(0, bits, False, bias)


def _float(exponent: int, mantissa: int, finite: bool, nan_repr: int) -> ScalarType:
    return ScalarType(exponent, mantissa, True, 0, finite, nan_repr)


# The named members of vLLM's `scalar_types` (vllm/scalar_type.py).
SCALAR_TYPES: dict[str, ScalarType] = {
    str(t): t
    for t in (
        _uint(2), _uint(3), _int(4), _uint(4), _uint(5), _uint(6), _uint(7), _int(8), _uint(8),
        _float(4, 3, True, 2),   # float8_e4m3fn
        _float(5, 2, False, 1),  # float8_e5m2
        ScalarType(8, 0, False, 0, True, 2),  # float8_e8m0fnu
        _float(8, 7, False, 1),  # float16_e8m7 (bfloat16)
        _float(5, 10, False, 1),  # float16_e5m10 (float16)
        _float(3, 2, True, 0),   # float6_e3m2f
        _float(2, 3, True, 0),   # float6_e2m3f
        _float(2, 1, True, 0),   # float4_e2m1f
        _uint(2, 2), _uint(3, 4), _uint(4, 8), _uint(5, 16), _uint(6, 32), _uint(7, 64),
        _uint(8, 128),
    )
}

# vLLM's colloquial names for two members (scalar_type.py:352-354).
_SCALAR_ALIASES = {"bfloat16": "float16_e8m7", "float16": "float16_e5m10"}


def scalar_type(name: str, field: str = "weight_type") -> ScalarType:
    """A member of vLLM's `scalar_types` by name (`int4`, `uint4b8`, `float8_e4m3fn`, ...):
    only the names vllm/scalar_type.py:319-354 defines, so no kernel is asked about a type
    (`int3`, `uint4b7`) that a vLLM config cannot hold."""
    if not isinstance(name, str):
        raise InvalidInputError(f"{field}: expected a scalar type name string, got {name!r}")
    key = _SCALAR_ALIASES.get(name, name)
    if key in SCALAR_TYPES:
        return SCALAR_TYPES[key]
    raise InvalidInputError(
        f"{field}: unknown weight type {name[:40]!r}; accepted: vLLM's scalar_types "
        f"{', '.join([*SCALAR_TYPES, *_SCALAR_ALIASES])}"
    )


ST = SCALAR_TYPES  # short alias for the rule tables

# --------------------------------------------------------------------------- torch dtypes

# name -> itemsize in bytes. Humming's check reads `act_type.itemsize`.
_DTYPE_ITEMSIZE = {
    "float32": 4, "float16": 2, "bfloat16": 2, "float64": 8,
    "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1,
}
_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "fp16": "float16",
                  "bf16": "bfloat16", "fp32": "float32"}


@dataclass(frozen=True)
class DType:
    """A torch dtype by name; prints as `torch.<name>` like torch does."""

    name: str

    @property
    def itemsize(self) -> int:
        return _DTYPE_ITEMSIZE[self.name]

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__


def dtype(name: str, field: str = "act_type") -> DType:
    """Parse a torch dtype name (`bfloat16`, `torch.float16`, `fp16`, ...)."""
    if not isinstance(name, str):
        raise InvalidInputError(f"{field}: expected a torch dtype name string, got {name!r}")
    key = name.removeprefix("torch.")
    key = _DTYPE_ALIASES.get(key, key)
    if key not in _DTYPE_ITEMSIZE:
        raise InvalidInputError(
            f"{field}: unknown dtype {name[:40]!r}; accepted: torch dtypes "
            f"{', '.join(_DTYPE_ITEMSIZE)} (or torch.<name>, {', '.join(_DTYPE_ALIASES)})"
        )
    return DType(key)


BF16, FP16, FP32 = DType("bfloat16"), DType("float16"), DType("float32")
INT8, FP8_E4M3 = DType("int8"), DType("float8_e4m3fn")

# --------------------------------------------------------------------------- MP layer config


@dataclass(frozen=True)
class MPConfig:
    """vLLM's `MPLinearLayerConfig`: shapes are (K, N) = (in_features, out_features)."""

    full_weight_shape: tuple[int, int]
    partition_weight_shape: tuple[int, int]
    weight_type: ScalarType
    act_type: DType
    group_size: int
    zero_points: bool
    out_type: DType | None = None

    @classmethod
    def from_json(cls, data: Any) -> "MPConfig":
        """Build from the workbench's MP config JSON; every bad field is named."""
        if not isinstance(data, dict):
            raise InvalidInputError(f"mp_config: expected a JSON object, got {type(data).__name__}")
        known = {"weight_type", "act_type", "group_size", "zero_points", "out_type",
                 "full_weight_shape", "partition_weight_shape"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidInputError(
                f"mp_config: unknown field(s) {unknown}; accepted: {sorted(known)}"
            )
        for required in ("weight_type", "act_type", "group_size", "full_weight_shape"):
            if required not in data:
                raise InvalidInputError(f"mp_config.{required}: missing (required)")
        full = _shape(data["full_weight_shape"], "mp_config.full_weight_shape")
        part = _shape(data.get("partition_weight_shape", full), "mp_config.partition_weight_shape")
        group = data["group_size"]
        if isinstance(group, bool) or not isinstance(group, int):
            raise InvalidInputError(f"mp_config.group_size: expected an integer, got {group!r}")
        if group < -1:
            raise InvalidInputError(
                f"mp_config.group_size: {group} is not a group size; accepted: -1 "
                "(channelwise) or a positive integer"
            )
        zp = data.get("zero_points", False)
        if not isinstance(zp, bool):
            raise InvalidInputError(f"mp_config.zero_points: expected true or false, got {zp!r}")
        out = data.get("out_type")
        return cls(
            full_weight_shape=full,
            partition_weight_shape=part,
            weight_type=scalar_type(data["weight_type"], "mp_config.weight_type"),
            act_type=dtype(data["act_type"], "mp_config.act_type"),
            group_size=group,
            zero_points=zp,
            out_type=None if out is None else dtype(out, "mp_config.out_type"),
        )

    @property
    def partition_warning(self) -> UnsplitPartition | None:
        """The warning when no TP split gives this partition (vLLM selects for it anyway)."""
        why = partition_fit(self.full_weight_shape, self.partition_weight_shape)
        return None if why is None else UnsplitPartition(self.full_weight_shape,
                                                         self.partition_weight_shape, why)

    def to_json(self) -> dict:
        return {
            "weight_type": str(self.weight_type),
            "act_type": self.act_type.name,
            "group_size": self.group_size,
            "zero_points": self.zero_points,
            "out_type": None if self.out_type is None else self.out_type.name,
            "full_weight_shape": list(self.full_weight_shape),
            "partition_weight_shape": list(self.partition_weight_shape),
        }


def _shape(value: Any, field: str) -> tuple[int, int]:
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise InvalidInputError(f"{field}: expected a 2-D shape [K, N] of integers, got {value!r}")
    if any(v <= 0 for v in value):
        raise InvalidInputError(f"{field}: sizes must be positive, got {list(value)}")
    return (value[0], value[1])


class PartitionFit(Enum):
    """Why no tensor-parallel split of the full [K, N] gives a partition."""

    LARGER = "is larger than the full shape"
    NOT_DIVIDING = "does not divide the full shape"
    BOTH_SPLIT = "splits both K and N, but tensor parallelism splits one of them"


@dataclass(frozen=True)
class UnsplitPartition:
    """A warning: vLLM selects a kernel for any `MPLinearLayerConfig` (a dataclass that
    checks no shape, kernels/linear/mixed_precision/MPLinearKernel.py:22-30), but no model
    load hands it this partition: ColumnParallelLinear keeps K and divides N by the TP size
    (layers/linear.py:496-497), RowParallelLinear divides K and keeps N (linear.py:1708-1709),
    and `divide` asserts that the size divides (distributed/utils.py:51-55)."""

    full: tuple[int, int]
    partition: tuple[int, int]
    why: PartitionFit

    def sentence(self) -> str:
        return (f"partition {list(self.partition)} of full {list(self.full)} {self.why.value}: "
                "no TP split produces it (a TP shard is the full [K, N], [K / tp, N] or "
                "[K, N / tp]); traced as vLLM selects for it")

    def to_json(self) -> dict:
        return {"kind": "partition_not_a_tp_split", "why": self.why.name.lower(),
                "full": list(self.full), "partition": list(self.partition),
                "message": self.sentence()}


def partition_fit(full: tuple[int, int], part: tuple[int, int]) -> PartitionFit | None:
    """None when `part` is a TP shard of `full`, else why it is none."""
    if part[0] > full[0] or part[1] > full[1]:
        return PartitionFit.LARGER
    if full[0] % part[0] or full[1] % part[1]:
        return PartitionFit.NOT_DIVIDING
    if part[0] != full[0] and part[1] != full[1]:
        return PartitionFit.BOTH_SPLIT
    return None


# --------------------------------------------------------------------------- what runs

class ValueEnum(str, Enum):
    """A `str` enum that prints, formats and hashes as its value, so JSON, CSV and every
    sentence read as the bare name did ("int8", never "Activation.INT8"), and a dict keyed
    by the bare name finds the member, and back."""

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__


class Activation(ValueEnum):
    """The precision of a GEMM's activation operand once the kernel is selected."""

    INT8 = "int8"
    """Quantized per token (or per group) to int8 before the GEMM: real W4A8."""
    INT4 = "int4"
    """Quantized to int4 before the GEMM (W4A4 integer paths)."""
    FP8 = "fp8"
    """Quantized to float8 e4m3 before the GEMM: W4A8-FP8."""
    BF16 = "bf16"
    """The model's bfloat16 activations, unquantized: weight-only."""
    FP16 = "fp16"
    """The model's float16 activations, unquantized: weight-only."""
    FP32 = "fp32"
    """float32 activations, unquantized: weight-only."""


ACTIVATIONS = tuple(a.value for a in Activation)
FAILS_AT = ("load", "forward")


def activation_name(act: DType) -> str:
    """The short name of the precision a GEMM reads its activations in."""
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "int8": "int8",
            "float8_e4m3fn": "fp8"}.get(act.name, act.name)


@dataclass(frozen=True)
class Runtime:
    """What the selected kernel or linear method computes once its weights are processed.

    Produced by the class that decides it (each MP kernel's `runtime`, the INC methods); every
    face renders its sentence from it (`workbench.dispatch.describe_runtime`), none parses one.

    - `activation`: the precision of the GEMM's activation operand ("int8" means the layer
      quantizes activations per token before the GEMM: real W4A8).
    - `weight`: the weight format the op reads, as vLLM names it.
    - `op`: the op `apply_weights` calls (`fallback_op`: below `min_tokens` tokens per call).
    - `emulation`: the workbench kernel path that computes the same thing on a CPU here.
    - `fails_at`: "load" (`process_weights_after_loading`) or "forward", with vLLM's exact
      `error` and `error_type`; None when the layer runs.
    - `source`: the vLLM 0.x file:line (relative to the sdist's `vllm/`) that decides it.
    - `isa_hint`: CPUWNA16's `layer.isa_hint`; `impl`: which implementation of the op runs
      ("kleidiai", "reference", ...); `output`: the op's output dtype when it is not the
      model's; `warning`: vLLM's logged warning, exact.
    - `failing_op`: for a failure raised inside a compiled op (not in vLLM's Python), that op
      as `torch.ops` names it ("_C.machete_prepack_B"); its `error` is then the op's own text.
    - `caveat`: what vLLM's source leaves undetermined about this value (a build-dependent
      part of an error text, a dtype the input does not give), for the faces to show.
    - `activation_group_size`: the K-group the activations are quantized per (None: per
      token); `activation_dtype`: the exact dtype name where `activation` abbreviates it
      (Humming's "float8e4m3"); `activation_requested`: the activation the layer asked for
      when the kernel runs another one (Humming's input-schema fallback: "int8" run as bf16).
    - `weight_bits`: the bits per weight the op reads (4, or 8 for INC's MXFP8 layers).

    `to_json()` is the trace JSON's `runtime_detail`, the keys the recorder writes too.
    """

    method: str
    activation: Activation
    weight: str
    op: str
    source: str
    emulation: str | None = None
    fails_at: str | None = None
    error: str | None = None
    error_type: str | None = None
    isa_hint: str | None = None
    impl: str | None = None
    output: str | None = None
    warning: str | None = None
    min_tokens: int | None = None
    fallback_op: str | None = None
    scale_dtype: str | None = None
    failing_op: str | None = None
    caveat: str | None = None
    activation_group_size: int | None = None
    activation_dtype: str | None = None
    activation_requested: str | None = None
    weight_bits: int = 4  # 8 for MXFP8 weights (float8_e4m3fn), which no path here models

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"Runtime.activation {self.activation!r} not in {ACTIVATIONS}")
        object.__setattr__(self, "activation", Activation(self.activation))
        if self.fails_at is not None and self.fails_at not in FAILS_AT:
            raise ValueError(f"Runtime.fails_at {self.fails_at!r} not in {FAILS_AT}")

    @property
    def computes(self) -> str:
        """"w4a8" (integer activations), "w4a8-fp8", "w4a16", or "none" when the layer fails;
        "w8..." for 8-bit weights (MXFP8)."""
        if self.fails_at is not None:
            return "none"
        w = f"w{self.weight_bits}"
        if self.activation in (Activation.INT8, Activation.INT4):
            return w + "a8"
        return w + ("a8-fp8" if self.activation is Activation.FP8 else "a16")

    @property
    def weight_only(self) -> bool:
        return self.activation in (Activation.BF16, Activation.FP16, Activation.FP32)

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["activation"] = self.activation.value  # JSON holds the bare name
        return out
