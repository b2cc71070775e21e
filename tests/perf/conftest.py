"""Calibrations are cached per session in a private folder, not in the user's cache."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("WORKBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("perf-cache")))
    yield
    mp.undo()
