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


def _results(platform: str, records: list[tuple]) -> dict:
    return {"schema": "w4a8-workbench-results/1",
            "provenance": {"platform": platform, "date_utc": f"run on {platform}", "failed": []},
            "records": [{"path": p, "n": n, "k": k, "group_size": -1, "m": m, "median_us": us,
                         "detail": {"gbs": 1.0}} for p, n, k, m, us in records]}


def test_merge_results_adds_a_parts_new_records_and_refuses_another_parts(tmp_path):
    import json

    base = tmp_path / "h200_bench.json"
    base.write_text(json.dumps(_results("sm90-h200", [("int8_mm", 4096, 4096, 32, 11.0)])))
    base.with_suffix(".csv").write_text("stale\n")
    run = tmp_path / "run.json"
    run.write_text(json.dumps(_results("sm90-h200", [("int8_mm", 4096, 4096, 32, 99.0),  # held: stays 11
                                                     ("int8_mm", 4096, 11008, 32, 25.0),
                                                     ("vllm_machete", 4096, 11008, 32, 9.0)])))
    script = [sys.executable, str(ROOT / "benchmarks" / "merge_results.py")]
    proc = subprocess.run([*script, str(base), str(run), "--not-paths", "vllm_machete"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 records added, 1 already held" in proc.stdout
    doc = json.loads(base.read_text())
    assert [(r["k"], r["median_us"]) for r in doc["records"]] == [(4096, 11.0), (11008, 25.0)]
    assert doc["provenance"]["calls"][-1]["shapes"] == ["4096x11008"]
    assert base.with_suffix(".csv").read_text().splitlines()[1].startswith("int8_mm,")
    other = tmp_path / "h100_run.json"
    other.write_text(json.dumps(_results("sm90-h100", [("int8_mm", 4096, 14336, 32, 30.0)])))
    proc = subprocess.run([*script, str(base), str(other)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode != 0 and "takes only its own part's records" in proc.stderr
    assert len(json.loads(base.read_text())["records"]) == 2  # untouched
