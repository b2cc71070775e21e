"""The AMX engine's C (w4a8_amx.c) run where the CPU has no AMX, over a scalar model of its
tile instructions (csrc/amx_tile_model.c): its loops, tile layouts, chunks, thread split and
per-group epilogue, against the documented float32 order bit for bit and the float64
reference. This proves the code around the tiles on every AVX-512 machine; the tile
instructions themselves are proven only on an AMX CPU (test_admission, test_amx_order).
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from w4a8_kernels import _native_lib, selftest
from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native, w4a8_native_from_quantized
from w4a8_kernels.quant import quantize_per_token_int8
from w4a8_kernels.reference import w4a8_reference

from .conftest import make_layer, make_x
from .test_amx_order import CASES as ORDER_CASES
from .test_amx_order import sums_in_order

MODEL = Path(__file__).parent / "csrc" / "amx_tile_model.c"


def build_model(csrc: Path, out: Path) -> ctypes.CDLL:
    """w4a8_amx.c from `csrc` built over the tile model, typed as the engine's own library."""
    _, isa_flags, _ = _native_lib.VARIANTS["u4_amx"]
    flags = [*_native_lib._COMMON, *(f for f in isa_flags if not f.startswith("-mamx"))]
    proc = subprocess.run([_native_lib.compiler(), *flags, f"-I{csrc}", str(MODEL),
                           "-o", str(out), "-lm"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return _native_lib.bind("u4_amx", ctypes.CDLL(str(out)))


@pytest.fixture(scope="module")
def model_lib(tmp_path_factory):
    _, _, needs = _native_lib.VARIANTS["u4_amx"]
    ok, why = _native_lib._cpu_supports(tuple(f for f in needs if not f.startswith("amx")))
    if not ok:
        pytest.skip(f"the engine's non-tile code is AVX-512: {why}")
    if not _native_lib.compiler():
        pytest.skip("needs a C compiler ($CC, or cc or gcc on PATH)")
    return build_model(_native_lib.csrc_dir(), tmp_path_factory.mktemp("amx_model") / "amx_model.so")


@pytest.fixture
def as_amx_engine(model_lib, monkeypatch):
    """The model library serving as the u4_amx engine of this process."""
    monkeypatch.setitem(_native_lib._state, "u4_amx", {"lib": model_lib, "why": ""})
    yield model_lib


def test_the_self_test_passes_on_the_model(as_amx_engine):
    verdict = selftest.run("u4_amx")
    assert verdict["ok"], verdict
    assert len(verdict["checked"]) == 2 * len(selftest.CASES)


# (M, N, K, group, asym): ragged tokens and weight rows, groups of 32 (padded to 64), 64,
# 128 and 256 (one to four 64-deep steps a group), per-channel, an odd group count, and
# tokens past the point where the B tiles go in chunks (K = 4096: over 12 blocks of 32)
SHAPES = [(1, 40, 256, 128, False), (17, 33, 512, 64, True), (32, 64, 384, 128, True),
          (33, 96, 640, 128, False), (100, 48, 1024, 256, True), (64, 80, 512, 32, False),
          (70, 40, 448, -1, True), (130, 64, 1152, 128, True), (400, 32, 4096, 128, False),
          (420, 32, 4096, -1, True)]


@pytest.mark.parametrize("m,n,k,g,asym", SHAPES)
def test_bits_match_the_documented_order(as_amx_engine, m, n, k, g, asym):
    w_q, scales, zeros = make_layer(n, k, g, asym=asym, seed=m + n)
    x = make_x(m, k, seed=k)
    p = prepare_w4a8(w_q, scales, g, zeros, engine="u4_amx")
    x_q, x_scale = quantize_per_token_int8(x)
    want = selftest.in_order(x_q, x_scale, w_q, scales, k if g == -1 else g, zeros)
    threads = torch.get_num_threads()
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            assert torch.equal(w4a8_native_from_quantized(x_q, x_scale, p), want), f"{t} thread(s)"
    finally:
        torch.set_num_threads(threads)
    # the one-call path (bf16 rows quantized straight into the tiles) against float64
    xb = x.to(torch.bfloat16)
    ref = w4a8_reference(xb.float(), w_q, scales, g, zeros)
    got = w4a8_native(xb, p).double()
    assert (got - ref).abs().max().item() <= 1e-4 * ref.abs().max().item() + 1e-6


@pytest.mark.parametrize("m, n, k, g", ORDER_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("asym", [False, True], ids=["sym", "asym"])
def test_the_order_cases_on_the_model(as_amx_engine, m, n, k, g, asym):
    """test_amx_order's cases (several chunks of token blocks, groups padded to 64 and
    spanning several steps), which on a CPU without AMX run only here."""
    same, diff = sums_in_order(m, n, k, g, asym)
    assert same, diff


# a planted off-by-one in the epilogue: the second group of a pair takes the first's scale
FAULT = ("_mm512_set1_ps(c1 ? s[r * G + 1] : 0.0f)", "_mm512_set1_ps(c1 ? s[r * G] : 0.0f)")


@pytest.mark.parametrize("m,n,k,g,asym", [(33, 64, 512, 128, True), (40, 64, 1024, 256, False)])
def test_a_wrong_epilogue_is_seen(model_lib, m, n, k, g, asym, tmp_path, monkeypatch):
    """The bit checks above can fail: the source with a planted fault gives other bits."""
    src = (_native_lib.csrc_dir() / "w4a8_amx.c").read_text()
    assert src.count(FAULT[0]) == 1, "the planted fault no longer applies: update it"
    d = tmp_path / "csrc"
    shutil.copytree(_native_lib.csrc_dir(), d)
    (d / "w4a8_amx.c").write_text(src.replace(*FAULT))
    monkeypatch.setitem(_native_lib._state, "u4_amx", {"lib": build_model(d, tmp_path / "planted.so"), "why": ""})
    w_q, scales, zeros = make_layer(n, k, g, asym=asym, seed=3)
    x_q, x_scale = quantize_per_token_int8(make_x(m, k))
    p = prepare_w4a8(w_q, scales, g, zeros, engine="u4_amx")
    want = selftest.in_order(x_q, x_scale, w_q, scales, g, zeros)
    assert not torch.equal(w4a8_native_from_quantized(x_q, x_scale, p), want)
