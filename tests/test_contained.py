"""Measurements in a child process (workbench.contained): the same records as in this process,
and a crash, a hang or an out-of-memory there comes back as a named failure while this process
and the next run go on. Each failure is real in the child: a SIGSEGV from reading address 0,
SIGILL, abort, SIGKILL, a MemoryError, a sleep past the limit."""
from __future__ import annotations

import dataclasses
import os
import time

import pytest

from workbench.bench import BenchRecord, bench_layer_weight
from workbench.contained import PLANT_ENV, Worker, layer_from_source, layer_source_synthetic
from workbench.errors import InvalidInputError, MeasurementDiedError
from workbench.synthetic import SyntheticSpec

PATHS = ["w4a8_native", "w4a16_fallback"]
SOURCE = layer_source_synthetic(dataclasses.asdict(SyntheticSpec(out_features=64, in_features=256, group_size=128)),
                                "model.layers.0.mlp.down_proj")


def _bench(worker: Worker, ms=(1, 16), **kw) -> list[dict]:
    return worker.bench(SOURCE, PATHS, list(ms), repeats=2, warmup=1, max_call_s=5.0, **kw)


@pytest.fixture
def planted(monkeypatch):
    """A worker whose child dies as `spec` says (WORKBENCH_CONTAINED_PLANT, read there only)."""
    made = []

    def make(spec: str) -> Worker:
        monkeypatch.setenv(PLANT_ENV, spec)
        w = Worker(threads=1)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def test_a_run_in_the_child_gives_the_records_this_process_gives():
    w = Worker()  # this process's torch threads: a bf16 GEMM's sums depend on their count
    try:
        seen = []
        got = _bench(w, progress=lambda done, total, msg: seen.append((done, total, msg)))
        pid = w.pid()
        again = _bench(w, ms=(4,))  # the same child serves the next run
        assert w.pid() == pid and w.starts == 1 and len(again) == 2
    finally:
        w.close()
    assert seen == [(1, 4, "M = 1: w4a8_native"), (2, 4, "M = 1: w4a16_fallback"),
                    (3, 4, "M = 16: w4a8_native"), (4, 4, "M = 16: w4a16_fallback")]
    assert all(set(r) == {f.name for f in dataclasses.fields(BenchRecord)} for r in got)
    here = [r.to_dict() for r in bench_layer_weight(layer_from_source(SOURCE), PATHS, [1, 16], repeats=2,
                                                    warmup=1, max_call_s=5.0)]
    # the same layer rebuilt from its source, the same code: the same records. Which engine or
    # fallback ran is each process's own timed choice; W4A8's integer math is exact whichever
    # engine ran it, and the fallback's figures are compared where the same one ran.
    for a, b in zip(got, here):
        for key in ("path", "m", "n", "k", "layer", "computes", "available", "error_rows"):
            assert a[key] == b[key], (key, a[key], b[key])
        if a["path"] == "w4a8_native" or a["detail"] == b["detail"]:
            for key in ("rel_error", "kernel_rel_error", "sqnr_db", "worst_token_rel_error"):
                assert a[key] == b[key], (a["path"], a["m"], key, a[key], b[key])
        assert a["median_ms"] > 0 and a["timing"] == "host clock" and a["repeats"] == 2


@pytest.mark.parametrize("spec, how, path, m", [
    ("segv:w4a8_native@16", "SIGSEGV", "w4a8_native", 16),
    ("ill:w4a16_fallback@1", "SIGILL", "w4a16_fallback", 1),
    ("abort:w4a8_native@1", "SIGABRT", "w4a8_native", 1),
    ("kill:w4a8_native@16", "out of memory", "w4a8_native", 16),  # what the OOM killer sends
    ("oom:w4a16_fallback@16", "out of memory", "w4a16_fallback", 16),
])
def test_a_dying_child_is_named_and_the_next_run_works(planted, monkeypatch, spec, how, path, m):
    w = planted(spec)
    with pytest.raises(MeasurementDiedError) as err:
        _bench(w)
    e = err.value
    assert (e.how, e.path, e.m) == (how, path, m)
    text = str(e)
    assert f"path `{path}` at M = {m}" in text and "nothing else ended" in text
    assert f"drop `{path}` from paths" in text.lower()
    if how == "SIGILL":
        assert "W4A8_KERNELS_MAX_ISA=avx512" in text
    if spec.startswith("segv"):  # the child's own stack, kept for a report
        assert "Segmentation fault" in e.stderr_tail
    assert not w.alive()
    monkeypatch.delenv(PLANT_ENV)
    assert len(_bench(w, ms=(1,))) == 2 and w.starts == 2  # a fresh child


def test_a_hang_is_stopped_at_its_limit(planted):
    w = planted("hang:w4a8_native@1")
    t0 = time.monotonic()
    with pytest.raises(MeasurementDiedError) as err:
        _bench(w, timeout_s=5)
    assert 5 <= time.monotonic() - t0 < 60
    assert err.value.how == "timeout" and err.value.path == "w4a8_native"
    assert "did not answer within 5 s during the first call of path `w4a8_native` at M = 1" in str(err.value)
    assert not w.alive()


def test_a_named_error_in_the_child_is_raised_here_as_itself():
    w = Worker(threads=1)
    try:
        with pytest.raises(InvalidInputError, match=r"m\[0\]: 0; accepted: an integer from 1"):
            w.bench(SOURCE, PATHS, [0], repeats=1, warmup=0, max_call_s=5.0)
        assert w.alive()  # a refused input ends nothing
        assert len(_bench(w, ms=(1,))) == 2 and w.starts == 1
    finally:
        w.close()


def test_an_interrupted_request_does_not_answer_the_next_one():
    # a page's Stop raises inside the progress callback: the child finishes that run, and the
    # next request reads past its lines to its own answer
    w = Worker(threads=1)

    class Stopped(Exception):
        pass

    def stop(*_):
        raise Stopped

    try:
        with pytest.raises(Stopped):
            _bench(w, ms=(1, 16, 32), progress=stop)
        got = _bench(w, ms=(2,))
        assert [(r["path"], r["m"]) for r in got] == [(p, 2) for p in PATHS] and w.starts == 1
    finally:
        w.close()


def test_the_child_goes_with_its_worker():
    w = Worker(threads=1)
    _bench(w, ms=(1,))
    pid = w.pid()
    w.close()
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)


def test_the_childs_cpu_time_is_the_runs_own_not_others_load():
    # The page's load check runs in the server while the child computes: without the child's
    # pid its work read as another process's load, and every run was flagged noisy.
    import subprocess
    import sys

    from workbench.noise import cpu_sample

    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 1.0: pass"])
    try:
        start, start_alone = cpu_sample((child.pid,)), cpu_sample()
        time.sleep(0.8)
        end, end_alone = cpu_sample((child.pid,)), cpu_sample()
    finally:
        child.wait()
    # the child's CPU seconds (it spins), and none of it in this process's own reading
    assert (end.own_s - start.own_s) - (end_alone.own_s - start_alone.own_s) >= 0.3
