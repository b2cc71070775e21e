"""gpu_bench times what vLLM runs beside this project's kernels; gpu_report reads it against
Humming W4A16. The planning and the report run here on records made in the bench's own form."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    from workbench.gpu_part import GpuPart

    mod = _load("gpu_bench")
    mod.use_part(GpuPart("NVIDIA H200", 90, 132, 50 * 2 ** 20, 139.8, 1980, "sm90-h200", "test"))
    return mod


def test_engines_are_planned_where_vllm_runs_them(bench, monkeypatch):
    monkeypatch.setattr(bench, "ENGINE_PATHS", bench.ENGINES)
    plan = bench.bench_plan((4096, 4096), 16, {-1: "pc", 128: "g128"}, peers=False)
    engines = [(p, g) for p, g, _ in plan if p in bench.ENGINES]
    # int8 activations per-channel only (vLLM runs grouped int8 in bf16); forced at g128
    assert engines == [("vllm_humming", -1), ("vllm_humming_int8", -1), ("vllm_machete", -1),
                       ("vllm_humming", 128), ("vllm_humming_int8_forced", 128),
                       ("vllm_machete", 128)]
    monkeypatch.setattr(bench, "ENGINE_PATHS", ())
    assert not [p for p, _, _ in bench.bench_plan((4096, 4096), 16, {-1: "pc"}, False)
                if p in bench.ENGINES]


def test_engines_that_cannot_run_are_logged_not_timed(bench):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the probes may pass")
    assert bench.engines_that_run(list(bench.ENGINES)) == ()
    assert any("vllm_humming: not timed (no CUDA device)" in line for line in bench.LOG)
    with pytest.raises(SystemExit, match="--engines: unknown"):
        bench.engines_that_run(["marlin"])


def _timing(us, engine=None):
    t = {"time_us": us, "p20_us": us * 0.98, "p80_us": us * 1.02, "samples": 25,
         "method": "graph x100", "ops": 1, "bytes": 1, "config": None}
    return {**t, "engine": engine} if engine else t


def test_report_gives_every_ratio_against_humming_and_the_jit_time(bench, tmp_path):
    shape = (4096, 4096)
    recs = []
    for m, hum in ((1, 10.0), (256, 40.0)):
        jit = {"prepare_s": 2.0, "first_call_s": 1.5, "jit_s": 1.25, "rel_err_f32": 2.5e-3}
        for g in (-1, 128):
            recs.append(bench._record("vllm_humming", g, shape, m, _timing(hum, jit)))
            recs.append(bench._record("w4a16_fallback", g, shape, m, _timing(2 * hum)))
            recs.append(bench._record("vllm_machete", g, shape, m, _timing(1.5 * hum, jit)))
        recs.append(bench._record("vllm_humming_int8", -1, shape, m, _timing(0.6 * hum, jit)))
        recs.append(bench._record("vllm_humming_int8_forced", 128, shape, m, _timing(0.7 * hum, jit)))
        recs.append(bench._record("bf16_dense", -1, shape, m, _timing(1.2 * hum)))
    f = tmp_path / "h200_bench.json"
    f.write_text(json.dumps({"schema": "w4a8-workbench-results/1",
                             "provenance": {"platform": "sm90-h200"}, "records": recs}))
    report = _load("gpu_report")
    _, loaded = report.load_records(f)
    lines = report.humming_report(loaded)
    text = "\n".join(lines)
    assert "per-channel: Humming int8 activations (vLLM's, per-channel): 0.60-0.60" in text
    assert "g128: Humming int8 forced, grouped (not a vLLM path): 0.70-0.70" in text
    assert "g128: this project's W4A16 fallback: 2.00-2.00" in text
    assert "per-channel: Machete (vLLM's W4A16 default on Hopper): 1.50-1.50" in text
    assert "g128: cuBLAS bf16 (dequantized weight): 1.20-1.20" in text
    assert "int8 forced" not in "\n".join(l for l in lines if l.startswith("  per-channel"))
    assert "JIT compile of a first call (apart from run time): 1.25-1.25 s over 12 records" in text
    assert "vllm_humming: relative error against the float32 product 2.5e-03-2.5e-03" in text
    assert report.humming_report({}) == ["Against Humming W4A16: no vllm_humming records in this run"]


def test_groups_narrow_the_bench_to_the_engines_at_those_sizes(bench, monkeypatch):
    """--groups 128 leaves per-channel out: no per-channel baselines, only the g128 engines."""
    monkeypatch.setattr(bench, "ENGINE_PATHS", ("vllm_humming", "vllm_machete"))
    monkeypatch.setattr(bench, "ONLY_PATHS", frozenset({"vllm_humming", "vllm_machete"}))
    plan = bench.bench_plan((4096, 4096), 16, {128: "g128"}, peers=True)
    assert [(p, g) for p, g, _ in plan] == [("vllm_humming", 128), ("vllm_machete", 128)]
