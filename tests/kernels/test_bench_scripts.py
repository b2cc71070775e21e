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
