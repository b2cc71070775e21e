"""Every path: a probe that answers, and bad input that fails loudly or computes right."""
from __future__ import annotations

import pytest
import torch

from w4a8_kernels.errors import KernelError, KernelInputError
from w4a8_kernels.registry import PATHS, Int4Weight, get_path, probe_all

CPU_PATHS = [name for name, p in PATHS.items() if p.device == "cpu" and p.probe()[0]]
KERNEL_PATHS = [n for n in CPU_PATHS if PATHS[n].computes in ("w4a8", "w4a16")]


@pytest.fixture(scope="module")
def weight():
    gen = torch.Generator().manual_seed(0)
    return Int4Weight(torch.randint(-8, 8, (32, 128), generator=gen, dtype=torch.int8),
                      (torch.rand(32, 4, generator=gen) * 0.02 + 0.001).to(torch.bfloat16), 32)


def test_every_probe_answers_ok_or_why():
    for name, (ok, why) in probe_all().items():
        assert isinstance(ok, bool) and isinstance(why, str)
        if not ok:
            assert why, name
    if not torch.cuda.is_available():
        assert probe_all()["triton_w4a8"] == (False, "no CUDA device")


def test_unknown_path_is_named():
    with pytest.raises(KernelInputError, match="known: w4a8_native"):
        get_path("nope")


@pytest.mark.parametrize("name", KERNEL_PATHS)
def test_each_path_runs_close_to_float(name, weight):
    path = PATHS[name]
    prepared = path.prepare(weight)
    x = torch.randn(5, 128, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    out = path.finish(path.run(path.make_input(x, prepared), prepared), None, prepared)
    from w4a8_kernels.reference import w4a16_reference
    ref = w4a16_reference(x, weight.w_q, weight.scales, 32)
    assert out.shape == (5, 32) and out.dtype == torch.float32
    assert ((out.double() - ref).norm() / ref.norm()).item() < 0.03


BAD_X = {
    "int dtype": (torch.ones(2, 128, dtype=torch.int32), "dtype"),
    "K mismatch": (torch.ones(2, 127), "K = 127"),
    "3-D": (torch.ones(2, 2, 128), "2-D"),
    "Inf": (torch.tensor([[float("inf")] + [0.0] * 127]), "Inf or NaN"),
    "NaN": (torch.tensor([[float("nan")] + [0.0] * 127]), "Inf or NaN"),
}


@pytest.mark.parametrize("name", KERNEL_PATHS)
@pytest.mark.parametrize("case", list(BAD_X))
def test_bad_activations_raise_named_errors(name, case, weight):
    path = PATHS[name]
    prepared = path.prepare(weight)
    x, match = BAD_X[case]
    if path.activation_dtype is not None and x.dtype.is_floating_point:
        x = x.to(path.activation_dtype)
    with pytest.raises(KernelInputError, match=match):
        path.run(x, prepared)


@pytest.mark.parametrize("name", KERNEL_PATHS)
def test_non_contiguous_zero_rows_and_empty_batch(name, weight):
    path = PATHS[name]
    prepared = path.prepare(weight)
    dtype = path.activation_dtype or torch.float32
    base = torch.randn(128, 6, generator=torch.Generator().manual_seed(2)).to(dtype)
    x_nc = base.t()  # [6, 128], not contiguous
    assert not x_nc.is_contiguous()
    x_nc[2] = 0  # an all-zero token
    out_nc = path.run(x_nc, prepared)
    out_c = path.run(x_nc.contiguous(), prepared)
    # same values (BLAS may sum a transposed operand in another order: float32 rounding)
    assert torch.allclose(out_nc, out_c, rtol=1e-5, atol=1e-6) and torch.all(out_nc[2] == 0)
    empty = path.run(torch.empty(0, 128, dtype=dtype), prepared)
    assert empty.shape == (0, 32)


BAD_W = {
    "float weight": (lambda w: Int4Weight(w.w_q.float(), w.scales, 32), "torch.int8"),
    "out of range": (lambda w: Int4Weight(w.w_q * 2, w.scales, 32), r"\[-8, 7\]"),
    "group does not divide": (lambda w: Int4Weight(w.w_q, w.scales, 48), "does not divide"),
    "scales shape": (lambda w: Int4Weight(w.w_q, w.scales[:, :2], 32), "scales has shape"),
    "inf scales": (lambda w: Int4Weight(w.w_q, w.scales.float().fill_(float("inf")), 32), "Inf"),
}


@pytest.mark.parametrize("name", [n for n in KERNEL_PATHS])
@pytest.mark.parametrize("case", list(BAD_W))
def test_bad_weights_raise_named_errors(name, case, weight):
    make, match = BAD_W[case]
    with pytest.raises(KernelError, match=match):
        PATHS[name].prepare(make(weight))


def test_computes_is_a_closed_set_that_prints_as_its_name():
    import json

    from w4a8_kernels.registry import Computes, KernelPath

    assert all(isinstance(p.computes, Computes) for p in PATHS.values())
    assert f"{PATHS['w4a8_native'].computes}" == "w4a8" and json.dumps([Computes.INT8]) == '["int8"]'
    with pytest.raises(ValueError, match="'w4a4'"):
        KernelPath("x", "x", "w4a4", lambda w: None, lambda x, s: x)
