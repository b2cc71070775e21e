from __future__ import annotations

import pytest

from workbench.errors import InvalidInputError, UnknownPresetError
from workbench.models import MODELS, broken_rules, get_model, partition_table, partitions


def shapes(model, tp):
    return {p.layer: (p.k, p.n) for p in partitions(model, tp)}


def test_at_least_a_dozen_models_with_public_facts():
    assert len(MODELS) >= 12
    llama = get_model("Llama-3.1-8B")
    assert (llama.hidden, llama.intermediate, llama.heads, llama.kv_heads, llama.head_dim) == \
        (4096, 14336, 32, 8, 128)


def test_llama_8b_partitions_hand_computed():
    assert shapes("Llama-3.1-8B", 1) == {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096),
                                         "gate_up_proj": (4096, 28672), "down_proj": (14336, 4096)}
    assert shapes("Llama-3.1-8B", 8) == {"qkv_proj": (4096, 768), "o_proj": (512, 4096),
                                         "gate_up_proj": (4096, 3584), "down_proj": (1792, 4096)}


def test_kv_heads_replicated_and_refused_splits():
    # Qwen2.5-7B: 4 KV heads at TP 8 are replicated, but 28 query heads do not split by 8
    q7 = shapes("Qwen2.5-7B", 4)
    assert q7["qkv_proj"] == (3584, (7 + 2 * 1) * 128) and q7["down_proj"] == (4736, 3584)
    with pytest.raises(InvalidInputError, match="28 is not divisible by tensor parallel size 8"):
        partitions("Qwen2.5-7B", 8)
    p = [p for p in partitions("Llama-3.1-70B", 8) if p.layer == "qkv_proj"][0]
    assert p.n == (8 + 2 * 1) * 128 and p.note == ""


def test_gemma_head_dim_and_phi_and_mla_shapes():
    assert shapes("Gemma-2-9B", 1)["o_proj"] == (16 * 256, 3584)  # heads*head_dim != hidden
    assert shapes("Phi-3-mini", 1)["qkv_proj"] == (3072, 9216)
    ds = shapes("DeepSeek-V2-Lite", 1)
    assert ds["q_proj"] == (2048, 16 * 192) and ds["kv_a_proj_with_mqa"] == (2048, 576)
    assert ds["kv_b_proj"] == (512, 16 * 256) and ds["experts.w2"] == (1408, 2048)
    assert ds["down_proj"] == (10944, 2048)


def test_alignment_rules_flag_real_misalignments():
    # Qwen2.5-72B down_proj at TP 8: K = 29568 / 8 = 3696, not a multiple of 128 or 64
    down = [p for p in partitions("Qwen2.5-72B", 8) if p.layer == "down_proj"][0]
    assert down.k == 3696
    assert set(broken_rules(down.k, down.n, 128)) >= {"group divides K", "K % 64, N % 128",
                                                      "K, N % 128"}
    assert broken_rules(4096, 4096, 128) == []
    assert "N % 16" in broken_rules(4096, 4104, 128) and "K, N % 8" not in broken_rules(4096, 4104, 128)


def test_partition_table_rows_and_unknown_model():
    rows = partition_table(["Qwen2.5-7B"], (1, 8))
    assert any(r["refused"] for r in rows if r["tp"] == 8)
    assert all(r["k"] and r["n"] for r in rows if r["tp"] == 1)
    with pytest.raises(UnknownPresetError, match="known: Llama-3.1-8B"):
        get_model("GPT-5")
