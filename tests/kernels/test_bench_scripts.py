"""The CPU bench scripts run end to end on a tiny layer; ggml's absence is a stated skip."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_ggml_runs_or_says_why_it_skips():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_ggml.py"), "--m", "1,3",
                           "--n", "64", "--k", "256", "--rounds", "2"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if importlib.util.find_spec("ggml") is None:
        assert proc.stdout.startswith("skipped: ggml-python is not importable"), proc.stdout
    else:
        lines = [l for l in proc.stdout.splitlines() if l.startswith("M=")]
        assert len(lines) == 2 and "ggml Q4_0" in lines[0], proc.stdout


def test_bench_under_load_times_quiet_and_loaded_phases_in_one_run(tmp_path):
    import json

    out = tmp_path / "load.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_under_load.py"), "--n", "64",
                           "--k", "256", "--ms", "1,3", "--cycles", "1", "--phase-s", "0.4",
                           "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert [ph["kind"] for ph in doc["phases"]] == ["quiet", "loaded"]
    assert all("others_cores" in ph["load_check"] for ph in doc["phases"])
    assert {(p["path"], p["m"]) for p in doc["points"]} == {(p, m) for p in ("w4a8_native", "dense")
                                                           for m in (1, 3)}
    for p in doc["points"]:  # both kinds timed, the slowdown their medians' ratio
        assert p["quiet"]["calls"] >= 5 and p["loaded"]["calls"] >= 5
        assert abs(p["slowdown"] - p["loaded"]["median_ms"] / p["quiet"]["median_ms"]) < 1e-12
    assert [v["m"] for v in doc["verdicts"]] == [1, 3]
    assert doc["provenance"]["cpu"] and doc["provenance"]["threads"] >= 1
