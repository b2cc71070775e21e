"""The bench harness, sweeps, crossover and the bench command, on small real layers."""
from __future__ import annotations

import csv
import math
import json

import pytest
import torch

from workbench.__main__ import main
from workbench.bench import (
    BenchRecord, bench_layer_weight, host_provenance, records_from_json, summarize,
    synthetic_bench_layer, time_fn, write_csv, write_json,
)
from workbench.errors import InvalidInputError
from workbench.sweeps import crossover, slowdown, sweep_alignment, sweep_group, sweep_m

REQUIRED = {"path", "m", "n", "k", "group_size", "median_ms", "rel_error", "available"}


def test_summarize_and_time_fn():
    t = summarize([0.001, 0.002, 0.003, 0.004, 0.100])
    assert t.median_ms == pytest.approx(3.0) and t.min_ms == pytest.approx(1.0)
    assert t.p20_ms == pytest.approx(1.8) and t.p80_ms == pytest.approx(23.2)
    calls = []
    t = time_fn(lambda: calls.append(1), warmup=2, repeats=3)
    assert len(calls) == 5 and t.repeats == 3


@pytest.fixture(scope="module")
def small_records():
    layer = synthetic_bench_layer(64, 256, 64, seed=3)
    seen = []
    recs = bench_layer_weight(layer, ["w4a8_native", "w4a16_fallback", "int8_mm", "bf16_dense",
                                      "triton_w4a8"], [1, 9], repeats=2,
                              progress=lambda d, t, msg: seen.append((d, t)))
    return recs, seen


def test_records_errors_and_availability(small_records):
    recs, seen = small_records
    assert len(recs) == 10 and seen[-1] == (10, 10)
    by = {(r.path, r.m): r for r in recs}
    nat = by[("w4a8_native", 9)]
    assert nat.available and nat.median_ms > 0 and nat.p20_ms <= nat.p80_ms
    assert 0 < nat.cpu_median_ms  # CPU time of the calling thread, beside wall time
    assert nat.kernel_rel_error <= 1e-6  # against the exact W4A8 reference
    assert 0.01 < nat.rel_error < 0.3  # int4 weights + int8 activations vs the float layer
    fb = by[("w4a16_fallback", 9)]
    assert fb.kernel_rel_error <= 2.0 ** -8 and fb.detail.startswith("ran ")
    assert by[("int8_mm", 9)].rel_error is None and "group scales" in by[("int8_mm", 9)].detail
    tri = by[("triton_w4a8", 1)]
    if not torch.cuda.is_available():
        assert not tri.available and tri.why == "no CUDA device" and tri.median_ms is None


def test_token_counts_are_checked_before_anything_runs():
    layer = synthetic_bench_layer(64, 256, 64, seed=3)
    for ms, gist in (([0, 1], r"m\[0\]: 0; accepted: an integer from 1 to 1048576"),  # ran, error None
                     ([1, True], r"m\[1\]: True"), ([2.0], r"m\[0\]: 2.0"), ([], r"m: empty"),
                     ([2**40], r"m\[0\]: 1099511627776; accepted")):
        with pytest.raises(InvalidInputError, match=gist):
            bench_layer_weight(layer, ["w4a8_native"], ms, repeats=1)


def test_json_and_csv_round_trip(small_records, tmp_path):
    recs, _ = small_records
    prov = host_provenance()
    assert {"host", "isa", "torch", "threads", "date"} <= set(prov)
    p = write_json(recs, tmp_path / "r.json", prov)
    prov2, recs2 = records_from_json(p)
    assert prov2["torch"] == torch.__version__ and len(recs2) == len(recs)
    # the schema keeps µs: a time in ms comes back within a rounding of its own value
    got, want = recs2[0].to_dict(), recs[0].to_dict()
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, float):
            assert math.isclose(got[key], value, rel_tol=1e-12), key
        else:
            assert got[key] == value, key
    c = write_csv(recs, tmp_path / "r.csv", prov)
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == len(recs) and rows[0]["prov_torch"] == torch.__version__


def _rec(path, m, med, p20=None, p80=None):
    return BenchRecord(path=path, m=m, n=8, k=8, group_size=8, median_ms=med, rel_error=0.0,
                       available=True, p20_ms=p20 or med, p80_ms=p80 or med)


def test_crossover_and_slowdown_logic():
    recs = [_rec("w4a8_native", 1, 2.0), _rec("w4a16_fallback", 1, 1.0),
            _rec("w4a8_native", 32, 1.1, 1.0, 1.2), _rec("w4a16_fallback", 32, 1.15, 1.1, 1.3),
            _rec("w4a8_native", 128, 1.0, 0.9, 1.05), _rec("w4a16_fallback", 128, 3.0, 2.5, 3.5)]
    c = crossover(recs)
    assert c.m == 32 and c.ratio == pytest.approx(1.15 / 1.1) and not c.separated and c.holds_above
    assert dict(c.points)[128] == pytest.approx(3.0)
    never = crossover(recs[:2])
    assert never.m is None and never.ratio is None
    with pytest.raises(InvalidInputError, match="no CPU-time measurement"):
        crossover(recs, clock="cpu")
    with pytest.raises(InvalidInputError, match="clock"):
        crossover(recs, clock="sundial")
    recs += [_rec("vllm_dynamic4bit", 1, 50.0),
             BenchRecord(path="vllm_dynamic4bit", m=128, n=8, k=8, group_size=8, median_ms=None,
                         rel_error=None, available=True, why="not timed")]
    s = slowdown(recs)
    assert s.points == ((1, 50.0),) and s.untimed == (128,) and s.max_factor == 50.0
    with pytest.raises(InvalidInputError, match="no M has timings"):
        crossover(recs, fast="nope")


def test_should_stop_ends_a_sweep_early():
    calls = []
    recs = sweep_m(32, 128, 32, ms=(1, 2, 4), repeats=1,
                   should_stop=lambda: calls.append(1) or len(calls) > 1)
    assert {r.m for r in recs} == {1}


def test_sweeps_cover_alignment_and_groups():
    recs = sweep_alignment(ns=(64, 68), k=128, group_size=64, ms=(2,), repeats=1,
                           paths=("w4a8_native", "w4a16_tinygemm"))
    tg = {r.n: r for r in recs if r.path == "w4a16_tinygemm"}
    assert tg[64].available and not tg[68].available and "N % 16" in tg[68].why
    assert "N % 16" in [r for r in recs if r.n == 68][0].layer
    grp = sweep_group((-1, 32), n=32, k=128, ms=(3,), repeats=1)
    assert {r.group_size for r in grp} == {-1, 32}
    assert all(r.kernel_rel_error is not None for r in grp)
    ms = sweep_m(32, 128, 32, ms=(1, 4), repeats=1)
    assert {(r.path, r.m) for r in ms} == {(p, m) for p in ("w4a8_native", "w4a16_fallback") for m in (1, 4)}


def test_bench_cli_issue_form(capsys, tmp_path):
    out = tmp_path / "res.json"
    rc = main(["bench", "--m", "1,3", "--n", "32", "--k", "256", "--group", "128", "--paths",
               "w4a8_native,w4a16_fallback,int8_mm,bf16_dense,vllm_dynamic4bit", "--json",
               "--repeats", "1", "--out", str(out)])
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(lines) == 10 and all(REQUIRED <= set(d) for d in lines)
    assert {d["path"] for d in lines} == {"w4a8_native", "w4a16_fallback", "int8_mm", "bf16_dense",
                                          "vllm_dynamic4bit"}
    doc = json.loads(out.read_text())
    assert doc["provenance"]["torch"] == torch.__version__ and len(doc["records"]) == 10


@pytest.mark.parametrize("argv,match", [
    (["--m", "1,x"], "--m"), (["--paths", "warp_drive"], "unknown warp_drive"),
    (["--group", "100"], "does not divide"), (["--model", "Llama-3.1-8B", "--layer", "nope"], "--layer"),
])
def test_bench_cli_bad_input_is_one_line(argv, match, capsys):
    assert main(["bench", "--n", "32", "--k", "256", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and match in err


def test_stays_ahead_from_differs_from_first_win_when_timings_cross_back():
    from workbench.sweeps import stays_ahead_from

    assert stays_ahead_from([(1, 1.2), (8, 0.9), (64, 1.5), (512, 2.0)]) == 64
    assert stays_ahead_from([(1, 0.5), (8, 0.9)]) is None
    assert stays_ahead_from([(1, 1.1), (8, 1.3)]) == 1


def _busy_beside(seconds: float, fn):
    """fn() while one process per usable core spins beside it (a loaded machine, made here)."""
    import subprocess
    import sys
    import time

    from workbench.noise import usable_cores

    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(usable_cores())]
    try:
        time.sleep(0.3)  # the spinners have started
        return fn()
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def test_load_check_counts_what_other_processes_took():
    from workbench.noise import LOAD_SLACK_CORES, CpuSample, load_check

    def check(busy, own, threads, wall=1.0, cores=2):
        return load_check(CpuSample(0.0, 0.0, 0.0, 0.5, cores),
                          CpuSample(wall, busy, own, 0.5, cores), threads)

    # 2 threads on 2 cores: 0.8 of a core taken by others is more than the slack; 0.2 is not
    assert check(1.8, 1.0, 2).crowded and check(1.8, 1.0, 2).others_cores == pytest.approx(0.8)
    assert not check(1.2, 1.0, 2).loaded and check(1.2, 1.0, 2).others_cores == pytest.approx(0.2)
    # one thread leaves a core free: others may take it (plus the slack) before it is crowded
    assert not check(1.8, 0.3, 1).crowded and check(2.0, 0.0, 1).crowded
    assert 1 + LOAD_SLACK_CORES < 2.0
    # under 10 ms ticks' resolution: unmeasured, never flagged on a guess
    assert check(0.1, 0.0, 2, wall=0.05).others_cores is None
    doc = check(1.8, 1.0, 2).to_dict()
    assert doc["loaded"] is True and doc["crowded"] is True and doc["others_cores"] == 0.8


def test_a_run_beside_busy_processes_is_flagged_loaded():
    from workbench.noise import cpu_sample, load_check, timing_noise

    layer = synthetic_bench_layer(256, 1024, 128, seed=1)

    def run():
        start = cpu_sample()
        recs = bench_layer_weight(layer, ["w4a8_native", "bf16_dense"], [1, 16], repeats=40)
        return recs, load_check(start, cpu_sample(), torch.get_num_threads())

    recs, check = _busy_beside(1.0, run)
    assert check.loaded and check.crowded, check
    assert all(r.others_cores is not None and r.others_cores > 0.5 for r in recs)
    noise = timing_noise([r.to_dict() for r in recs], cores=check.cores)
    assert noise.crowded and noise.overloaded and noise.noisy


def test_bench_cli_flags_a_loaded_run_in_provenance_and_text(capsys, tmp_path):
    out = tmp_path / "res.json"
    argv = ["bench", "--m", "1,16", "--n", "256", "--k", "1024", "--paths", "w4a8_native,bf16_dense",
            "--repeats", "40", "--out", str(out)]
    assert _busy_beside(1.0, lambda: main(argv)) == 0
    text = capsys.readouterr().out
    check = json.loads(out.read_text())["provenance"]["load_check"]
    assert check["loaded"] is True and check["others_cores"] > 0.5
    assert "other processes took the cores" in text and "flagged loaded" in text
def test_per_token_errors_judge_every_path_against_the_float_weight():
    from workbench.bench import bench_activation, int4_weight_of, per_token_errors
    from workbench.metrics import per_token_rel_error

    layer = synthetic_bench_layer(64, 256, 64, seed=3)
    x = bench_activation(9, 256)
    errs, skipped = per_token_errors(int4_weight_of(layer), layer.source_weight,
                                     ["w4a8_native", "w4a16_fallback", "triton_w4a8"], x)
    assert set(errs) == {"w4a8_native", "w4a16_fallback"} and "CUDA" in skipped["triton_w4a8"]
    ref = x.double() @ layer.source_weight.double().t()
    from workbench.execution import execution_path

    p = execution_path("w4a16_fallback")
    state = p.prepare(int4_weight_of(layer))
    y = p.finish(p.run(p.make_input(x, state), state), None, state)
    # The fallback picks its engine per call by timing (fp32 or bf16 dequant, tinygemm), so a
    # second run may round differently: equal to within that rounding (about 1e-3 of y), far
    # from the errors against the dequantized weight (those are 0 to 4e-3, these about 0.1).
    fresh = per_token_rel_error(y, ref).tolist()
    assert len(errs["w4a16_fallback"]) == len(fresh) == 9 and len(errs["w4a8_native"]) == 9
    assert all(abs(a - b) < 1e-2 for a, b in zip(errs["w4a16_fallback"], fresh)), (errs["w4a16_fallback"], fresh)
    assert all(0.02 < e < 0.2 for e in fresh)
    assert all(0 < e < 0.2 for e in errs["w4a8_native"])


def test_result_record_is_the_one_ms_to_us_conversion(small_records):
    from workbench.bench import result_record

    recs, _ = small_records
    timed = next(r for r in recs if r.median_ms is not None and r.path == "w4a8_native")
    rr = result_record(timed)
    assert rr.median_us == timed.median_ms * 1e3 and rr.p80_us == timed.p80_ms * 1e3
    assert rr.detail["rel_error"] == timed.rel_error and rr.detail["computes"] == "w4a8"
    untimed = next(r for r in recs if r.median_ms is None)
    with pytest.raises(InvalidInputError, match="not timed"):
        result_record(untimed)


def test_first_call_prepares_a_path_and_makes_one_call_at_m_1():
    """What the Kernels page runs before a sweep, so that a path compiled at its first call
    pays for compiling outside the timed calls."""
    from dataclasses import replace

    from workbench.bench import first_call_s, int4_weight_of
    from workbench.execution import execution_path

    w = int4_weight_of(synthetic_bench_layer(64, 256, 64))
    native = execution_path("w4a8_native")
    shapes = []
    seen = replace(native, run=lambda inputs, state: shapes.append(tuple(inputs.shape))
                   or native.run(inputs, state))
    took = first_call_s(w, seen)
    assert shapes == [(1, 256)] and 0 < took < 60


def test_a_record_is_unreliable_by_its_spread_or_by_others_load():
    from workbench.noise import SPREAD_LIMIT, record_unreliable

    quiet = {"p20_ms": 1.0, "p80_ms": 1.2, "others_cores": 0.1, "threads": 1}
    assert record_unreliable(quiet, cores=2) is None
    wide = {**quiet, "p80_ms": SPREAD_LIMIT * 1.0 + 0.5}
    assert record_unreliable(wide, cores=2) == "p80/p20 2.00x"
    crowded = {**quiet, "others_cores": 1.8, "threads": 2}
    assert record_unreliable(crowded, cores=2) == "other processes kept 1.8 cores busy"
    assert record_unreliable({"p20_ms": None, "p80_ms": None}, cores=2) is None  # nothing measured: no claim
