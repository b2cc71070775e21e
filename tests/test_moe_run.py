"""The CPU MoE forward held to float64: each path to the reference of its own arithmetic."""
from __future__ import annotations

import pytest
import torch

from w4a8_kernels import reference
from workbench.errors import InvalidInputError
from workbench.moe_run import (OWN_REFERENCE, dyn_quant_available, kleidi_pack, route,
                               run_path, run_reference, prepare, sweep, synthetic_moe,
                               tokens_per_expert)
from workbench.synthetic import quantize_rtn

HAS_DYN_QUANT = dyn_quant_available()[0]
# the native kernel's int32 sums are exact; float32 vs float64 intermediates can flip one int8
# code of the second GEMM's input at a rounding tie (about 1e-3 relative), else ~1e-7
NATIVE_REL = 2e-3
DYN_QUANT_REL = 1e-6  # torch's op against its own arithmetic in float64
FALLBACK_REL = 2 * 2.0 ** -8  # two chained GEMMs on bf16 activations (tinygemm / bf16 dequant)


def test_routing_is_softmax_top_k_renormalized():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [3.0, 0.0, 0.0, 0.0]])
    w, ids = route(logits, 2)
    assert ids[0].tolist() == [3, 2] and ids[1, 0].item() == 0
    assert torch.allclose(w.sum(dim=1), torch.ones(2))
    p = torch.softmax(logits[0], 0)
    assert w[0, 0].item() == pytest.approx((p[3] / (p[3] + p[2])).item())
    assert sum(tokens_per_expert(ids, 4)) == 4


@pytest.mark.parametrize("group,activation", [(32, "silu"), (-1, "gelu_tanh"), (64, "silu")])
def test_every_path_matches_its_float64_reference_at_awkward_sizes(group, activation):
    # 3 experts, hidden 192, intermediate 64: no power-of-two expert count, K not a multiple of 128
    mw = synthetic_moe(3, 192, 64, group, seed=1)
    rows = sweep(mw, tokens=(1, 5), top_ks=(1, 3), activation=activation)
    assert {r.top_k for r in rows} == {1, 3}
    for r in rows:
        assert sum(r.tokens_per_expert) == r.tokens * r.top_k
        e = r.errors
        assert e["w4a8_native"]["w4a8"]["rel_frobenius"] <= NATIVE_REL, r
        assert e["w4a16_fallback"]["w4a16"]["rel_frobenius"] <= FALLBACK_REL, r
        if HAS_DYN_QUANT:
            assert e["vllm_dyn_quant"]["w4a8_asym"]["rel_frobenius"] <= DYN_QUANT_REL, r
        # int8 activations cost accuracy against the float result: more than the kernels' own
        assert e["w4a8_native"]["w4a16"]["rel_frobenius"] > e["w4a8_native"]["w4a8"]["rel_frobenius"]


@pytest.mark.skipif(not HAS_DYN_QUANT, reason=dyn_quant_available()[1])
@pytest.mark.parametrize("group", [32, 128, -1])
def test_dyn_quant_op_is_asymmetric_per_row_int8(group):
    torch.manual_seed(0)
    k, n = 256, 48
    q, s, _ = quantize_rtn(torch.randn(n, k), group_size=group,
                           scale_dtype=torch.float32 if group == -1 else torch.bfloat16)
    x = torch.randn(7, k) * 3
    g = k if group == -1 else group
    out = torch.ops.aten._dyn_quant_matmul_4bit(x, kleidi_pack(q, s, group), g, k, n)
    ref = reference.w4a8_asym_reference(x, q, s, g)
    assert ((out.double() - ref).norm() / ref.norm()).item() <= DYN_QUANT_REL
    sym = reference.w4a8_reference(x, q, s, g)  # the symmetric scheme is measurably not it
    assert ((out.double() - sym).norm() / sym.norm()).item() > 100 * DYN_QUANT_REL


def test_an_expert_without_tokens_contributes_nothing():
    mw = synthetic_moe(4, 64, 32, 32, seed=2)
    x = torch.randn(2, 64)
    w, ids = torch.ones(2, 1), torch.tensor([[1], [1]])
    prep = prepare(mw, ("w4a8_native",))
    out = run_path("w4a8_native", prep, x, w, ids, "silu")
    ref = run_reference("w4a8", mw, x, w, ids, "silu")
    assert ((out.double() - ref).norm() / ref.norm()).item() <= NATIVE_REL
    assert OWN_REFERENCE["w4a8_native"] == "w4a8"


def test_bad_sizes_are_named():
    with pytest.raises(InvalidInputError, match="group_size"):
        synthetic_moe(2, 100, 64, 32)
    with pytest.raises(InvalidInputError, match="top_k"):
        sweep(synthetic_moe(2, 64, 32, 32), tokens=(1,), top_ks=(3,))


def test_timing_reports_ratios_to_the_fallback_not_a_speed_claim():
    from workbench.moe_run import time_paths
    t = time_paths(synthetic_moe(2, 64, 32, 32, seed=3), tokens=4, top_k=2, rounds=2)
    assert t.ratio_to_w4a16["w4a16_fallback"] == (1.0, 1.0, 1.0)
    assert set(t.median_ms) == set(t.ratio_to_w4a16) and all(v > 0 for v in t.median_ms.values())
    assert isinstance(t.loaded, bool) and "others_cores" in t.load
    with pytest.raises(InvalidInputError, match="reference"):
        time_paths(synthetic_moe(2, 64, 32, 32), 4, 2, paths=("w4a8_native",))
