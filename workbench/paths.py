"""The repository's own folders, derived in one place (the app, the CLI and notebooks read them).

Run from a checkout (`pip install -e .`), these are the bundled samples and the committed
results; an installed wheel has neither, and the readers say so by name.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["REPO_ROOT", "SAMPLE_ROOT", "RESULTS_DIR"]

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_ROOT = REPO_ROOT / "sample_models"
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
