"""W4A16 paths against the float64 W4A16 reference, and the fallback's per-M choice."""
from __future__ import annotations

import pytest
import torch

from w4a8_kernels.cpu_w4a16 import (
    bf16_is_native, fallback_choice, prepare_w4a16, tinygemm_supports, w4a16_dequant,
    w4a16_dequant_bf16, w4a16_fallback, w4a16_tinygemm,
)
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError
from w4a8_kernels.reference import w4a16_reference

# bf16 output carries at most 2**-9 relative rounding per element.
BF16_REL = 2.0 ** -8


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("group_size", [-1, 32, 64, 128])
@pytest.mark.parametrize("asym", [False, True])
def test_dequant_path_equals_reference(layer_factory, x_factory, group_size, asym):
    w_q, scales, zeros = layer_factory(48, 256, group_size, asym=asym, scale_dtype=torch.bfloat16)
    x = x_factory(7, 256, dtype=torch.bfloat16)
    p = prepare_w4a16(w_q, scales, group_size, zeros)
    assert rel(w4a16_dequant(x, p), w4a16_reference(x, w_q, scales, group_size, zeros)) <= 1e-6


@pytest.mark.parametrize("group_size", [-1, 32, 128])
@pytest.mark.parametrize("asym", [False, True])
def test_tinygemm_within_bf16_rounding(layer_factory, x_factory, group_size, asym):
    w_q, scales, zeros = layer_factory(32, 256, group_size, asym=asym, scale_dtype=torch.bfloat16)
    x = x_factory(5, 256, dtype=torch.bfloat16)
    p = prepare_w4a16(w_q, scales, group_size, zeros)
    assert p.tinygemm_ok, p.tinygemm_why
    err = rel(w4a16_tinygemm(x, p), w4a16_reference(x, w_q, scales, group_size, zeros))
    # asymmetric: tinygemm's zero is a bf16 float, (8 - z) * s, rounded too
    assert err <= (BF16_REL if zeros is None else 4 * BF16_REL)


def test_tinygemm_refuses_unaligned_n_and_fallback_uses_dequant(layer_factory, x_factory):
    w_q, scales, _ = layer_factory(20, 64, 32)
    ok, why = tinygemm_supports(20, 64, 32)
    assert not ok and "N % 16" in why
    p = prepare_w4a16(w_q, scales, 32)
    x = x_factory(3, 64)
    with pytest.raises(KernelUnavailableError, match="N % 16"):
        w4a16_tinygemm(x, p)
    out = w4a16_fallback(x, p)
    # a dequantize path serves: in float32, or in bf16 where bf16 is native (an AMX host's
    # bf16 GEMM won there), whose activations round to bf16
    choice = fallback_choice(p, 3)
    paths = {"dequant": (w4a16_dequant, 1e-6)}
    if bf16_is_native()[0]:
        paths["dequant_bf16"] = (w4a16_dequant_bf16, 1e-2)
    assert choice in paths
    run, tol = paths[choice]
    assert torch.equal(out, run(x, p))
    assert rel(out, w4a16_reference(x, w_q, scales, 32)) <= tol


def test_fallback_tunes_each_m_bucket_once(layer_factory, x_factory):
    w_q, scales, _ = layer_factory(64, 256, 64)
    p = prepare_w4a16(w_q, scales, 64)
    for m in (1, 3, 4, 17):
        x = x_factory(m, 256, dtype=torch.bfloat16)
        out = w4a16_fallback(x, p)
        choice = fallback_choice(p, m)
        paths = {"tinygemm": w4a16_tinygemm, "dequant": w4a16_dequant}
        if bf16_is_native()[0]:  # bf16 GEMMs compete only where bf16 is not emulated
            paths["dequant_bf16"] = w4a16_dequant_bf16
        assert choice in paths
        assert torch.equal(out, paths[choice](x, p))
    assert sorted(p.choices) == [1, 4, 32]  # buckets: 1, 3->4, 4, 17->32
    assert all(set(t) == set(paths) for t in p.timings.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("case", ["finite", "overflowing_sum", "inf", "-inf", "nan", "inf_and_-inf"])
def test_all_finite_is_exact_where_the_cheap_sum_is_not(case, dtype):
    from w4a8_kernels._checks import all_finite

    big = torch.finfo(dtype).max
    x = torch.ones(7, 33, dtype=dtype)
    if case == "overflowing_sum":  # every term finite, the sum is not
        x[:, :] = big
    elif case == "inf_and_-inf":  # their sum is NaN, not Inf
        x[1, 2], x[5, 30] = float("inf"), float("-inf")
    elif case != "finite":
        x[3, 32] = float(case)
    assert all_finite(x) is (case in ("finite", "overflowing_sum"))


def test_fallback_names_a_non_finite_activation():
    w_q = torch.randint(-8, 8, (32, 256), dtype=torch.int8)
    p = prepare_w4a16(w_q, torch.rand(32, 2) + 0.1, 128)
    x = torch.randn(4, 256)
    x[2, 255] = float("nan")
    with pytest.raises(KernelInputError, match="Inf or NaN"):
        w4a16_fallback(x, p)


def test_every_path_keeps_its_rounding_at_k_2_22():
    """One float32 accumulator over K = 2**22 constant terms drifts (float32 GEMM 1.4e-2,
    tinygemm 5.8e-2 off); K blocks with float32 partials keep each path at its dtype's.

    One torch thread: the 1024 blocks are small ops, and on a loaded 2-core machine every
    op of a two-thread pool waits out a slice for its second thread (25 s instead of 2)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _check_k_2_22()
    finally:
        torch.set_num_threads(threads)


def _check_k_2_22():
    k, n, g = 2 ** 22, 16, 128
    w_q = torch.full((n, k), 7, dtype=torch.int8)  # every term the same sign: the worst case
    scales = torch.full((n, k // g), 0.01).to(torch.bfloat16)
    x = torch.ones(1, k)  # constant, and exact in bf16: tinygemm's cast loses nothing
    p = prepare_w4a16(w_q, scales, g)
    ref = w4a16_reference(x, w_q, scales, g)
    assert rel(w4a16_dequant(x, p), ref) <= 1e-5
    assert rel(w4a16_tinygemm(x, p), ref) <= BF16_REL
    assert rel(w4a16_fallback(x, p), ref) <= BF16_REL
    if bf16_is_native()[0]:
        assert rel(w4a16_dequant_bf16(x, p), ref) <= BF16_REL
