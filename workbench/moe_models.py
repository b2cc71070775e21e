"""The MoE layers of public mixture-of-experts models, from their config.json, as MoE layers.

Each preset holds the facts of the model's public `config.json` that size its fused-MoE
layers: hidden size, the experts' own intermediate size, routed experts, experts per token,
shared experts, how many decoder layers are MoE, the activation and the routing. A layer at
tensor parallel size tp keeps every expert and splits the intermediate size (vLLM's TP MoE,
`FusedMoEConfig.intermediate_size_per_partition`).
"""
from __future__ import annotations

from dataclasses import dataclass

from workbench.dispatch.moe.layer import ROUTINGS, MoELayer
from workbench.errors import InvalidInputError, UnknownPresetError
from workbench.quant_args import QuantArgs

__all__ = ["MoEShape", "MOE_MODELS", "get_moe_model", "moe_layer", "SCHEMES", "ROUTINGS"]

# How a model routes: "softmax_topk" is vLLM's default router (softmax, top-k, renormalized
# where the config says so), the one the MoE trace models; "grouped_topk" (DeepSeek-V3's
# sigmoid scores, expert groups and a correction bias) reaches the experts' routing-method
# gate, which the trace does not model.


@dataclass(frozen=True)
class MoEShape:
    name: str
    hidden: int
    expert_intermediate: int
    experts: int
    top_k: int
    moe_layers: int  # decoder layers whose MLP is MoE
    layers: int
    source: str
    shared_experts: int = 0
    activation: str = "silu"
    routing: str = "softmax_topk"


def _hf(repo: str) -> str:
    return f"config.json of {repo}"


MOE_MODELS: dict[str, MoEShape] = {m.name: m for m in (
    # hidden_size 2048, moe_intermediate_size 768, num_experts 128, num_experts_per_tok 8,
    # 48 layers, decoder_sparse_step 1 (every layer MoE), norm_topk_prob true
    MoEShape("Qwen3-30B-A3B", 2048, 768, 128, 8, 48, 48, _hf("Qwen/Qwen3-30B-A3B")),
    # hidden_size 4096, intermediate_size 14336, num_local_experts 8, num_experts_per_tok 2
    MoEShape("Mixtral-8x7B", 4096, 14336, 8, 2, 32, 32, _hf("mistralai/Mixtral-8x7B-v0.1")),
    # hidden_size 7168, moe_intermediate_size 2048, n_routed_experts 256, num_experts_per_tok 8,
    # n_shared_experts 1, 61 layers of which first_k_dense_replace 3 are dense, sigmoid
    # scoring with n_group 8 / topk_group 4
    MoEShape("DeepSeek-V3", 7168, 2048, 256, 8, 58, 61, _hf("deepseek-ai/DeepSeek-V3"),
             shared_experts=1, routing="grouped_topk"),
    # hidden_size 2048, moe_intermediate_size 1408, n_routed_experts 64, num_experts_per_tok 6,
    # 27 layers, first_k_dense_replace 1; vLLM builds every DeepSeek-V2 MoE with
    # use_grouped_topk=True (models/deepseek_v2.py:383)
    MoEShape("DeepSeek-V2-Lite", 2048, 1408, 64, 6, 26, 27, _hf("deepseek-ai/DeepSeek-V2-Lite"),
             shared_experts=2, routing="grouped_topk"),
)}

_W4 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}
_TOKEN = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
# The experts' schemes the presets are costed and traced with (compressed-tensors args).
SCHEMES = {
    "w4a8-int8": (_W4, _TOKEN),
    "w4a16": (_W4, None),
    "w4a8-fp8": (_W4, {**_TOKEN, "type": "float"}),
}


def get_moe_model(name: str) -> MoEShape:
    if not isinstance(name, str) or name not in MOE_MODELS:
        raise UnknownPresetError(f"MoE model preset {name!r} does not exist; known: "
                                 f"{', '.join(MOE_MODELS)}")
    return MOE_MODELS[name]


def moe_layer(model: MoEShape | str, scheme: str = "w4a8-int8", tp: int = 1,
              params_dtype: str = "bfloat16") -> MoELayer:
    """One MoE layer of `model` per TP rank, quantized with `scheme` (SCHEMES)."""
    m = model if isinstance(model, MoEShape) else get_moe_model(model)
    if scheme not in SCHEMES:
        raise InvalidInputError(f"scheme: {scheme!r}; accepted: {', '.join(SCHEMES)}")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or m.expert_intermediate % tp:
        raise InvalidInputError(f"tp: {tp!r}; accepted: a positive divisor of {m.name}'s expert "
                                f"intermediate size {m.expert_intermediate}")
    w, a = SCHEMES[scheme]
    return MoELayer(weights=QuantArgs.from_json(dict(w), "scheme.weights"),
                    input_activations=None if a is None
                    else QuantArgs.from_json(dict(a), "scheme.input_activations"),
                    num_experts=m.experts, top_k=m.top_k, hidden_size=m.hidden,
                    intermediate_size=m.expert_intermediate // tp, activation=m.activation,
                    params_dtype=params_dtype, layer_name="model.layers.0.mlp.experts",
                    routing=m.routing)
