"""W4A8_KERNELS_MAX_ISA: a wider CPU runs what an AVX2-only machine would, and says so."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from w4a8_kernels import _native_lib

_PROBE = textwrap.dedent("""
    import json, torch
    from w4a8_kernels import _native_lib
    from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native
    from w4a8_kernels.reference import w4a8_reference
    from workbench.bench import host_provenance
    torch.manual_seed(0)
    w_q = torch.randint(-8, 8, (40, 256), dtype=torch.int8)
    s = torch.rand(40, 2) + 0.5
    x = torch.randn(33, 256)
    p = prepare_w4a8(w_q, s, 128)
    err = ((w4a8_native(x, p).double() - w4a8_reference(x, w_q, s, 128)).abs().max()).item()
    print(json.dumps({"why": {v: _native_lib.why_unavailable(v) for v in _native_lib.VARIANTS},
                      "engines": sorted({p.engine_for(1).value, p.engine_for(64).value}),
                      "err": err, "cap": host_provenance()["isa_cap"],
                      "libraries": host_provenance()["library_isa_env"]}))
""")


def _probe(cap: str, **extra_env: str) -> dict:
    env = {**os.environ, _native_lib.ISA_CAP_ENV: cap, **extra_env}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                         timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not _native_lib.cpu_flags() >= {"avx2", "fma"}, reason="CPU lacks AVX2 + FMA")
def test_avx2_cap_leaves_only_avx2_engines_and_stays_exact():
    got = _probe("avx2", FBGEMM_ENABLE_INSTRUCTIONS="AVX2")
    assert got["cap"] == "avx2"
    assert got["libraries"].get("FBGEMM_ENABLE_INSTRUCTIONS") == "AVX2"  # provenance names it
    assert got["why"]["u4_avx2"] == "" and got["why"]["avx2_u8s8"] == ""
    for wide in ("u4_vnni512", "u4_amx"):
        assert got["why"][wide].startswith("W4A8_KERNELS_MAX_ISA=avx2 leaves out avx512")
    assert not any(e in ("u4_vnni512", "u4_amx") for e in got["engines"])
    assert got["err"] < 1e-4


@pytest.mark.skipif(not _native_lib.cpu_flags(), reason="no x86 flags to read")
def test_unknown_cap_is_named_and_the_torch_engines_still_run():
    got = _probe("avx1024")
    for variant, why in got["why"].items():
        assert why == "W4A8_KERNELS_MAX_ISA='avx1024' is not one of avx2, avx512", variant
    assert got["err"] < 1e-4


def test_bounds_bench_refuses_an_avx2_cap_that_leaves_torchs_libraries_wider():
    # FBGEMM and oneDNN read the CPU, not the cap: without their own caps the baselines run
    # AVX-512 beside AVX2 kernels, and the "AVX2" ratios would be unfair
    env = {k: v for k, v in os.environ.items() if k not in _native_lib.AVX2_LIBRARY_CAPS}
    env[_native_lib.ISA_CAP_ENV] = "avx2"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_cpu_bounds.py"), "--quick",
                          "--out", "/nonexistent"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2" in out.stderr
