"""Native engines built here are admitted only after a self-test in a child process, and the
AMX engine's tile configuration is a constant no compiler can drop.

The AMX checks run wherever the source compiles (no AMX instruction is executed): they read
the 64 bytes the built library hands to ldtilecfg, and the instructions that load them.
The planted engines are copies of w4a8_u4.c (its AVX2 build, which every x86-64 CI machine
runs) that crash, hang or compute wrong bits: each must come back as a named unavailable
engine while this process, and the W4A8 path through the next engine, go on.
"""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess

import pytest
import torch

from w4a8_kernels import _native_lib
from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native
from w4a8_kernels.int8_gemm import engine_available
from w4a8_kernels.reference import w4a8_reference

x86 = pytest.mark.skipif(not _native_lib.cpu_flags() >= {"avx2", "fma"},
                         reason="not an x86-64 CPU with AVX2 + FMA: the planted engine is its AVX2 build")


def _amx_library():
    try:
        return _native_lib.compile_variant("u4_amx", check_cpu=False)
    except OSError as exc:
        if "unrecognized" in str(exc) or "not an x86" in str(exc):
            pytest.skip(f"this compiler cannot build the AMX source: {exc}")
        raise


def test_amx_tile_config_holds_all_64_bytes_as_intended():
    lib = ctypes.CDLL(str(_amx_library()))  # loading runs none of its instructions
    lib.w4a8_amx_tilecfg.restype = ctypes.c_void_p
    cfg = bytes((ctypes.c_uint8 * 64).from_address(lib.w4a8_amx_tilecfg()))
    want = bytearray(64)
    want[0] = 1  # palette 1; start_row 0; bytes 2-15 reserved, zero
    for t in range(8):  # tiles 0-7: 16 rows of 64 bytes; tiles 8-15 unused, zero
        want[16 + 2 * t] = 64
        want[48 + t] = 16
    assert cfg == bytes(want), cfg.hex()


def test_every_ldtilecfg_loads_that_constant():
    """The bug this closes: gcc 12 dropped the stores that filled a stack config, so
    ldtilecfg read bytes nobody wrote. Every ldtilecfg must name the library's constant."""
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("no objdump on PATH to read the built library")
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(_amx_library())],
                          capture_output=True, text=True, check=True).stdout
    accessor = re.search(r"<w4a8_amx_tilecfg>:\n.*?lea\s+\S+\(%rip\),%rax\s+# ([0-9a-f]+)", text, re.S)
    assert accessor, "w4a8_amx_tilecfg does not return a rip-relative constant"
    loads = re.findall(r"ldtilecfg\s+(.*)", text)
    assert loads, "no ldtilecfg in the AMX library"
    for operand in loads:
        assert re.fullmatch(rf"\S+\(%rip\)\s+# {accessor.group(1)} <\w+>", operand.strip()), operand


@pytest.fixture(autouse=True)
def _fresh_engine_choice():
    """The engines ranked and the quantizer found are cached per process: planted engines must
    not leave their choice to the tests after them (nor find the real ones' before them)."""
    from w4a8_kernels import cpu_w4a8

    cpu_w4a8.rank_engines.cache_clear()
    cpu_w4a8._quantizer.cache_clear()
    yield
    cpu_w4a8.rank_engines.cache_clear()
    cpu_w4a8._quantizer.cache_clear()


def _planted(tmp_path, monkeypatch, tail: str = "", head: str = "", timeout: int | None = None):
    """A source folder whose w4a8_u4.c carries `head` before and `tail` after the real one;
    a fresh build cache, a fresh set of loaded engines."""
    src = tmp_path / "csrc"
    shutil.copytree(_native_lib._CSRC, src)
    u4 = src / "w4a8_u4.c"
    u4.write_text(head + u4.read_text() + tail)
    monkeypatch.setenv(_native_lib.CSRC_ENV, str(src))
    monkeypatch.setenv("W4A8_WORKBENCH_CACHE", str(tmp_path / "cache"))
    if timeout is not None:
        monkeypatch.setenv(_native_lib.SELF_TEST_TIMEOUT_ENV, str(timeout))
    monkeypatch.setattr(_native_lib, "_state", {})


def _w4a8_still_runs():
    gen = torch.Generator().manual_seed(3)
    w_q = torch.randint(-8, 8, (48, 256), generator=gen, dtype=torch.int8)
    s = torch.rand(48, 2, generator=gen) + 0.5
    x = torch.randn(9, 256, generator=gen)
    p = prepare_w4a8(w_q, s, 128)
    assert p.engine.value != "u4_avx2"
    err = (w4a8_native(x, p).double() - w4a8_reference(x, w_q, s, 128)).abs().max().item()
    assert err < 1e-4


@x86
def test_a_planted_crash_is_a_named_unavailable_engine(tmp_path, monkeypatch):
    _planted(tmp_path, monkeypatch, tail="\n#include <signal.h>\n__attribute__((constructor)) "
                                         "static void planted_crash(void) { raise(SIGSEGV); }\n")
    assert _native_lib.load("u4_avx2") is None
    assert _native_lib.why_unavailable("u4_avx2") == "self-test died with SIGSEGV"
    assert engine_available("u4_avx2") == (False, "self-test died with SIGSEGV")
    assert _native_lib.verdicts()["u4_avx2"] == "self-test died with SIGSEGV"
    if _native_lib._cpu_supports(_native_lib.VARIANTS["u4_vnni512"][2])[0]:  # same source (CPU and cap allow it)
        assert _native_lib.why_unavailable("u4_vnni512") == "self-test died with SIGSEGV"
    # kept with the build: a new process (here: a fresh state) does not run it again
    kept = list((tmp_path / "cache").glob("u4_avx2-*.verdict.json"))
    assert len(kept) == 1 and '"died with SIGSEGV"' in kept[0].read_text()
    monkeypatch.setattr(_native_lib, "_run_self_test", lambda v: pytest.fail("verdict not reused"))
    monkeypatch.setattr(_native_lib, "_state", {})
    assert _native_lib.why_unavailable("u4_avx2") == "self-test died with SIGSEGV"
    _w4a8_still_runs()


@x86
def test_a_planted_wrong_sum_is_caught_bit_for_bit(tmp_path, monkeypatch):
    # one more in every 16-bit pair sum: the int32 group sums, then the outputs, drift
    _planted(tmp_path, monkeypatch, head="#include <immintrin.h>\n#define _mm256_madd_epi16(a, b) "
                                         "_mm256_add_epi32(_mm256_madd_epi16(a, b), _mm256_set1_epi32(1))\n")
    why = _native_lib.why_unavailable("u4_avx2")
    assert why.startswith("self-test failed: wrong bits at M = "), why
    assert "differ from the documented float32 order" in why


@x86
def test_a_planted_hang_is_cut_off(tmp_path, monkeypatch):
    _planted(tmp_path, monkeypatch, timeout=15,
             tail="\n#include <unistd.h>\n__attribute__((constructor)) "
                  "static void planted_hang(void) { for (;;) pause(); }\n")
    assert _native_lib.why_unavailable("u4_avx2") == "self-test hung: no answer in 15 s"
    # not kept: a hang may be the machine's load, so the next process asks again
    assert not list((tmp_path / "cache").glob("u4_avx2-*.verdict.json"))


@x86
def test_the_real_engines_pass_their_self_test():
    """Every variant this CPU (and the ISA cap in force) allows is admitted: a failure here is
    an engine that does not compute what it promises on this machine."""
    for variant, standing in _native_lib.verdicts().items():
        ok, _ = _native_lib._cpu_supports(_native_lib.VARIANTS[variant][2])
        if ok:
            assert standing == "admitted (self-test passed)", (variant, standing)


@pytest.mark.parametrize("mp, kp", [(32, 64), (128, 4096), (64, 960)])
@pytest.mark.parametrize("threads", [1, 2])
def test_amx_b_tiles_are_the_documented_layout(mp, kp, threads):
    """w4a8_amx_tiles lays the codes out as the GEMM reads them (no AMX instruction runs):
    [Mp / 16][K / 64][16 k-quads][16 tokens][4 codes], on any CPU that builds the source."""
    lib = ctypes.CDLL(str(_amx_library()))
    i64 = ctypes.c_int64
    lib.w4a8_amx_tiles.argtypes = [ctypes.c_void_p, i64, i64, i64, ctypes.c_void_p, ctypes.c_int]
    a = torch.randint(-127, 128, (mp, kp), dtype=torch.int8, generator=torch.Generator().manual_seed(mp + kp))
    want = a.view(torch.int32).view(mp // 16, 16, kp // 64, 16).permute(0, 2, 3, 1).contiguous()
    bt = torch.empty(mp * kp, dtype=torch.int8)
    assert lib.w4a8_amx_tiles(a.data_ptr(), a.stride(0), mp, kp, bt.data_ptr(), threads) == 0
    assert torch.equal(bt, want.view(torch.int8).reshape(-1))
    assert lib.w4a8_amx_tiles(a.data_ptr(), a.stride(0), mp - 1, kp, bt.data_ptr(), threads) == -2


@pytest.mark.parametrize("m, k, g", [(1, 64, 64), (17, 256, 32), (40, 960, 192), (33, 4096, 128), (5, 4160, 4160)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("threads", [1, 2])
def test_amx_quantize_tiles_are_the_quantizer_codes_laid_out(m, k, g, dtype, threads):
    """w4a8_amx_quantize_tiles (the AMX engine's activations: quantized straight into B tiles
    on its own pool) gives quantize_per_token_int8's codes and scales, each group padded to
    64 and rows past M zero, in the documented tile layout. Its AVX-512 code runs; no AMX
    instruction does."""
    if not {"avx512f", "avx512bw", "avx512vl"} <= _native_lib.cpu_flags():
        pytest.skip("the AMX library's quantizer is AVX-512 code; this CPU lacks AVX-512")
    from w4a8_kernels.quant import quantize_per_token_int8

    lib = ctypes.CDLL(str(_amx_library()))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.w4a8_amx_quantize_tiles.argtypes = [ptr, ctypes.c_int, i64, i64, i64, i64, i64, i64, ptr,
                                            ptr, ctypes.c_int]
    gen = torch.Generator().manual_seed(m * k + g)
    x = (torch.randn(m, k, generator=gen) * torch.rand(m, 1, generator=gen) * 4).to(dtype)
    gp, mp = -(-g // 64) * 64, -(-m // 32) * 32
    bt = torch.full((mp * (k // g) * gp,), 99, dtype=torch.int8)  # stale bytes must not survive
    xs = torch.empty(m, dtype=torch.float32)
    rc = lib.w4a8_amx_quantize_tiles(x.data_ptr(), int(dtype == torch.bfloat16), m, k, x.stride(0),
                                     g, gp, mp, bt.data_ptr(), xs.data_ptr(), threads)
    assert rc == 0
    codes, scale = quantize_per_token_int8(x.float())
    a = torch.zeros(mp, k // g, gp, dtype=torch.int8)
    a[:m, :, :g] = codes.view(m, k // g, g)
    kp = (k // g) * gp
    want = a.view(mp, kp).view(torch.int32).view(mp // 16, 16, kp // 64, 16).permute(0, 2, 3, 1)
    assert torch.equal(bt, want.contiguous().view(torch.int8).reshape(-1))
    assert torch.equal(xs, scale.reshape(m).float())
    x[m // 2, k - 1] = float("nan")  # the first bad row is named
    assert lib.w4a8_amx_quantize_tiles(x.data_ptr(), int(dtype == torch.bfloat16), m, k, x.stride(0),
                                       g, gp, mp, bt.data_ptr(), xs.data_ptr(), threads) == -1 - m // 2
    assert lib.w4a8_amx_quantize_tiles(x.data_ptr(), 0, m, k, x.stride(0), g, gp, mp - 1,
                                       bt.data_ptr(), xs.data_ptr(), threads) == 4


@pytest.mark.parametrize("m0, M, n0, N", [(0, 32, 0, 32), (32, 45, 64, 77), (0, 7, 0, 19), (64, 80, 32, 48)])
def test_amx_write_out_scales_and_transposes_each_block(m0, M, n0, N):
    """The AMX engine's epilogue (AVX-512, no AMX instruction): C[m, n0 + r] = facc[r][m - m0]
    * xs[m] for the block's tokens m < M and columns n0 + r < N, one float32 product each,
    and nothing written outside them."""
    if not {"avx512f", "avx512bw", "avx512vl"} <= _native_lib.cpu_flags():
        pytest.skip("the AMX library's epilogue is AVX-512 code; this CPU lacks AVX-512")
    lib = ctypes.CDLL(str(_amx_library()))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.w4a8_amx_write_out.argtypes = [ptr, ptr, i64, ptr, i64, i64, i64, i64]
    gen = torch.Generator().manual_seed(M * 100 + N)
    facc = torch.randn(32, 32, generator=gen)
    xs = torch.rand(M, generator=gen) + 0.5
    C = torch.full((M, N + 3), 7.0)  # rows ldc = N + 3 apart
    lib.w4a8_amx_write_out(facc.data_ptr(), C.data_ptr(), C.stride(0), xs.data_ptr(), m0, M, n0, N)
    want = torch.full_like(C, 7.0)
    rows, cols = min(M - m0, 32), min(N - n0, 32)
    want[m0:m0 + rows, n0:n0 + cols] = facc[:cols, :rows].t() * xs[m0:m0 + rows, None]
    assert torch.equal(C, want)
