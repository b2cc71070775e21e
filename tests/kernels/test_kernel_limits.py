"""Limits a kernel states instead of crossing: int32 accumulator range and memory."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native
from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.int8_gemm import INT32_MAX, Int8Engine, check_accumulator_range, engine_available
from w4a8_kernels.reference import w4a8_reference

ENGINES = [e for e in Int8Engine if engine_available(e)[0]]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
def test_long_per_channel_dot_is_refused_or_exact(engine):
    # K = 1.1M per-channel at the extremes (w = -8, every code 127): 1.1M * 255 * 8
    # overflows int32 in the u8 engines; each engine must refuse it or get it right
    n, k = 8, 1_100_000
    w_q = torch.full((n, k), -8, dtype=torch.int8)
    scales = torch.ones(n, 1)
    x = torch.full((2, k), 2.0)
    x[1, ::3] = -2.0
    try:
        prepared = prepare_w4a8(w_q, scales, -1, engine=engine)
    except KernelInputError as exc:
        assert "int32" in str(exc) and "at most" in str(exc)
        return
    out = w4a8_native(x, prepared)
    ref = w4a8_reference(x, w_q, scales, -1)
    assert ((out.double() - ref).abs() / ref.abs()).max().item() < 1e-6


def test_auto_never_picks_an_engine_that_overflows():
    n, k = 8, 1_100_000
    w_q = torch.full((n, k), 0, dtype=torch.int8)
    zeros = torch.full((n, 1), 15, dtype=torch.int8)  # w - z = -15: the widest weight
    prepared = prepare_w4a8(w_q, torch.ones(n, 1), -1, zeros)
    x = torch.full((1, k), 1.0)
    ref = w4a8_reference(x, w_q, torch.ones(n, 1), -1, zeros)
    assert torch.allclose(w4a8_native(x, prepared).double(), ref, rtol=1e-6)


def test_accumulator_limit_is_derived_from_value_ranges():
    check_accumulator_range("int_mm", INT32_MAX // (127 * 15), 15)
    with pytest.raises(KernelInputError, match=r"at most 1,127,288 terms"):
        check_accumulator_range("int_mm", INT32_MAX // (127 * 15) + 1, 15)
    with pytest.raises(KernelInputError, match=r"at most 1,052,688 terms"):
        check_accumulator_range("avx2_u8s8", 1_052_689, 8)
    check_accumulator_range("fp32_exact", 10**9, 15)


def test_memory_limit_gives_named_error_with_sizes():
    # a 256 MiB layer under an address-space limit: a named error, not a raw MemoryError
    code = textwrap.dedent("""
        import resource, torch
        from w4a8_kernels.cpu_w4a8 import prepare_w4a8
        from w4a8_kernels.cpu_w4a16 import prepare_w4a16
        from w4a8_kernels.errors import KernelMemoryError
        w = torch.ones(16384, 16384, dtype=torch.int8); s = torch.ones(16384, 1)
        vm = [l for l in open('/proc/self/status') if l.startswith('VmSize')][0].split()[1]
        resource.setrlimit(resource.RLIMIT_AS, (int(vm) * 1024 + 300 * 2**20, resource.RLIM_INFINITY))
        for f in (lambda: prepare_w4a8(w, s, -1, engine="fp32_exact"), lambda: prepare_w4a16(w, s, -1)):
            try:
                f(); print("no error")
            except KernelMemoryError as e:
                print("named:", e)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and all(l.startswith("named: out of memory preparing") for l in lines), lines
    assert "16384 x 16384" in lines[0] and "GiB" in lines[0]
