"""vllm_machete: the pinned vLLM's Machete W4A16 kernels (built by benchmarks/build_machete.sh)
against the float64 reference, on the shapes and M its heuristic sends to each schedule and on
awkward ones. Without a Hopper GPU and the built library the GPU tests skip with the reason, and
what runs anywhere is what the path says when it cannot run.
"""
from __future__ import annotations

import re

import pytest
import torch

from w4a8_kernels import machete_lib
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError
from w4a8_kernels.machete_schedule import all_schedules, machete_schedule, schedule_name
from w4a8_kernels.reference import w4a16_reference
from w4a8_kernels.vllm_machete import (machete_available, machete_mm, machete_schedule as
                                       path_schedule, prepare_machete)

OK, WHY = machete_available()
needs_machete = pytest.mark.skipif(not OK, reason=f"vllm_machete cannot run: {WHY}")


def _weight(n, k, g, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w_q = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    ng = 1 if g == -1 else k // g
    s = (torch.rand(n, ng, generator=gen) * 0.02 + 0.001).bfloat16().float()
    return w_q, s


def _x(m, k, seed):
    return torch.randn(m, k, generator=torch.Generator().manual_seed(seed)).bfloat16()


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


# bf16 output rounding (2^-9 relative) and the bf16 q * scale Machete forms before the MMA bound
# the error against the float64 product of the same int4 weight.
TOL = 8e-3


def test_the_path_says_why_it_cannot_run_here():
    ok, why = machete_available()
    if not torch.cuda.is_available():
        assert (ok, why) == (False, "no CUDA device")
    if not ok:
        w_q, s = _weight(128, 128, 128)
        with pytest.raises(KernelUnavailableError, match="vllm_machete cannot run here: " + why):
            prepare_machete(w_q, s, 128)


def test_a_missing_library_names_the_file_and_the_build(tmp_path, monkeypatch):
    monkeypatch.setenv(machete_lib.LIB_ENV, str(tmp_path / "absent.so"))
    monkeypatch.setattr(machete_lib, "_LIB", None)
    assert machete_lib.library_path() == tmp_path / "absent.so"
    with pytest.raises(KernelUnavailableError, match="absent.so is missing.*build_machete.sh"):
        machete_lib._load()


def test_a_library_that_is_no_library_does_not_load(tmp_path, monkeypatch):
    bad = tmp_path / "libmachete_w4a16.so"
    bad.write_bytes(b"not an ELF file")
    monkeypatch.setenv(machete_lib.LIB_ENV, str(bad))
    monkeypatch.setattr(machete_lib, "_LIB", None)
    with pytest.raises(OSError):
        machete_lib._load()


@pytest.mark.parametrize("n,k,g,why", [
    (4096, 4096, 128, None), (4096, 4096, -1, None), (4096, 4096, 4096, None),
    (4096, 4096, 64, None), (256, 256, 32, r"Group size \(32\) not supported by Machete"),
    (192, 256, 128, "Output features size must be divisible by 128"),
    (256, 96, -1, "Input features size must be divisible by 64"),
])
def test_the_layers_machete_takes_are_vllms(n, k, g, why):
    """MacheteLinearKernel.can_implement's group sizes and shape check, on any machine (the
    registry's `supports` says the same)."""
    from w4a8_kernels.registry import Int4Weight, get_path
    got = machete_lib.layer_refused(n, k, g)
    assert (got is None) if why is None else re.search(why, got)
    w_q, s = _weight(n, k, g if g in (-1, 32, 64, 128) else -1)
    ok, reason = get_path("vllm_machete").supports(Int4Weight(w_q, s, g))
    assert ok == (why is None) and reason == (got or "")


@needs_machete
def test_the_library_holds_every_schedule_of_the_heuristic():
    assert sorted(machete_lib.built_schedules()) == sorted(all_schedules())


# (N, K, g): vLLM's smallest layer, N not a multiple of 256 (the 256-row tiles), K not of 128,
# many groups, per-channel, g64 and g128.
SHAPES = [(128, 64, -1), (384, 704, 64), (640, 1216, 64), (1152, 2048, 128), (512, 1024, -1),
          (256, 4096, 128)]
MS = [1, 3, 16, 17, 33, 65, 100, 129, 257, 1000]


@needs_machete
@pytest.mark.parametrize("n,k,g", SHAPES)
def test_machete_against_the_reference_at_every_m_bucket(n, k, g):
    w_q, s = _weight(n, k, g, seed=n + k)
    p = prepare_machete(w_q, s, g)
    for m in MS:
        x = _x(m, k, m)
        out = machete_mm(x.cuda(), p)
        assert out.shape == (m, n) and out.dtype == torch.bfloat16
        assert _rel(out.cpu(), w4a16_reference(x, w_q, s, g)) < TOL, (m, path_schedule(m, p))
        assert path_schedule(m, p) == schedule_name(*machete_schedule(m, n, k))


@needs_machete
@pytest.mark.parametrize("sched", all_schedules(), ids=lambda s: f"{s[0][0]}x{s[0][1]}_{s[1][0]}")
def test_every_schedule_against_the_reference(sched):
    """Each kernel forced on one shape, as `machete_mm(schedule=...)` runs it: the heuristic
    reaches the large tiles only on large layers."""
    n, k, g = 768, 1536, 128
    w_q, s = _weight(n, k, g, seed=3)
    handle = machete_lib.prepack(w_q.cuda(), s.cuda(), g)
    for m in (1, 40, 300):
        x = _x(m, k, m)
        out = machete_lib.mm(x.cuda(), handle, sched)
        assert _rel(out.cpu(), w4a16_reference(x, w_q, s, g)) < TOL, m


@needs_machete
def test_a_large_layer_at_large_m():
    n, k, g = 4096, 4096, 128
    w_q, s = _weight(n, k, g, seed=5)
    p = prepare_machete(w_q, s, g)
    x = _x(4096, k, 9)
    out = machete_mm(x.cuda(), p)
    w = (w_q.float().view(n, -1, g) * s.unsqueeze(-1)).reshape(n, k).cuda()
    ref = (x.cuda().float() @ w.t()).double()
    assert _rel(out, ref) < TOL
    rows = [0, 1, 2047, 4095]  # the float64 reference on a few rows (the CPU is the bottleneck)
    assert _rel(out[rows].cpu(), w4a16_reference(x[rows], w_q, s, g)) < TOL


@needs_machete
def test_prepack_is_deterministic_and_keeps_the_bytes():
    w_q, s = _weight(256, 512, 128, seed=1)
    a = machete_lib.prepack(w_q.cuda(), s.cuda(), 128)
    b = machete_lib.prepack(w_q.cuda(), s.cuda(), 128)
    assert a.b.shape == (512 // 8, 256) and a.b.dtype == torch.int32
    assert torch.equal(a.b, b.b)
    # a reordering: the same nibbles (as a multiset) in another order
    from w4a8_kernels.packing import pack_int4_ct
    raw = pack_int4_ct(w_q).view(torch.uint8)
    nib = lambda t: torch.cat([t & 15, t >> 4]).bincount(minlength=16)  # noqa: E731
    assert torch.equal(nib(a.b.cpu().view(torch.uint8).reshape(-1)), nib(raw.reshape(-1)))
    assert not torch.equal(a.b.cpu().view(torch.uint8).reshape(-1), raw.reshape(-1))


@needs_machete
def test_a_cuda_graph_replays_the_call():
    n, k, g = 512, 1024, 128
    w_q, s = _weight(n, k, g, seed=2)
    p = prepare_machete(w_q, s, g)
    x = _x(16, k, 4).cuda()
    eager = machete_mm(x, p)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        machete_mm(x, p)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = machete_mm(x, p)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


@needs_machete
@pytest.mark.parametrize("n,k,g,match", [
    (192, 256, 128, "Output features size must be divisible by 128"),
    (256, 96, -1, "Input features size must be divisible by 64"),
    (256, 256, 32, r"Group size \(32\) not supported by Machete"),
])
def test_layers_vllm_does_not_send_to_machete_are_refused_by_name(n, k, g, match):
    w_q, s = _weight(n, k, g)
    with pytest.raises(KernelInputError, match=match):
        prepare_machete(w_q, s, g)


@needs_machete
def test_zero_points_and_wrong_inputs_are_refused():
    w_q, s = _weight(256, 256, 128)
    with pytest.raises(KernelInputError, match="zero points"):
        prepare_machete(w_q, s, 128, torch.zeros(256, 2, dtype=torch.int8))
    p = prepare_machete(w_q, s, 128)
    with pytest.raises(KernelInputError, match="bf16"):
        machete_mm(torch.zeros(4, 256, device="cuda"), p)
    with pytest.raises(KernelInputError, match=r"\[M, 256\]"):
        machete_mm(torch.zeros(4, 128, device="cuda", dtype=torch.bfloat16), p)
    assert machete_mm(torch.zeros(0, 256, device="cuda", dtype=torch.bfloat16), p).shape == (0, 256)


def test_the_build_refuses_cutlass_of_another_release(tmp_path):
    """build_machete.sh checks CUTLASS against the sdist's pinned CUTLASS_REVISION before it
    compiles anything."""
    import os
    import subprocess
    from pathlib import Path

    sdist = Path(os.environ.get("WORKBENCH_VLLM_SRC", "/nonexistent"))
    if not (sdist / "CMakeLists.txt").is_file():
        pytest.skip("the pinned vLLM sdist is not at hand (set WORKBENCH_VLLM_SRC)")
    root = Path(__file__).resolve().parents[2]
    inc = tmp_path / "include" / "cutlass"
    inc.mkdir(parents=True)
    (inc / "version.h").write_text("#define CUTLASS_MAJOR 3\n#define CUTLASS_MINOR 5\n"
                                   "#define CUTLASS_PATCH 0\n")
    proc = subprocess.run(["bash", str(root / "benchmarks" / "build_machete.sh")],
                          env={**os.environ, "CUTLASS_DIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "CUTLASS 3.5.0" in proc.stderr and "major.minor differ" in proc.stderr
