"""A non-editable install runs the C engine, and Hugging Face's `kernels` installs beside it.

The wheel once left out `csrc/w4a8_avx2.c`, which silently disabled the C engine for
anyone who installed it; and a top-level `kernels` package clobbered (or was shadowed by)
Hugging Face's `kernels` distribution. This builds the wheel, installs it with HF's
`kernels` into one fresh target folder and runs a Python that sees neither this checkout
nor its editable install (`-S`: no site hooks; the folder is read-only, so the library
must build in the per-user cache).
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from w4a8_kernels import _native_lib

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, os, sys
import kernels, w4a8_kernels
from w4a8_kernels import _native_lib
from w4a8_kernels.int8_gemm import Int8Engine, engine_available
import torch
from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native
from w4a8_kernels.reference import w4a8_reference
w = torch.randint(-8, 8, (24, 1001), dtype=torch.int8)
s = torch.rand(24, 1) + 0.1
x = torch.randn(3, 1001)
out = w4a8_native(x, prepare_w4a8(w, s, -1, engine="avx2_u8s8"))
ref = w4a8_reference(x, w, s, -1)
print(json.dumps({
    "w4a8_kernels": w4a8_kernels.__file__, "kernels": kernels.__file__,
    "hf_get_kernel": hasattr(kernels, "get_kernel"), "src": str(_native_lib._CSRC),
    "why": _native_lib.why_unavailable(), "lib_dir": str(_native_lib.cache_dir()),
    "variants": {v: _native_lib.why_unavailable(v) for v in _native_lib.VARIANTS},
    "rel": float(((out.double() - ref).norm() / ref.norm()).item())}))
"""


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kw)
    assert proc.returncode == 0, (cmd, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc.stdout


@pytest.mark.skipif(_native_lib.why_unavailable() != "", reason=_native_lib.why_unavailable()
                    or "the C engine loads here")
def test_wheel_runs_c_engine_beside_hf_kernels(tmp_path):
    # build from a copy: no build/ or egg-info left in the checkout, no stale files in the wheel
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    for pkg in ("kernels", "workbench"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
          str(src), "-w", str(wheels)], cwd=tmp_path)
    ours = next(wheels.glob("w4a8_workbench-*.whl"))
    hf = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "kernels",
                         "-d", str(wheels)], capture_output=True, text=True, timeout=120)
    hf_wheels = [p for p in wheels.glob("kernels-*.whl")]
    if hf.returncode != 0 or not hf_wheels:
        pytest.skip(f"Hugging Face's kernels wheel cannot be had here: {hf.stderr.strip()[-300:]}")
    target = tmp_path / "site"
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
          str(ours), str(hf_wheels[0])], cwd=tmp_path)
    assert (target / "w4a8_kernels" / "csrc" / "w4a8_avx2.c").is_file()
    assert (target / "kernels" / "__init__.py").is_file()  # HF's, untouched by ours
    for p in [target, *target.rglob("*")]:  # read-only, as site-packages may be
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join([str(target), sysconfig.get_paths()["purelib"],
                                         sysconfig.get_paths()["platlib"]])
    env["W4A8_WORKBENCH_CACHE"] = str(tmp_path / "cache")
    try:
        import json
        got = json.loads(_run([sys.executable, "-S", "-c", PROBE], cwd=tmp_path, env=env)
                         .strip().splitlines()[-1])
    finally:
        for p in [target, *target.rglob("*")]:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
        shutil.rmtree(target, ignore_errors=True)
    assert got["w4a8_kernels"].startswith(str(target)), got
    assert got["kernels"].startswith(str(target)) and got["hf_get_kernel"], got
    assert got["src"].startswith(str(target)) and got["why"] == "", got
    assert got["lib_dir"] == str(tmp_path / "cache")
    # every C variant this checkout builds (AVX2, AVX-512 VNNI) builds from the wheel too
    assert got["variants"] == {v: _native_lib.why_unavailable(v) for v in _native_lib.VARIANTS}
    assert got["rel"] < 1e-6, got
