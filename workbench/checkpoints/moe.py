"""A checkpoint's MoE layers: its experts' projections grouped into fused-MoE layers.

Two layouts are read, from the listing and the safetensors headers (no tensor data):
- per-expert: `<prefix>.experts.<e>.{gate_proj,up_proj,down_proj}` (Qwen-MoE, DeepSeek,
  llm-compressor's output) or `{w1,w3,w2}` (Mixtral), each a quantized Linear the readers
  list (compressed-tensors, GPTQ, AWQ);
- fused: `<prefix>.experts.{gate_up_proj,down_proj}` or `{w13_weight,w2_weight}` 3-D tensors
  [E, 2I, H] / [E, H, I] (with `_packed` for packed int4), as transformers 5 and vLLM's own
  parameter names hold them.
vLLM fuses gate and up into w13 and builds one `RoutedExperts` per prefix; its quantization
is the experts' scheme (all projections must share it: get_moe_method raises otherwise).
"""
from __future__ import annotations

from dataclasses import dataclass

from workbench.checkpoints.errors import shown
from workbench.dispatch.moe.layer import MoELayer
from workbench.errors import InvalidInputError
from workbench.layer import CheckpointFormat, LayerSpec
from workbench.quant_args import QuantArgs

__all__ = ["MoEGroup", "moe_groups", "moe_layer_of"]

_FUSED_PROJ = ("gate_up_proj", "w13_weight", "down_proj", "w2_weight")
_GATE_UP = {"gate_proj": "w1", "w1": "w1", "up_proj": "w3", "w3": "w3", "down_proj": "w2",
            "w2": "w2"}


def _experts_prefix(head: str) -> str | None:
    """`head` where it names an experts module ("....experts"), else None."""
    return head if head.endswith(".experts") else None


def _per_expert_name(name: str) -> tuple[str, int, str] | None:
    """(prefix, expert, projection) of "<prefix>.experts.<e>.<proj>", else None: a checkpoint's
    name is split at its last dots, never handed to a backtracking pattern."""
    head, _, proj = name.rpartition(".")
    head, _, e = head.rpartition(".")
    prefix = _experts_prefix(head)
    if prefix is None or proj not in _GATE_UP or not e.isdecimal():
        return None
    return prefix, int(e), proj


def _fused_name(name: str) -> str | None:
    """The prefix of "<prefix>.experts.<gate_up_proj|w13_weight|down_proj|w2_weight>[_packed]"."""
    head, _, proj = name.rpartition(".")
    proj = proj.removesuffix("_packed")
    return _experts_prefix(head) if proj in _FUSED_PROJ else None


class MoELayoutError(InvalidInputError):
    """An experts prefix whose projections do not form one fused-MoE layer."""


@dataclass(frozen=True)
class MoEGroup:
    """One fused-MoE layer of a checkpoint."""

    name: str  # the experts prefix, e.g. model.layers.0.mlp.experts
    layout: str  # "per-expert" or "fused"
    num_experts: int
    hidden_size: int
    intermediate_size: int
    format: CheckpointFormat
    weight_args: QuantArgs | None
    input_args: QuantArgs | None
    ct_format: str | None
    params_dtype: str
    projections: tuple[str, ...]  # the listed layers (or tensors) it groups

    def to_dict(self) -> dict:
        return {"name": self.name, "layout": self.layout, "num_experts": self.num_experts,
                "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
                "format": self.format.value, "ct_format": self.ct_format,
                "weights": None if self.weight_args is None else self.weight_args.to_json(),
                "input_activations": None if self.input_args is None
                else self.input_args.to_json(), "projections": len(self.projections)}


def moe_groups(layers: list[LayerSpec], tensors: dict | None = None,
               fmt: CheckpointFormat | None = None, params_dtype: str = "bfloat16",
               scheme_of=None) -> list[MoEGroup]:
    """Every experts prefix of a listing (per-expert) and of the headers (fused)."""
    out: dict[str, MoEGroup] = {}
    by_prefix: dict[str, dict[int, dict[str, LayerSpec]]] = {}
    for s in layers:
        got = _per_expert_name(s.name)
        if got:
            prefix, e, proj = got
            by_prefix.setdefault(prefix, {}).setdefault(e, {})[_GATE_UP[proj]] = s
    for prefix, experts in by_prefix.items():
        out[prefix] = _per_expert(prefix, experts)
    for name, info in (tensors or {}).items():
        prefix = _fused_name(name)
        if prefix is None or prefix in out or len(info.shape) != 3:
            continue
        out[prefix] = _fused(prefix, tensors, fmt, params_dtype, scheme_of)
    return [out[k] for k in sorted(out)]


def _per_expert(prefix: str, experts: dict[int, dict[str, LayerSpec]]) -> MoEGroup:
    ids = sorted(experts)
    if ids != list(range(len(ids))):
        raise MoELayoutError(f"{prefix}: experts {shown(ids[:8])} are not numbered 0..E-1")
    first = experts[0]
    for e, projs in experts.items():
        missing = sorted({"w1", "w3", "w2"} - set(projs))
        if missing:
            raise MoELayoutError(f"{prefix}.{e}: no {', '.join(missing)} projection (gate, up "
                                 "and down are all needed)")
    w1, w2 = first["w1"], first["w2"]
    hidden, inter = w1.in_features, w1.out_features
    specs = [s for projs in experts.values() for s in projs.values()]
    for s in specs:  # vLLM: "All MoE projections need to have same quantization scheme"
        if (s.weight_args, s.input_args) != (w1.weight_args, w1.input_args):
            raise MoELayoutError(f"{s.name}: quantized unlike {w1.name}; vLLM requires one "
                                 "scheme for every MoE projection")
        want = (inter, hidden) if s is not None and not s.name.endswith(("down_proj", ".w2")) \
            else (hidden, inter)
        if (s.out_features, s.in_features) != want:
            raise MoELayoutError(f"{s.name}: [N {s.out_features}, K {s.in_features}]; expected "
                                 f"[N {want[0]}, K {want[1]}] as the first expert's")
    return MoEGroup(prefix, "per-expert", len(ids), hidden, inter, w1.format, w1.weight_args,
                    w1.input_args, w1.ct_format, w1.params_dtype,
                    tuple(s.name for s in specs))


def _fused(prefix: str, tensors: dict, fmt, params_dtype: str, scheme_of) -> MoEGroup:
    def find(*names):
        for n in names:
            for suffix in ("", "_packed"):
                if f"{prefix}.{n}{suffix}" in tensors:
                    return f"{prefix}.{n}{suffix}", tensors[f"{prefix}.{n}{suffix}"]
        return None, None

    n13, w13 = find("gate_up_proj", "w13_weight")
    n2, w2 = find("down_proj", "w2_weight")
    if w13 is None or w2 is None:
        raise MoELayoutError(f"{prefix}: a fused layout needs both gate_up (w13) and down (w2) "
                             "3-D tensors")
    e, two_i, h_cols = w13.shape
    packing = 8 if n13.endswith("_packed") else 1  # int4 packed 8 per int32 along K
    hidden, inter = h_cols * packing, two_i // 2
    if w2.shape[0] != e or w2.shape[1] != hidden or w2.shape[2] * packing != inter:
        raise MoELayoutError(f"{n2}: shape {list(w2.shape)} does not match {n13} "
                             f"{list(w13.shape)} ([E, H, I] against [E, 2I, H])")
    w, a, ct_format = scheme_of(prefix) if scheme_of is not None else (None, None, None)
    return MoEGroup(prefix, "fused", e, hidden, inter, fmt or CheckpointFormat.COMPRESSED_TENSORS,
                    w, a, ct_format, params_dtype, (n13, n2))


def moe_layer_of(group: MoEGroup, config: dict) -> MoELayer:
    """The group as vLLM builds it, top-k and activation from config.json."""
    if group.weight_args is None:
        raise MoELayoutError(f"{group.name}: unquantized experts; the MoE trace takes a "
                             "quantized layer")
    top_k = config.get("num_experts_per_tok", config.get("moe_topk", 2))
    act = config.get("hidden_act", "silu")
    routing = "grouped_topk" if str(config.get("model_type", "")).startswith("deepseek") \
        else "softmax_topk"
    if group.format is not CheckpointFormat.COMPRESSED_TENSORS:
        raise MoELayoutError(f"{group.name}: a {group.format.value} MoE layer: the MoE trace "
                             "follows compressed-tensors' get_moe_method only (GPTQ / AWQ MoE "
                             "methods are not modelled)")
    return MoELayer(weights=group.weight_args, input_activations=group.input_args,
                    num_experts=group.num_experts, top_k=top_k, hidden_size=group.hidden_size,
                    intermediate_size=group.intermediate_size, activation=act,
                    params_dtype=group.params_dtype,
                    format=group.ct_format or "pack-quantized", layer_name=group.name,
                    routing=routing)


def checkpoint_moe_layers(path) -> tuple[list[MoEGroup], dict]:
    """(the MoE layers of a checkpoint directory, its config.json): headers only."""
    from workbench.checkpoints.checkpoint import open_checkpoint
    from workbench.checkpoints.compressed_tensors import CTConfig

    ck = open_checkpoint(path)

    def scheme_of(prefix: str):
        if not isinstance(ck.parsed, CTConfig):
            return None, None, None
        g = ck.parsed.first_target(prefix + ".0.gate_proj") or ck.parsed.class_target("Linear")
        if g is None:
            return None, None, None
        return g.weights, g.input_activations, g.format or ck.parsed.format

    return moe_groups(ck.layers, ck.files.tensors, ck.format, ck.params_dtype, scheme_of), ck.config
