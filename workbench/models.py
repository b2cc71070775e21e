"""Real model shapes: the linear layers of public models, split for tensor parallelism.

Each preset holds facts from the model's public `config.json` (hidden_size,
intermediate_size, num_attention_heads, num_key_value_heads, head_dim, and the MoE or
MLA sizes where the model has them). `partitions(model, tp)` gives the per-rank GEMM
shapes the way vLLM shards them:

- qkv (QKVParallelLinear, column-parallel): K = hidden, N = (heads / tp + 2 * kv) *
  head_dim, where kv = kv_heads / tp, or 1 replicated head when kv_heads < tp;
- o (RowParallelLinear): K = heads * head_dim / tp, N = hidden;
- gate_up (MergedColumnParallelLinear): K = hidden, N = 2 * intermediate / tp;
- down (RowParallelLinear): K = intermediate / tp, N = hidden;
- MoE experts shard their own intermediate size the same way; MLA projections
  (DeepSeek-V2) are listed with their own widths.

`alignment_rules(rules)` are the divisibility rules the dispatch rule set's kernels (and torch's CPU
int4 kernel) check, read from the kernel classes; `partition_table` says which ones each
shard breaks.
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Callable

from workbench.errors import InvalidInputError, UnknownPresetError
from workbench.limits import MAX_DIM, check_int, shown

if TYPE_CHECKING:
    from workbench.dispatch.versions import RuleSet

__all__ = [
    "ModelShape", "MODELS", "get_model", "Partition", "partitions", "alignment_rules",
    "AlignmentRule", "broken_rules", "partition_table", "TP_SIZES",
]

TP_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class ModelShape:
    """Public config facts of one model (decoder layer linears only)."""

    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    source: str  # the config it comes from
    experts: int = 0  # routed experts (0: dense MLP)
    expert_intermediate: int = 0
    shared_experts: int = 0
    # MLA (DeepSeek-V2): low-rank KV with a separate rope part
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    def __post_init__(self) -> None:
        for f in ("hidden", "intermediate", "heads", "kv_heads", "head_dim", "layers"):
            if getattr(self, f) <= 0:
                raise InvalidInputError(f"model {self.name}: {f} must be positive")


def _hf(repo: str) -> str:
    return f"config.json of {repo}"


MODELS: dict[str, ModelShape] = {m.name: m for m in (
    ModelShape("Llama-3.1-8B", 4096, 14336, 32, 8, 128, 32, _hf("meta-llama/Llama-3.1-8B")),
    ModelShape("Llama-3.1-70B", 8192, 28672, 64, 8, 128, 80, _hf("meta-llama/Llama-3.1-70B")),
    ModelShape("Llama-3.2-3B", 3072, 8192, 24, 8, 128, 28, _hf("meta-llama/Llama-3.2-3B")),
    ModelShape("Qwen2.5-7B", 3584, 18944, 28, 4, 128, 28, _hf("Qwen/Qwen2.5-7B")),
    ModelShape("Qwen2.5-14B", 5120, 13824, 40, 8, 128, 48, _hf("Qwen/Qwen2.5-14B")),
    ModelShape("Qwen2.5-32B", 5120, 27648, 40, 8, 128, 64, _hf("Qwen/Qwen2.5-32B")),
    ModelShape("Qwen2.5-72B", 8192, 29568, 64, 8, 128, 80, _hf("Qwen/Qwen2.5-72B")),
    ModelShape("Mistral-7B", 4096, 14336, 32, 8, 128, 32, _hf("mistralai/Mistral-7B-v0.3")),
    ModelShape("Mistral-Nemo-12B", 5120, 14336, 32, 8, 128, 40,
               _hf("mistralai/Mistral-Nemo-Base-2407")),
    ModelShape("Mixtral-8x7B", 4096, 14336, 32, 8, 128, 32, _hf("mistralai/Mixtral-8x7B-v0.1"),
               experts=8, expert_intermediate=14336),
    ModelShape("Gemma-2-9B", 3584, 14336, 16, 8, 256, 42, _hf("google/gemma-2-9b")),
    ModelShape("Phi-3-mini", 3072, 8192, 32, 32, 96, 32, _hf("microsoft/Phi-3-mini-4k-instruct")),
    ModelShape("DeepSeek-V2-Lite", 2048, 10944, 16, 16, 128, 27, _hf("deepseek-ai/DeepSeek-V2-Lite"),
               experts=64, expert_intermediate=1408, shared_experts=2, kv_lora_rank=512,
               qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
)}


def get_model(name: str) -> ModelShape:
    if not isinstance(name, str):
        raise UnknownPresetError(f"model preset: expected a name, got {shown(name)}; known: "
                                 f"{', '.join(MODELS)}")
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownPresetError(f"model preset {name!r} does not exist; known: "
                                 f"{', '.join(MODELS)}") from None


@dataclass(frozen=True)
class Partition:
    """One linear layer's per-rank GEMM: x [M, K] @ W[N, K]^T."""

    model: str
    layer: str
    tp: int
    k: int  # in_features per rank
    n: int  # out_features per rank
    parallel: str  # "column", "row" or "replicated"
    note: str = ""


def _split(total: int, tp: int, what: str, model: str) -> int:
    if total % tp:
        raise InvalidInputError(f"{model}: {what} = {total} is not divisible by tensor parallel "
                                f"size {tp}")
    return total // tp


def partitions(model: ModelShape | str, tp: int) -> list[Partition]:
    """Per-rank shapes of the decoder's quantized linears at tensor parallel size tp.

    Raises InvalidInputError where vLLM itself refuses the split (heads not divisible).
    """
    m = model if isinstance(model, ModelShape) else get_model(model)
    check_int("tp", tp, 1, 1024)
    if tp not in TP_SIZES and tp & (tp - 1):
        raise InvalidInputError(f"tp: {tp}; accepted: a power of two such as {TP_SIZES}")
    heads = _split(m.heads, tp, "num_attention_heads", m.name)
    out: list[Partition] = []
    if m.kv_lora_rank:  # MLA
        q_dim = m.qk_nope_head_dim + m.qk_rope_head_dim
        out += [
            Partition(m.name, "q_proj", tp, m.hidden, heads * q_dim, "column"),
            Partition(m.name, "kv_a_proj_with_mqa", tp, m.hidden,
                      m.kv_lora_rank + m.qk_rope_head_dim, "replicated"),
            Partition(m.name, "kv_b_proj", tp, m.kv_lora_rank,
                      heads * (m.qk_nope_head_dim + m.v_head_dim), "column"),
            Partition(m.name, "o_proj", tp, heads * m.v_head_dim, m.hidden, "row"),
        ]
    else:
        if m.kv_heads >= tp:
            kv, note = _split(m.kv_heads, tp, "num_key_value_heads", m.name), ""
        else:
            kv, note = 1, f"{m.kv_heads} KV heads replicated over {tp} ranks"
        out += [
            Partition(m.name, "qkv_proj", tp, m.hidden, (heads + 2 * kv) * m.head_dim, "column", note),
            Partition(m.name, "o_proj", tp, heads * m.head_dim, m.hidden, "row"),
        ]
    if m.intermediate and (not m.experts or m.shared_experts or m.kv_lora_rank):
        # dense MLP (DeepSeek-V2-Lite's first layer is dense)
        inter = _split(m.intermediate, tp, "intermediate_size", m.name)
        out += [
            Partition(m.name, "gate_up_proj", tp, m.hidden, 2 * inter, "column"),
            Partition(m.name, "down_proj", tp, inter, m.hidden, "row"),
        ]
    if m.experts:
        e_inter = _split(m.expert_intermediate, tp, "moe_intermediate_size", m.name)
        out += [
            Partition(m.name, "experts.w13", tp, m.hidden, 2 * e_inter, "column",
                      f"each of {m.experts} experts"),
            Partition(m.name, "experts.w2", tp, e_inter, m.hidden, "row",
                      f"each of {m.experts} experts"),
        ]
    if m.shared_experts:
        s_inter = _split(m.expert_intermediate * m.shared_experts, tp, "shared experts size", m.name)
        out += [
            Partition(m.name, "shared_experts.gate_up_proj", tp, m.hidden, 2 * s_inter, "column"),
            Partition(m.name, "shared_experts.down_proj", tp, s_inter, m.hidden, "row"),
        ]
    return out


@dataclass(frozen=True)
class AlignmentRule:
    name: str
    who: str  # the kernel (or op) that checks it
    test: Callable[[int, int, int], bool] = field(compare=False)  # (K, N, g) -> holds

    def holds(self, k: int, n: int, group_size: int) -> bool:
        g = k if group_size in (-1, 0) else group_size
        return self.test(k, n, g)


def rule_name(k: int, n: int) -> str:
    """"K, N % 8", "N % 16", "K % 64, N % 128": the label of a (K, N) multiple rule."""
    if k == n:
        return f"K, N % {k}"
    if k == 1 or n == 1:
        return f"N % {n}" if k == 1 else f"K % {k}"
    return f"K % {k}, N % {n}"


@functools.lru_cache(maxsize=8)  # a RuleSet hashes by identity: one table per release
def _alignment_rules(rules: "RuleSet") -> tuple[AlignmentRule, ...]:
    multiples = [*rules.SHAPE_MULTIPLES, TORCH_INT4PACK]
    who: dict[tuple[int, int], list[str]] = {}
    for name, k, n in multiples:
        who.setdefault((k, n), []).append(name)
    out = [AlignmentRule("group divides K", "verify_group_size_divides_partition (every scheme)",
                         lambda k, n, g: k % g == 0)]
    for (mk, mn), names in sorted(who.items(), key=lambda kv: (max(kv[0]), kv[0][0] * kv[0][1])):
        out.append(AlignmentRule(rule_name(mk, mn), "; ".join(names),
                                 lambda k, n, g, mk=mk, mn=mn: k % mk == 0 and n % mn == 0))
    return tuple(out)


def alignment_rules(rules: "RuleSet | None" = None) -> tuple[AlignmentRule, ...]:
    """A rule set's partition multiples (None: the pinned one's), one rule per (K, N) pair
    naming every checker, after the group-size rule every scheme checks."""
    from workbench.dispatch.versions import pinned

    return _alignment_rules(rules or pinned())


# torch's `_convert_weight_to_int4pack_for_cpu` (the W4A16 fallback here), not a vLLM rule.
TORCH_INT4PACK = ("torch _convert_weight_to_int4pack_for_cpu", 1, 16)


def broken_rules(k: int, n: int, group_size: int = 128, rules: "RuleSet | None" = None) -> list[str]:
    """Names of the alignment rules a K x N shard breaks (with this group size)."""
    check_int("k", k, 1, MAX_DIM), check_int("n", n, 1, MAX_DIM)
    check_int("group_size", group_size, 1, MAX_DIM, also=(-1, 0))  # 0: channelwise, as holds()
    return [r.name for r in alignment_rules(rules) if not r.holds(k, n, group_size)]


def partition_table(models: list[str] | None = None, tp_sizes: tuple[int, ...] = TP_SIZES,
                    group_size: int = 128) -> list[dict]:
    """One row per (model, tp, layer): shapes and the rules broken; refused splits too."""
    if isinstance(models, str):  # a bare name would be walked letter by letter
        raise InvalidInputError(f"models: {shown(models)}; accepted: a list of model names")
    names = list(MODELS) if models is None else [get_model(name).name for name in models]
    for tp in tp_sizes:
        check_int("tp", tp, 1, 1024)
    rows = []
    for name in names:
        for tp in tp_sizes:
            try:
                parts = partitions(name, tp)
            except InvalidInputError as exc:
                rows.append({"model": name, "tp": tp, "layer": None, "k": None, "n": None,
                             "parallel": None, "breaks": [], "refused": str(exc), "note": ""})
                continue
            for p in parts:
                rows.append({**asdict(p), "breaks": broken_rules(p.k, p.n, group_size),
                             "refused": ""})
    return rows
