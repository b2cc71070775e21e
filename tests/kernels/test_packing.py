from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.packing import (
    awq_to_gptq, ct_to_gptq, gptq_to_awq, gptq_to_ct, pack_int4_awq, pack_int4_awq_zeros,
    pack_int4_ct, pack_int4_gptq, pack_int4_gptq_zeros, pack_int4_pairs_uint8,
    signed_to_unsigned, unpack_int4_awq, unpack_int4_awq_zeros, unpack_int4_ct,
    unpack_int4_gptq, unpack_int4_gptq_zeros,
)


def test_ct_known_word():
    # columns -8..-1 shift to nibbles 0..7, low nibble first: 0x76543210
    w = torch.arange(-8, 0, dtype=torch.int8).reshape(1, 8)
    assert pack_int4_ct(w).tolist() == [[0x76543210]]
    # 7,6,...,0 -> nibbles 15..8 -> 0x89ABCDEF, which wraps to a negative int32
    w2 = torch.arange(7, -1, -1, dtype=torch.int8).reshape(1, 8)
    assert pack_int4_ct(w2).item() == 0x89ABCDEF - (1 << 32)


def test_ct_ragged_k_pads_with_zero_nibbles():
    w = torch.full((2, 3), 7, dtype=torch.int8)  # nibble 15
    p = pack_int4_ct(w)
    assert p.shape == (2, 1) and p[0].item() == 0xFFF
    assert torch.equal(unpack_int4_ct(p, 3), w)


def test_gptq_and_awq_known_words():
    u = torch.arange(8, dtype=torch.int8).reshape(8, 1).repeat(1, 8)  # u[n, k] = n
    # GPTQ: along K, row 8j+i in nibble i; column n of u^T is constant n
    assert pack_int4_gptq(u.t().contiguous())[0].tolist() == [0x76543210] * 8
    # AWQ: along N; slot s holds column AWQ_ORDER[s] -> nibbles 0,2,4,6,1,3,5,7
    assert pack_int4_awq(u)[:, 0].tolist() == [0x75316420] * 8


def test_dynamic4bit_byte_layout():
    w = torch.tensor([[-8, 7, 0, -1]], dtype=torch.int8)
    # even column low nibble, +8: (0 | 15 << 4), (8 | 7 << 4)
    assert pack_int4_pairs_uint8(w).tolist() == [[0xF0, 0x78]]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_round_trips_all_layouts(n8, k8, seed):
    gen = torch.Generator().manual_seed(seed)
    n, k = 8 * n8, 8 * k8
    w = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    u = signed_to_unsigned(w)
    assert torch.equal(unpack_int4_ct(pack_int4_ct(w), k), w)
    q_g = pack_int4_gptq(u)
    assert q_g.shape == (k // 8, n) and torch.equal(unpack_int4_gptq(q_g), u)
    q_a = pack_int4_awq(u)
    assert q_a.shape == (k, n // 8) and torch.equal(unpack_int4_awq(q_a), u)
    assert torch.equal(gptq_to_awq(q_g), q_a) and torch.equal(awq_to_gptq(q_a), q_g)
    p_ct = pack_int4_ct(w)
    assert torch.equal(ct_to_gptq(p_ct, k), q_g) and torch.equal(gptq_to_ct(q_g), p_ct)
    z = torch.randint(0, 16, (n, 3), generator=gen, dtype=torch.int8)
    assert torch.equal(unpack_int4_gptq_zeros(pack_int4_gptq_zeros(z)), z)
    assert torch.equal(unpack_int4_awq_zeros(pack_int4_awq_zeros(z)), z)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 30))
def test_ct_round_trip_any_k(n, k):
    w = torch.randint(-8, 8, (n, k), generator=torch.Generator().manual_seed(n * 97 + k),
                      dtype=torch.int8)
    assert torch.equal(unpack_int4_ct(pack_int4_ct(w), k), w)


def test_gptq_awq_match_vllm_cpu_repack_order():
    # vLLM CPUWNA16 repacks GPTQ -> AWQ by taking the unpacked [K, N] weight, viewing
    # [K, N/8, 8] and indexing (0, 2, 4, 6, 1, 3, 5, 7) before packing along N.
    gen = torch.Generator().manual_seed(5)
    u = torch.randint(0, 16, (16, 8), generator=gen, dtype=torch.int8)  # [N, K]
    kn = u.t().reshape(8, 2, 8)[:, :, [0, 2, 4, 6, 1, 3, 5, 7]].reshape(8, 16).to(torch.int64)
    words = (kn.reshape(8, 2, 8) << (torch.arange(8) * 4)).sum(-1)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    assert torch.equal(pack_int4_awq(u), words)


def test_packing_rejects_bad_input():
    with pytest.raises(KernelInputError, match=r"\[0, 15\]"):
        pack_int4_ct(torch.full((1, 8), 8, dtype=torch.int8))
    with pytest.raises(KernelInputError, match="multiple of 8"):
        pack_int4_gptq(torch.zeros(4, 12, dtype=torch.int8))
    with pytest.raises(KernelInputError, match="multiple of 8"):
        pack_int4_awq(torch.zeros(4, 16, dtype=torch.int8))
    with pytest.raises(KernelInputError, match="int32"):
        unpack_int4_gptq(torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(KernelInputError, match="does not fit"):
        unpack_int4_ct(torch.zeros(2, 2, dtype=torch.int32), 40)
