"""On a GPU, `bench` (and so the Kernels page and notebook 02, which run its sweep) reports the
kernels' device time, the figure benchmarks/gpu_bench.py measures, and keeps a JIT compile
apart: Humming on a cold JIT cache is timed at every M.

Off a GPU the part matching and the copy count run (no device needed); the agreement test
skips, saying why.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from workbench.gpu_part import match_preset, short_name
from workbench.gpu_timing import copies_for

ROOT = Path(__file__).resolve().parents[2]
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the GPU timer runs on the device")


def test_parts_are_matched_by_name_and_shape_never_by_capability_alone():
    mib = 2 ** 20
    assert match_preset("NVIDIA H100 80GB HBM3", 90, 132, 50 * mib, 79.2)[0] == "sm90-h100"
    assert match_preset("NVIDIA H200", 90, 132, 50 * mib, 139.8)[0] == "sm90-h200"
    assert match_preset("NVIDIA H200", 90, 132, 96 * mib, 139.8)[0] is None  # another L2: another part
    preset, why = match_preset("NVIDIA H800", 90, 132, 50 * mib, 79.2)
    assert preset is None and "no preset's name" in why
    preset, why = match_preset("NVIDIA H100 PCIe", 90, 114, 50 * mib, 79.2)
    assert preset is None and "114 SMs, not 132" in why
    assert short_name("sm90-h100") == "h100" and short_name(None) == "gpu"


def test_copies_pass_the_l2_three_times():
    l2 = 50 * 2 ** 20
    assert copies_for(8 * 2 ** 20, l2) == 19  # 4096 x 4096 int4: 19 copies stream 152 MiB
    assert copies_for(10 ** 9, l2) == 1
    assert copies_for(1, l2) == 32  # at most 32


def _harness():
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _humming_harness(tmp_path, monkeypatch):
    """The harness set up for this GPU with Humming as its engine, on a cold Humming JIT cache
    (skips where Humming cannot run)."""
    from w4a8_kernels.registry import get_path

    ok, why = get_path("vllm_humming").availability()
    if not ok:
        pytest.skip(f"vllm_humming cannot run here: {why}")
    monkeypatch.setenv("HUMMING_CACHE_DIR", str(tmp_path / "humming"))
    h = _harness()
    h.use_part(h.read_part())
    h.ENGINE_PATHS = ("vllm_humming",)
    h.TABLES = h.module_tables()
    return h


# bench's path name -> the harness's name for the same kernel
SAME = {"vllm_humming": "vllm_humming", "cublas_bf16": "bf16_dense", "triton_w4a8": "w4a8_native",
        "triton_w4a16": "w4a16_fallback"}


@gpu
def test_bench_medians_agree_with_the_harness_and_humming_is_timed_at_every_m(tmp_path, monkeypatch):
    from w4a8_kernels.registry import Int4Weight
    from workbench.bench import bench_weight

    h = _humming_harness(tmp_path, monkeypatch)
    n = k = 4096
    g = 128
    prob = h.Problem((n, k), g)
    weight = Int4Weight(prob.w_q.cpu(), prob.scales.cpu(), g)
    ms = [1, 128, 4096]
    # the budget is a fraction of Humming's cold compile: it must never drop the kernel
    recs = bench_weight(weight, None, list(SAME), ms, max_call_s=0.5)
    got = {(r.path, r.m): r for r in recs}
    for m in ms:
        r = got[("vllm_humming", m)]
        assert r.median_ms is not None, f"Humming not timed at M = {m}: {r.why}"
        assert r.timing.startswith("device: graph") or r.timing.startswith("device: events"), r.timing
        assert r.first_call_s is not None
    misses = []
    for path, theirs in SAME.items():
        for m in ms:
            ours = got[(path, m)].median_ms * 1e3
            ref = h.measure(theirs, prob, m)["time_us"]
            if abs(ours / ref - 1) > 0.10:
                misses.append(f"{path} M = {m}: bench {ours:.2f} us, harness {ref:.2f} us")
    assert not misses, misses


@gpu
def test_the_kernels_page_child_times_humming_as_the_harness_does(tmp_path, monkeypatch):
    """The Kernels page measures in its child process (workbench.contained), through the same
    `bench` code: Humming at M = 1 within 10% of the harness's figure, its first call (a cold
    JIT compile) timed apart and never in a sample."""
    from workbench.contained import Worker, layer_source_synthetic

    h = _humming_harness(tmp_path, monkeypatch)  # the child inherits the cold JIT cache
    n = k = 4096
    g = 128
    source = layer_source_synthetic({"out_features": n, "in_features": k, "group_size": g}, "faces_4096")
    worker = Worker()
    try:
        first = worker.first_call(source, "vllm_humming")
        recs = {r["m"]: r for r in worker.bench(source, ["vllm_humming"], [1, 128], repeats=5, warmup=2,
                                                  max_call_s=5.0)}
    finally:
        worker.close()
    assert first > 0
    misses = []
    for m in (1, 128):
        r = recs[m]
        assert r["median_ms"] is not None, r
        assert r["timing"].startswith("device: "), r["timing"]
        ref = h.measure("vllm_humming", h.Problem((n, k), g), m)["time_us"]
        if abs(r["median_ms"] * 1e3 / ref - 1) > 0.10:
            misses.append(f"M = {m}: page {r['median_ms'] * 1e3:.2f} us, harness {ref:.2f} us")
    assert not misses, misses
