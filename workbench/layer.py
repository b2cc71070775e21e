"""The quantized layer: the one value the readers, builders, dispatch and kernels share.

`LayerSpec` holds what a listing knows without reading tensor data (shapes, quantization
args, format, provenance). `QuantizedLayer` adds the tensors, kept as stored on disk
(packed int32 stays packed), and converts on request to the forms the kernels take:

- `int4_weight()`: int8 [N, K] holding int4 values, signed [-8, 7] when `zeros` is None,
  unsigned [0, 15] when it is not (the project convention of `kernels/w4a8_kernels/quant.py`);
- `packed(fmt)`: compressed-tensors int32 [N, K/8], GPTQ `qweight` [K/8, N], AWQ
  `qweight` [K, N/8], or plain int8;
- `dequantize()`: (w_q - zeros) * scales, exact (int4 times a 16-bit scale is exact in
  float32).

Shapes follow vLLM: K = in_features (input_size), N = out_features (output_size).
`scales` and `zeros` are always [N, K // g] here (GPTQ stores [K // g, N]; the reader
transposes, keeping the stored dtype).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING

from workbench.errors import InvalidInputError
from workbench.frozen import FrozenDict, freeze
from workbench.quant_args import QuantArgs

if TYPE_CHECKING:  # torch is imported where tensors are touched: a spec alone needs none
    import torch

__all__ = [
    "CheckpointFormat", "WeightPacking", "Provenance", "CTScheme", "LayerSpec", "QuantizedLayer",
    "default_parallel", "is_lm_head", "ROW_PARALLEL_SUFFIXES", "linear_class", "LINEAR_CLASS_BY_SUFFIX",
]


class CheckpointFormat(str, Enum):
    """Which tool's layout the layer came from (decides vLLM's quantization method)."""

    COMPRESSED_TENSORS = "compressed-tensors"
    """llm-compressor / compressed-tensors: config_groups, `weight_packed` or int8 `weight`."""
    GPTQ = "gptq"
    """AutoGPTQ / GPTQModel: `qweight` [K/8, N], `qzeros`, `scales` [K/g, N], `g_idx`."""
    INC = "inc"
    """Intel AutoRound / INC (`quant_method: auto-round`): GPTQ or AWQ tensors; vLLM's INC path."""
    AWQ = "awq"
    """AutoAWQ: `qweight` [K, N/8] in AWQ nibble order, `qzeros`, `scales`."""
    SYNTHETIC = "synthetic"
    """Built in memory by `workbench.synthetic` or `workbench.trained` (compressed-tensors args)."""


class WeightPacking(str, Enum):
    """How `QuantizedLayer.qweight` holds the int4 values."""

    INT8 = "int8"
    """int8 [N, K], one value per byte, in the project convention (signed, or unsigned with zeros)."""
    COMPRESSED_TENSORS = "compressed-tensors"
    """int32 [N, ceil(K/8)], packed along K, nibble = value + 8 (`pack-quantized`)."""
    GPTQ = "gptq"
    """int32 [K/8, N], packed along K, unsigned nibbles."""
    AWQ = "awq"
    """int32 [K, N/8], packed along N in AWQ order 0,2,4,6,1,3,5,7, unsigned nibbles."""


# vLLM shards these along K (RowParallelLinear); every other linear along N.
ROW_PARALLEL_SUFFIXES = ("o_proj", "down_proj", "out_proj", "dense_4h_to_h", "fc2", "w2",
                         "c_proj", "wo", "attention.dense", "attn.dense")


# The vLLM linear class a checkpoint module becomes (compressed-tensors matches class-name
# targets against it: compressed_tensors/utils.py:103 `module.__class__.__name__`, by
# case-insensitive substring or `re:`). Llama-family model files: q/k/v_proj load into
# QKVParallelLinear (llama.py `qkv_proj`), gate/up_proj into MergedColumnParallelLinear,
# o_proj/down_proj are RowParallelLinear. Where models differ (DeepSeek's q_a_proj is
# ReplicatedLinear or fused into MergedColumnParallelLinear), the name alone cannot say;
# unknown names are taken as ColumnParallelLinear, the common case.
LINEAR_CLASS_BY_SUFFIX = (
    (("q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "c_attn", "wqkv", "Wqkv"),
     "QKVParallelLinear"),
    (("gate_proj", "up_proj", "gate_up_proj", "w1", "w3"), "MergedColumnParallelLinear"),
    (ROW_PARALLEL_SUFFIXES, "RowParallelLinear"),
    (("kv_a_proj_with_mqa", "q_a_proj"), "ReplicatedLinear"),
)


def linear_class(layer_name: str) -> str:
    """The vLLM LinearBase subclass this checkpoint module is built as (see above)."""
    last = layer_name.rsplit(".", 1)[-1]
    for suffixes, cls in LINEAR_CLASS_BY_SUFFIX:
        if last in suffixes or (cls == "RowParallelLinear" and layer_name.endswith(suffixes)):
            return cls
    return "ColumnParallelLinear"


# vLLM's model files build the checkpoint's `lm_head` as a ParallelLMHead, not a LinearBase
# (llama.py:503, qwen2.py:480; prefix "lm_head"): INC and GPTQ treat it apart
# (`workbench.checkpoints.overrides`).
LM_HEAD = "lm_head"


def is_lm_head(layer_name: str) -> bool:
    """Whether this checkpoint module loads into vLLM's ParallelLMHead."""
    return layer_name.rsplit(".", 1)[-1] == LM_HEAD


def default_parallel(layer_name: str) -> str:
    """'row' for the projections vLLM row-shards (o_proj, down_proj, ...), else 'column'."""
    return "row" if layer_name.endswith(ROW_PARALLEL_SUFFIXES) else "column"


@dataclass(frozen=True)
class Provenance:
    """Where a layer came from: the checkpoint, its files and the tensor name per role."""

    source: str
    files: tuple[str, ...] = ()
    tensors: FrozenDict = field(default_factory=FrozenDict)  # role -> tensor name

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", tuple(self.files))
        object.__setattr__(self, "tensors", freeze(self.tensors))


def _positive(value: object, field_name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInputError(f"scheme.{field_name}: expected a positive integer, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class CTScheme:
    """One compressed-tensors Linear layer as vLLM's loader is handed it: its config group's
    args (typed), the format, the layer's name, shapes and parameter dtype. What
    `workbench.dispatch.trace_scheme` takes; `to_json` is the scheme JSON of the CLI's --batch
    files and the recorder, `from_json` reads one (the JSON faces only)."""

    weights: QuantArgs | None
    input_activations: QuantArgs | None = None
    output_activations: QuantArgs | None = None
    format: str | None = None
    layer_name: str = "model.layers.0.mlp.down_proj"
    in_features: int
    out_features: int
    params_dtype: str = "bfloat16"
    input_size_per_partition: int | None = None  # None: the full in_features
    output_size_per_partition: int | None = None

    def __post_init__(self) -> None:
        for name in ("in_features", "out_features"):
            _positive(getattr(self, name), name)
        for name in ("input_size_per_partition", "output_size_per_partition"):
            if getattr(self, name) is not None:
                _positive(getattr(self, name), name)
        for name in ("weights", "input_activations", "output_activations"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, QuantArgs):
                raise InvalidInputError(f"scheme.{name}: expected QuantArgs or None, got "
                                        f"{type(value).__name__}")
        if not isinstance(self.layer_name, str):
            raise InvalidInputError(f"scheme.layer_name: expected a string, got {self.layer_name!r}")

    @property
    def partition(self) -> tuple[int, int]:
        """(input_size_per_partition, output_size_per_partition), the full sizes by default."""
        return (self.input_size_per_partition or self.in_features,
                self.output_size_per_partition or self.out_features)

    def partitioned(self, k_part: int, n_part: int) -> "CTScheme":
        """The same layer as one tensor-parallel rank holds it."""
        return replace(self, input_size_per_partition=k_part, output_size_per_partition=n_part)

    def to_json(self) -> dict:
        out: dict = {"weights": None if self.weights is None else self.weights.to_json()}
        for name in ("input_activations", "output_activations"):
            value = getattr(self, name)
            out[name] = None if value is None else value.to_json()
        out.update(format=self.format, layer_name=self.layer_name, in_features=self.in_features,
                   out_features=self.out_features, params_dtype=self.params_dtype)
        for name in ("input_size_per_partition", "output_size_per_partition"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


def _plain(value):
    """A FrozenDict (and those inside it) as plain dicts, for JSON."""
    return {k: _plain(v) for k, v in value.items()} if isinstance(value, dict) else value


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True, kw_only=True, eq=False)
class LayerSpec:
    """A quantized linear layer as a listing sees it: no tensor data.

    weight_args / input_args / output_args are compressed-tensors QuantizationArgs, typed
    and validated (`workbench.quant_args.QuantArgs`); for GPTQ, AWQ and INC layers the weight
    args are the equivalent CT args and `quant_config` keeps the method's own fields (bits,
    group_size, sym, desc_act, packing_format, backend, checkpoint_format), read-only.
    Frozen: a change is a new spec (`dataclasses.replace`).
    """

    name: str
    in_features: int
    out_features: int
    num_bits: int
    group_size: int  # -1: one scale per output channel
    symmetric: bool
    format: CheckpointFormat
    weight_args: QuantArgs
    input_args: QuantArgs | None = None
    output_args: QuantArgs | None = None
    ct_format: str | None = None  # compressed-tensors per-layer format, e.g. "int-quantized"
    params_dtype: str = "bfloat16"  # the model dtype vLLM creates parameters in
    scale_dtype: str = "bfloat16"  # the dtype the scales are stored in
    has_g_idx: bool = False
    quant_config: FrozenDict = field(default_factory=FrozenDict)
    provenance: Provenance = field(default_factory=lambda: Provenance("memory"))
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("weight_args", "input_args", "output_args"):
            value = getattr(self, name)
            if not (isinstance(value, QuantArgs) or (value is None and name != "weight_args")):
                raise InvalidInputError(f"layer {self.name}: {name} is {type(value).__name__}; "
                                        "accepted: QuantArgs" + (" or None" if name != "weight_args" else ""))
        object.__setattr__(self, "quant_config", freeze(self.quant_config))
        object.__setattr__(self, "notes", tuple(self.notes))

    # -- shapes ----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        """[K, N] as vLLM's MPLinearLayerConfig writes full_weight_shape."""
        return (self.in_features, self.out_features)

    @property
    def n_groups(self) -> int:
        return 1 if self.group_size == -1 else self.in_features // self.group_size

    @property
    def effective_group_size(self) -> int:
        return self.in_features if self.group_size == -1 else self.group_size

    @property
    def default_parallel(self) -> str:
        return default_parallel(self.name)

    def partition_shape(self, tp_size: int = 1, parallel: str | None = None) -> tuple[int, int]:
        """(input_size_per_partition, output_size_per_partition) under tensor parallelism.

        Column-parallel layers split N, row-parallel layers split K; vLLM requires the
        split dimension to divide evenly.
        """
        parallel = parallel or self.default_parallel
        if parallel not in ("column", "row"):
            raise InvalidInputError(f"parallel: {parallel!r}; accepted: 'column', 'row'")
        if type(tp_size) is not int or tp_size < 1:  # bool is an int: True is not a TP size
            raise InvalidInputError(f"tp_size: {tp_size!r}; accepted: a positive integer")
        k, n = self.in_features, self.out_features
        dim, size = ("in_features", k) if parallel == "row" else ("out_features", n)
        if size % tp_size:
            raise InvalidInputError(
                f"tp_size {tp_size} does not divide {dim} = {size} of layer {self.name} "
                f"({parallel}-parallel splits {dim}); accepted: a divisor of {size}")
        return (k // tp_size, n) if parallel == "row" else (k, n // tp_size)

    # -- inputs of the dispatch core ---------------------------------------------------
    def scheme_input(self, tp_size: int = 1, parallel: str | None = None) -> CTScheme:
        """The compressed-tensors scheme that `workbench.dispatch.trace_scheme` takes."""
        if self.format not in (CheckpointFormat.COMPRESSED_TENSORS, CheckpointFormat.SYNTHETIC):
            raise InvalidInputError(
                f"layer {self.name}: a {self.format.value} layer has no compressed-tensors "
                "scheme; use quant_config_input() for the GPTQ/AWQ/INC resolution")
        k_part, n_part = self.partition_shape(tp_size, parallel)
        scheme = CTScheme(weights=self.weight_args, input_activations=self.input_args,
                          output_activations=self.output_args, format=self.ct_format,
                          layer_name=self.name, in_features=self.in_features,
                          out_features=self.out_features, params_dtype=self.params_dtype)
        return scheme.partitioned(k_part, n_part) if tp_size > 1 else scheme

    def quant_config_input(self, tp_size: int = 1, parallel: str | None = None) -> dict:
        """The fields vLLM's GPTQ / AWQ / INC resolution reads, plus shapes and dtypes."""
        k_part, n_part = self.partition_shape(tp_size, parallel)
        return {
            "quant_method": self.format.value,
            **self.quant_config,
            "layer_name": self.name,
            "in_features": self.in_features,
            "out_features": self.out_features,
            "input_size_per_partition": k_part,
            "output_size_per_partition": n_part,
            "params_dtype": self.params_dtype,
            "scale_dtype": self.scale_dtype,
            "has_g_idx": self.has_g_idx,
            **({"module": "ParallelLMHead"} if is_lm_head(self.name) else {}),
        }

    def to_dict(self) -> dict:
        """JSON-ready summary (no tensors)."""
        return {
            "name": self.name, "in_features": self.in_features, "out_features": self.out_features,
            "num_bits": self.num_bits, "group_size": self.group_size, "symmetric": self.symmetric,
            "format": self.format.value, "ct_format": self.ct_format,
            "weight_args": self.weight_args.to_json(),
            "input_args": None if self.input_args is None else self.input_args.to_json(),
            "output_args": None if self.output_args is None else self.output_args.to_json(),
            "params_dtype": self.params_dtype,
            "scale_dtype": self.scale_dtype, "has_g_idx": self.has_g_idx,
            "quant_config": _plain(self.quant_config), "parallel": self.default_parallel,
            "provenance": {"source": self.provenance.source, "files": list(self.provenance.files),
                           "tensors": dict(self.provenance.tensors)},
            "notes": list(self.notes),
        }


@dataclass(frozen=True, kw_only=True, eq=False)
class QuantizedLayer(LayerSpec):
    """A LayerSpec with its tensors: `qweight` as stored (see `packing`), `scales` [N, G]
    in the stored dtype, `zeros` None or int8 [N, G] unsigned [0, 15], `g_idx` None or
    int32 [K] (group of each input column), `source_weight` the float weight before
    quantization when known (synthetic and trained layers)."""

    qweight: torch.Tensor
    packing: WeightPacking
    scales: torch.Tensor
    zeros: torch.Tensor | None = None
    g_idx: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    source_weight: torch.Tensor | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        n, g = self.out_features, self.n_groups
        if tuple(self.scales.shape) != (n, g):
            raise InvalidInputError(f"layer {self.name}: scales shape {tuple(self.scales.shape)}; "
                                    f"expected [N, K // g] = {(n, g)}")
        if self.zeros is not None and tuple(self.zeros.shape) != (n, g):
            raise InvalidInputError(f"layer {self.name}: zeros shape {tuple(self.zeros.shape)}; "
                                    f"expected {(n, g)}")
        if self.bias is not None and tuple(self.bias.shape) != (n,):
            raise InvalidInputError(f"layer {self.name}: bias shape {tuple(self.bias.shape)}; "
                                    f"expected [N] = ({n},)")
        if self.g_idx is not None and tuple(self.g_idx.shape) != (self.in_features,):
            raise InvalidInputError(f"layer {self.name}: g_idx shape {tuple(self.g_idx.shape)}; "
                                    f"expected [K] = ({self.in_features},)")

    @property
    def nbytes(self) -> int:
        """Bytes held by the quantized tensors (weight, scales, zeros, g_idx)."""
        ts = (self.qweight, self.scales, self.zeros, self.g_idx)
        return sum(t.numel() * t.element_size() for t in ts if t is not None)

    # -- the int4 values ----------------------------------------------------------------
    def int4_weight(self) -> torch.Tensor:
        """int8 [N, K]: signed [-8, 7] without zeros, unsigned [0, 15] with zeros."""
        from w4a8_kernels import packing

        if self.num_bits != 4 and self.packing is not WeightPacking.INT8:
            raise InvalidInputError(f"layer {self.name}: {self.num_bits}-bit weights are not int4")
        k = self.in_features
        if self.packing is WeightPacking.INT8:
            return self.qweight
        if self.packing is WeightPacking.COMPRESSED_TENSORS:
            signed = packing.unpack_int4_ct(self.qweight, k)
            return signed if self.zeros is None else packing.signed_to_unsigned(signed)
        if self.packing is WeightPacking.GPTQ:
            u = packing.unpack_int4_gptq(self.qweight)
        else:
            u = packing.unpack_int4_awq(self.qweight)
        return packing.unsigned_to_signed(u) if self.zeros is None else u

    def _unsigned(self) -> torch.Tensor:
        from w4a8_kernels import packing

        w = self.int4_weight()
        return w if self.zeros is not None else packing.signed_to_unsigned(w)

    def packed(self, fmt: WeightPacking | str) -> torch.Tensor:
        """The weight in another packing: CT int32 [N, K/8], GPTQ [K/8, N], AWQ [K, N/8],
        or int8 [N, K]. Nibbles are unsigned (value + 8 when symmetric)."""
        from w4a8_kernels import packing

        try:
            fmt = WeightPacking(fmt)
        except ValueError:
            raise InvalidInputError(f"packing {fmt!r}; accepted: "
                                    f"{', '.join(p.value for p in WeightPacking)}") from None
        if fmt is self.packing:
            return self.qweight
        if fmt is WeightPacking.INT8:
            return self.int4_weight()
        if fmt is WeightPacking.COMPRESSED_TENSORS:
            return packing.pack_int4_ct(packing.unsigned_to_signed(self._unsigned()))
        if fmt is WeightPacking.GPTQ:
            return packing.pack_int4_gptq(self._unsigned())
        return packing.pack_int4_awq(self._unsigned())

    def group_index(self) -> torch.Tensor:
        """int64 [K]: the scale group of each input column (g_idx when present)."""
        import torch

        if self.g_idx is not None:
            return self.g_idx.to(torch.int64)
        return torch.arange(self.in_features) // self.effective_group_size

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """[N, K] = (w_q - zeros) * scales, exact in float32 (the default) or float64."""
        import torch

        from w4a8_kernels.quant import dequantize_groupwise

        dtype = torch.float32 if dtype is None else dtype
        if dtype not in (torch.float32, torch.float64):
            raise InvalidInputError(f"dequantize dtype {dtype!r}; accepted: torch.float32, "
                                    "torch.float64 (the dequantized values are exact in both)")
        if self.num_bits == 4 and self.g_idx is None:
            # The kernels' own reference dequantization (it also checks value ranges).
            return dequantize_groupwise(self.int4_weight(), self.scales, self.group_size,
                                        self.zeros, dtype=dtype)
        w = (self.int4_weight() if self.num_bits == 4 else self.qweight).to(dtype)
        idx = self.group_index()
        s = self.scales.to(dtype)[:, idx]
        z = self.zeros.to(dtype)[:, idx] if self.zeros is not None else 0
        return (w - z) * s

    def with_tensors(self, **changes) -> "QuantizedLayer":
        """A copy with some fields replaced (dataclasses.replace keeps it frozen)."""
        return replace(self, **changes)

