"""Calibrations are cached per session in a private folder, not in the user's cache; the
validation script is loaded once, as a module, for the tests that check its tables."""
import importlib.util
from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("WORKBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("perf-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def validate_perf():
    """benchmarks/validate_perf.py as a module (it is a script, not a package)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "validate_perf.py"
    spec = importlib.util.spec_from_file_location("validate_perf", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
