"""The C engines' work sharing: a worker that is not scheduled does not hold the call.

Every C engine's items (u4, u8s8, AMX) are taken from one atomic counter by whoever runs
(the caller and the pool's workers). The library's test hook makes every worker sleep before it takes an item,
as a descheduled thread would; the call must then finish on the caller alone, long before
the sleep ends, with the same bits as an undisturbed call.
"""
from __future__ import annotations

import time

import pytest
import torch

from w4a8_kernels import _native_lib
from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native
from w4a8_kernels.int8_gemm import C_ENGINES, Int8Engine, engine_available

STALL_S = 2.0


@pytest.mark.parametrize("engine", C_ENGINES)
@pytest.mark.parametrize("m,g", [(1, 128), (16, -1), (9, 32), (40, 128)])
def test_a_stalled_worker_does_not_stall_the_call(engine, m, g):
    ok, why = engine_available(Int8Engine(engine))
    if not ok:
        pytest.skip(f"{engine} cannot run here: {why}")
    lib = _native_lib.load(engine)
    gen = torch.Generator().manual_seed(5)
    n, k = 512, 1024
    w = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    s = torch.rand(n, 1 if g == -1 else k // g, generator=gen) + 0.1
    x = torch.randn(m, k, generator=gen)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    try:
        p = prepare_w4a8(w, s, g, engine=engine)
        quiet = w4a8_native(x, p)
        lib.sched_test_stall(int(STALL_S * 1e6))
        t0 = time.perf_counter()
        stalled = w4a8_native(x, p)
        took = time.perf_counter() - t0
    finally:
        lib.sched_test_stall(0)
        torch.set_num_threads(threads)
    assert torch.equal(quiet, stalled)
    # The call waited for no worker: a static split would have taken the whole sleep.
    assert took < STALL_S / 4, f"the call took {took:.3f} s beside a worker asleep for {STALL_S} s"


# the entry points _native_lib binds per variant, the pool's test hook among them
_EXPORTS = {"avx2_u8s8": ("w4a8_gemm_u8s8", "w4a8_u8s8_sched_test_stall"),
            "u4_avx2": ("w4a8_u4_gemm_avx2", "w4a8_u4_linear_avx2", "w4a8_sched_test_stall_avx2"),
            "u4_vnni512": ("w4a8_u4_gemm_vnni512", "w4a8_u4_linear_vnni512", "w4a8_sched_test_stall_vnni512"),
            "u4_amx": ("w4a8_amx_init", "w4a8_amx_gemm", "w4a8_amx_linear", "w4a8_amx_quantize_tiles",
                       "w4a8_amx_sched_test_stall")}


@pytest.mark.parametrize("variant", sorted(_native_lib.VARIANTS))
def test_every_c_source_builds_with_its_flags_where_the_cpu_cannot_run_it(variant, tmp_path):
    """The AMX and AVX-512 engines cannot run on an AVX2-only CPU; they still compile here
    (warnings as errors) and export what _native_lib binds, so a change to them is checked."""
    import ctypes
    import subprocess

    cc = _native_lib.compiler()
    if cc is None:
        pytest.skip("no C compiler ($CC, or cc or gcc on PATH)")
    src, flags, _ = _native_lib.VARIANTS[variant]
    out = tmp_path / f"{variant}.so"
    args = [cc, *_native_lib._COMMON, *flags, "-Wall", "-Werror",
            str(_native_lib._CSRC / src), "-o", str(out), "-lm"]
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode and "unrecognized" in proc.stderr:
        pytest.skip(f"{cc} does not take {variant}'s flags: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lib = ctypes.CDLL(str(out))  # loading runs none of its instructions
    missing = [name for name in _EXPORTS[variant] if not hasattr(lib, name)]
    assert not missing, missing
