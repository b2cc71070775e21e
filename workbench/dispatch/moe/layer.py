"""An MoE layer as vLLM's fused-MoE path sees it: the experts' compressed-tensors scheme and
the sizes `FusedMoEFactory` (fused_moe/layer.py) builds its `FusedMoEConfig` from.

Parsed from the CLI's `--moe-scheme` JSON or built by a reader; every bad field is named.
The layer is one of a TP=1, EP=1, LoRA-free deployment, routed by softmax top-k with
renormalization (vLLM's default router): the inputs the traced gates read are the ones here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from workbench.dispatch.types import dtype
from workbench.errors import InvalidInputError
from workbench.quant_args import QuantArgs

# vLLM's MoEActivation values whose MLP is gated (fused_moe/activation.py:21-45 of both
# releases; "gelu_pytorch_tanh" is its alias of gelu_tanh, :80-82). The "_no_mul" ones need a
# non-gated checkpoint layout (no up projection), which a gated MoE checkpoint does not have.
GATED_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu2", "swigluoai", "situ",
                     "swigluoai_uninterleave", "swiglustep")
ACTIVATION_ALIASES = {"gelu_pytorch_tanh": "gelu_tanh"}
# The quantization method a layer's checkpoint names: compressed-tensors' MoE schemes, or
# the later release's `--quantization w4afp8` (INT4 g128 experts, FP8 per-token activations).
QUANTIZATIONS = ("compressed-tensors", "w4afp8")
ROUTINGS = ("softmax_topk", "grouped_topk")  # vLLM's default router; DeepSeek-V3's grouped one
# compressed-tensors formats an integer MoE checkpoint's experts are written in (WNA16 MoE
# takes pack-quantized only: get_moe_method refuses the others)
FORMATS = ("pack-quantized", "int-quantized", "naive-quantized", "float-quantized")
MOE_DTYPES = ("bfloat16", "float16", "float32")

_FIELDS = {"weights", "input_activations", "format", "num_experts", "top_k", "hidden_size",
           "intermediate_size", "activation", "params_dtype", "layer_name", "routing",
           "quantization", "group_size"}


@dataclass(frozen=True)
class MoELayer:
    """One fused-MoE layer: its experts' quantization and its sizes (per TP=1 rank)."""

    weights: QuantArgs
    input_activations: QuantArgs | None
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int
    activation: str = "silu"
    params_dtype: str = "bfloat16"
    format: str = "pack-quantized"
    layer_name: str = "model.layers.0.mlp.experts"
    routing: str = "softmax_topk"
    quantization: str = "compressed-tensors"

    def __post_init__(self) -> None:
        if self.quantization not in QUANTIZATIONS:
            raise InvalidInputError(f"moe_scheme.quantization: {self.quantization!r}; accepted: "
                                    f"{', '.join(QUANTIZATIONS)}")
        if self.routing not in ROUTINGS:
            raise InvalidInputError(f"moe_scheme.routing: {self.routing!r}; accepted: "
                                    f"{', '.join(ROUTINGS)}")
        for name in ("num_experts", "top_k", "hidden_size", "intermediate_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InvalidInputError(f"moe_scheme.{name}: expected a positive integer, "
                                        f"got {v!r}")
        if self.top_k > self.num_experts:
            raise InvalidInputError(f"moe_scheme.top_k: {self.top_k} is more than num_experts "
                                    f"({self.num_experts}); accepted: 1 to num_experts")
        act = ACTIVATION_ALIASES.get(self.activation, self.activation)
        if act not in GATED_ACTIVATIONS:
            raise InvalidInputError(
                f"moe_scheme.activation: {self.activation!r} is not a gated MoE activation "
                f"vLLM knows; accepted: {', '.join(GATED_ACTIVATIONS)} (or gelu_pytorch_tanh)")
        object.__setattr__(self, "activation", act)
        if dtype(self.params_dtype, "moe_scheme.params_dtype").name not in MOE_DTYPES:
            raise InvalidInputError(f"moe_scheme.params_dtype: {self.params_dtype!r}; accepted: "
                                    f"{', '.join(MOE_DTYPES)}")
        object.__setattr__(self, "params_dtype", dtype(self.params_dtype).name)
        if self.format not in FORMATS:
            raise InvalidInputError(f"moe_scheme.format: {self.format!r}; accepted: "
                                    f"{', '.join(FORMATS)}")

    @classmethod
    def from_json(cls, data: Any) -> "MoELayer":
        """The CLI's `--moe-scheme` object (and the recorded cases' `input`, whose `scheme`
        holds format, weights and input_activations)."""
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"moe_scheme: expected a JSON object, got "
                                    f"{type(data).__name__}")
        data = dict(data)
        nested = data.pop("scheme", None)
        if isinstance(nested, Mapping):
            data = {**nested, **data}
        unknown = sorted(set(data) - _FIELDS)
        if unknown:
            raise InvalidInputError(f"moe_scheme: unknown field(s) {unknown}; accepted: "
                                    f"{sorted(_FIELDS)}")
        if data.get("quantization") == "w4afp8":
            data = {**data, **w4afp8_args(data.get("group_size", 128))}
        elif "group_size" in data:
            raise InvalidInputError("moe_scheme.group_size: only with quantization w4afp8 (a "
                                    "compressed-tensors layer's group is in its weights)")
        for key in ("weights", "num_experts", "top_k", "hidden_size", "intermediate_size"):
            if key not in data:
                raise InvalidInputError(f"moe_scheme.{key}: missing (required)")
        inp = data.get("input_activations")
        return cls(
            weights=QuantArgs.from_json(data["weights"], "moe_scheme.weights"),
            input_activations=QuantArgs.from_json(inp, "moe_scheme.input_activations")
            if inp else None,
            num_experts=data["num_experts"], top_k=data["top_k"],
            hidden_size=data["hidden_size"], intermediate_size=data["intermediate_size"],
            activation=data.get("activation", "silu"),
            params_dtype=data.get("params_dtype", "bfloat16"),
            format=data.get("format", "pack-quantized"),
            layer_name=str(data.get("layer_name", "model.layers.0.mlp.experts")),
            routing=data.get("routing", "softmax_topk"),
            quantization=data.get("quantization", "compressed-tensors"))

    @property
    def group_size(self) -> int:
        """The weights' group size, -1 for channelwise (as the MoE methods read it)."""
        return -1 if self.weights.group_size is None else self.weights.group_size

    def to_json(self) -> dict:
        if self.quantization == "w4afp8":
            return {"quantization": "w4afp8", "group_size": self.group_size,
                    "num_experts": self.num_experts, "top_k": self.top_k,
                    "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
                    "activation": self.activation, "params_dtype": self.params_dtype,
                    "layer_name": self.layer_name}
        return {"scheme": {"format": self.format, "weights": self.weights.to_json(),
                           "input_activations": None if self.input_activations is None
                           else self.input_activations.to_json()},
                "num_experts": self.num_experts, "top_k": self.top_k,
                "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
                "activation": self.activation, "params_dtype": self.params_dtype,
                "layer_name": self.layer_name}


def w4afp8_args(group_size) -> dict:
    """W4AFP8Config's experts args (quantization/w4afp8.py:50-63, the release that added it): symmetric int4 in
    groups of `group_size`, fp8 dynamic per-token activations."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise InvalidInputError(f"moe_scheme.group_size: {group_size!r}; accepted: a positive "
                                "integer (w4afp8's config default is 128)")
    return {"weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                        "group_size": group_size},
            "input_activations": {"num_bits": 8, "type": "float", "symmetric": True,
                                  "strategy": "token", "dynamic": True},
            "format": "pack-quantized"}
