"""Every CPU engine, forced one by one, agrees with the float64 reference on awkward inputs.

The W4A8 native path picks its integer engine by a per-process timing race, so a bug
in one engine comes and goes with the machine's load. Here each engine is forced
(`prepare_w4a8(engine=...)`, each W4A16 path by its own entry point) and compared with
`w4a8_kernels.reference` over shapes and values drawn by hypothesis: K not a multiple of
4 or 8 (every odd K the weight format accepts), per-channel and grouped, symmetric and
asymmetric, weights pinned at -8 / 7 (0 / 15 with zeros), activations at one magnitude
(every code +-127), tiny and huge scales, negative scales, strided activations.

The tolerance is relative to the sum of absolute terms of each output, so it holds for
outputs that cancel to near zero as well as for large ones.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native
from w4a8_kernels.cpu_dense import dense, prepare_dense
from w4a8_kernels.cpu_w4a16 import (bf16_is_native, prepare_w4a16, w4a16_dequant, w4a16_dequant_bf16,
                                    w4a16_fallback, w4a16_tinygemm)
from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.int8_gemm import Int8Engine, engine_available
from w4a8_kernels.quant import quantize_per_token_int8
from w4a8_kernels.reference import w4a16_reference, w4a8_reference

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def problems(draw):
    per_channel = draw(st.booleans())
    if per_channel:
        k = draw(st.one_of(st.integers(1, 40), st.integers(41, 700)))
        g = k
    else:
        g = draw(st.sampled_from([3, 4, 5, 7, 8, 12, 16, 32, 33, 64, 128]))
        k = g * draw(st.integers(1, 4))
    n = draw(st.integers(1, 41))
    m = draw(st.integers(0, 9))
    asym = draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    wkind = draw(st.sampled_from(["random", "low", "high"]))
    lo, hi = (0, 15) if asym else (-8, 7)
    if wkind == "random":
        w_q = torch.randint(lo, hi + 1, (n, k), generator=gen, dtype=torch.int8)
    else:
        w_q = torch.full((n, k), lo if wkind == "low" else hi, dtype=torch.int8)
    zeros = None
    if asym:
        zeros = torch.randint(0, 16, (n, k // g), generator=gen, dtype=torch.int8)
        if draw(st.booleans()):
            zeros.fill_(15 if wkind == "low" else 0)  # |w - z| = 15: the widest products
    exp = draw(st.sampled_from([-20, -3, 0, 10]))
    scales = (torch.rand(n, k // g, generator=gen) + 0.05) * 10.0 ** exp
    if draw(st.booleans()):
        scales = scales * torch.where(torch.rand(n, k // g, generator=gen) < 0.3, -1.0, 1.0)
    scales = scales.to(draw(st.sampled_from([torch.float32, torch.bfloat16])))
    xkind = draw(st.sampled_from(["randn", "one_magnitude", "tiny", "huge"]))
    layout = draw(st.sampled_from(["contiguous", "transposed", "strided"]))
    x_dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.float64]))
    x = torch.randn(m, k, generator=gen, dtype=torch.float64)
    if xkind == "one_magnitude":  # every code is +-127
        x = torch.where(x < 0, -3.0, 3.0).to(torch.float64)
    elif xkind == "tiny":
        x = x * 1e-12  # below vLLM's amax floor of 1e-10
    elif xkind == "huge":
        x = x * (1e4 if x_dtype == torch.float16 else 1e15)
    x = x.to(x_dtype)
    if layout == "transposed":
        x = x.t().contiguous().t()
    elif layout == "strided":
        x = torch.repeat_interleave(x, 2, dim=1)[:, ::2]
    return x, w_q, scales, g, zeros


def _bound(x, w_q, scales, g, zeros) -> torch.Tensor:
    """Per-output sum of |terms| of the W4A8 dot: the scale every error is measured in."""
    x_q, x_scale = quantize_per_token_int8(x)
    n, k = w_q.shape
    w = w_q.double()
    if zeros is not None:
        w = (w.view(n, k // g, g) - zeros.double().unsqueeze(-1)).reshape(n, k)
    w = (w.abs().view(n, k // g, g) * scales.double().abs().unsqueeze(-1)).reshape(n, k)
    return (x_q.double().abs() @ w.t()) * x_scale.double()


def _bound16(x, w_q, scales, g, zeros) -> torch.Tensor:
    n, k = w_q.shape
    w = w_q.double()
    if zeros is not None:
        w = (w.view(n, k // g, g) - zeros.double().unsqueeze(-1)).reshape(n, k)
    w = (w.abs().view(n, k // g, g) * scales.double().abs().unsqueeze(-1)).reshape(n, k)
    return x.double().abs() @ w.t()


def _assert_close(out, ref, bound, rtol, what):
    assert out.dtype == torch.float32 and out.shape == ref.shape, (what, out.dtype, out.shape)
    # float32's smallest normal, times the terms' count: underflow of the tiniest scales
    err = (out.double() - ref).abs()
    worst = (err - rtol * bound).max().item() if err.numel() else 0.0
    assert worst <= 1e-36, f"{what}: error {err.max().item():.3g} vs bound {bound.max().item():.3g}"


def _skip_unless_available(engine: Int8Engine) -> None:
    ok, why = engine_available(engine)
    if not ok:
        pytest.skip(f"{engine.value} cannot run here: {why}")


@pytest.mark.parametrize("engine", list(Int8Engine), ids=lambda e: e.value)
@SETTINGS
@given(problem=problems())
def test_each_w4a8_engine_matches_reference(engine, problem):
    _skip_unless_available(engine)
    x, w_q, scales, g, zeros = problem
    try:
        prepared = prepare_w4a8(w_q, scales, g, zeros, engine=engine)
    except KernelInputError as exc:  # a stated refusal is fine, a wrong result is not
        assert engine is Int8Engine.AVX2_U8S8 and g % 4 and g != w_q.shape[1], exc
        return
    assert prepared.engine is engine
    out = w4a8_native(x, prepared)
    ref = w4a8_reference(x, w_q, scales, g, zeros)
    _assert_close(out, ref, _bound(x, w_q, scales, g, zeros), 2e-6, engine.value)
    assert bool((scales < 0).any()) == any("negative" in n for n in prepared.notes)


def _dense(x, prepared):
    # the dense baseline on the dequantized weight: judged by the same W4A16 reference
    n, k, g = prepared.n, prepared.k, prepared.group_size
    w = prepared.w_centered.double().view(n, k // g, g) * prepared.scales.double().unsqueeze(-1)
    return dense(x, prepare_dense(w.reshape(n, k)))


W4A16_PATHS = {"tinygemm": (w4a16_tinygemm, 2e-2), "dequant": (w4a16_dequant, 2e-6),
               "dequant_bf16": (w4a16_dequant_bf16, 2e-2), "fallback": (w4a16_fallback, 2e-2),
               "dense": (_dense, 2e-2)}


@pytest.mark.parametrize("path", list(W4A16_PATHS))
@SETTINGS
@given(problem=problems())
def test_each_w4a16_path_matches_reference(path, problem):
    if path == "dequant_bf16" and not bf16_is_native()[0]:
        pytest.skip(bf16_is_native()[1])
    x, w_q, scales, g, zeros = problem
    fn, rtol = W4A16_PATHS[path]
    prepared = prepare_w4a16(w_q, scales, g, zeros)
    if path == "tinygemm" and not prepared.tinygemm_ok:
        with pytest.raises(Exception, match="tinygemm W4A16 cannot run this layer"):
            fn(x, prepared)
        return
    if path in ("tinygemm", "dequant_bf16", "fallback", "dense") and x.numel() and x.abs().max() > 1e30:
        return  # bf16 rounding of 1e15 * |w| * 1e10 scales: the paths' own range, not this test's
    out = fn(x, prepared)
    ref = w4a16_reference(x, w_q, scales, g, zeros)
    _assert_close(out, ref, _bound16(x, w_q, scales, g, zeros), rtol, path)
