"""The C quantizers stay loops of vector instructions when the user's compiler hardens builds.

Ubuntu's gcc defines _FORTIFY_SOURCE=3 unasked. It turned the bf16 widening loop's
per-element memcpy into a checked call per element, and the AMX host's quantizer took 1.8 ms
where 0.13 was due (benchmarks/results/amx_emr_quantizer/). Each library holding a quantizer
is built here with that define added (no instruction of it runs, so the AMX source is read on
any CPU), and its quantizer's own code must call no memcpy. Speed is measured elsewhere
(benchmarks/bench_hardening_flags.py): this reads the instructions.
"""
from __future__ import annotations

import platform
import re
import shutil
import subprocess

import pytest

from w4a8_kernels import _native_lib

# the libraries that include w4a8_quant.h, and the function each runs its rows in
QUANTIZERS = {"u4_avx2": "quantize_item", "u4_vnni512": "quantize_item", "u4_amx": "qtiles_item"}


def _function(disassembly: str, name: str) -> str:
    m = re.search(rf"^[0-9a-f]+ <{name}(\.\w+)?>:\n(.*?)(?:\n\n|\Z)", disassembly, re.S | re.M)
    assert m, f"no {name} in the built library"
    return m.group(2)


@pytest.mark.parametrize("variant", sorted(QUANTIZERS))
def test_the_quantizer_calls_no_memcpy_under_fortify(variant, tmp_path, monkeypatch):
    gcc, objdump = shutil.which("gcc"), shutil.which("objdump")
    if gcc is None or objdump is None:
        pytest.skip("needs gcc and objdump on PATH to build and read the library")
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("not an x86-64 machine: the engines' sources are x86 intrinsics")
    hardened = tmp_path / "gcc-fortified"
    hardened.write_text(f'#!/bin/sh\nexec {gcc} -D_FORTIFY_SOURCE=3 "$@"\n')
    hardened.chmod(0o755)
    monkeypatch.setenv("CC", str(hardened))
    monkeypatch.setenv("W4A8_WORKBENCH_CACHE", str(tmp_path / "cache"))
    try:
        lib = _native_lib.compile_variant(variant, check_cpu=False)
    except OSError as exc:
        if "unrecognized" in str(exc):
            pytest.skip(f"this compiler cannot build {variant}: {exc}")
        raise
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(lib)], capture_output=True,
                          text=True, check=True).stdout
    body = _function(text, QUANTIZERS[variant])
    calls = re.findall(r"call\s+\S+\s+<([^>]+)>", body)
    assert calls, f"{QUANTIZERS[variant]} calls nothing at all: the pattern no longer reads it"
    assert not [c for c in calls if "memcpy" in c], calls
