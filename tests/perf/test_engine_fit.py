"""The kernel vLLM selects on CUDA (Humming) is costed from its own H200 timings.

benchmarks/h200_engines.sh timed Humming beside this project's kernels; `selected` on the
H200 reads that fit (basis "measured"), on other CUDA parts the same fit scaled.
"""
from __future__ import annotations

import math
import statistics

import pytest

from workbench.perf.calibrate import ENGINE_PATHS, ENGINE_RESULTS, calibrate_gpu
from workbench.perf.predict import predict
from workbench.results import load_results

RECORDS = [r for r in load_results(ENGINE_RESULTS).records if r.path in ENGINE_PATHS]


def test_the_engine_records_cover_decode_to_prefill_on_many_shapes():
    shapes = {(r.n, r.k) for r in RECORDS}
    assert len(shapes) >= 10 and {r.m for r in RECORDS} >= {1, 16, 64, 256, 1024, 4096}
    assert {r.path for r in RECORDS} == set(ENGINE_PATHS)


def test_the_fit_follows_humming_on_every_record():
    cal = calibrate_gpu(ENGINE_RESULTS)
    errs, inside = [], 0
    for r in RECORDS:
        p = predict("sm90-h200", "selected", r.m, r.n, r.k, r.group_size,
                    scheme="w4a8-int" if r.path == "vllm_humming_int8" else "w4a16")
        assert p.basis == "measured" and "Humming" in p.kernel, p
        assert p.predicted_us == pytest.approx(cal.predict(r.path, r.m, r.n, r.k, r.group_size), rel=1e-9)
        errs.append(abs(p.predicted_us / r.median_us - 1))
        inside += p.low_us <= r.median_us <= p.high_us
    assert statistics.median(errs) < 0.08 and sorted(errs)[int(0.9 * len(errs))] < 0.2
    assert inside / len(RECORDS) >= 0.9


def test_vllm_runs_grouped_w4a8_as_w4a16_and_the_cost_says_so():
    # schema.py:354-357: int8 input with a groupwise weight falls back to bf16 activations,
    # so a g128 W4A8 layer costs what the W4A16 layer costs; per-channel keeps int8.
    g128 = [predict("sm90-h200", "selected", 256, 8192, 8192, 128, scheme=s) for s in ("w4a8-int", "w4a16")]
    assert g128[0].predicted_us == pytest.approx(g128[1].predicted_us)
    chan = [predict("sm90-h200", "selected", 1024, 8192, 8192, -1, scheme=s) for s in ("w4a8-int", "w4a16")]
    assert chan[0].predicted_us < 0.8 * chan[1].predicted_us  # measured 0.57 at M = 1024


def test_another_hopper_part_scales_the_fit_by_its_bandwidth():
    h200 = predict("sm90-h200", "selected", 1, 28672, 8192, 128, scheme="w4a16")
    h100 = predict("sm90-h100", "selected", 1, 28672, 8192, 128, scheme="w4a16")
    assert h100.basis == "scaled" and "Humming" in h100.kernel
    # decode streams the weight: the H100's 3.35 TB/s against the H200's 4.8
    assert 1.2 < h100.predicted_us / h200.predicted_us < math.ceil(4.8 / 3.35 * 10) / 10
