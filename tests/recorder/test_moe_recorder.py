"""The MoE recorder re-run against an sdist: a sample of the committed cases re-recorded from
vLLM's own code must give what the fixture holds (WORKBENCH_VLLM_SRC: an unpacked sdist of a
release with MoE rules)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workbench.dispatch.moe import MOE_VERSIONS
from workbench.recorder.moe import draw, fixture_name, record
from workbench.recorder.sdist import sdist_version

SRC = os.environ.get("WORKBENCH_VLLM_SRC")
FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_draw_is_the_committed_grid_and_ids_are_unique():
    for version in MOE_VERSIONS:
        ids = [c["id"] for c in draw(version)]
        assert len(ids) == len(set(ids))
    old, new = MOE_VERSIONS
    assert len(draw(new)) > len(draw(old))  # w4afp8 exists in the later release only


@pytest.mark.skipif(not SRC, reason="WORKBENCH_VLLM_SRC (an unpacked vLLM sdist) is not set")
def test_rerecording_a_sample_reproduces_the_fixture():
    version = sdist_version(Path(SRC))
    committed = {json.loads(line)["id"]: json.loads(line)
                 for line in (FIXTURES / fixture_name(version)).read_text().splitlines()}
    cases = draw(version)[::97] + [c for c in draw(version) if c["id"].startswith(
        ("moe-extra-", "moe-w4afp8-"))][:6]
    prov = record(SRC, cases)
    assert prov["vllm_version"] == version
    for c in cases:
        assert c["expected"] == committed[c["id"]]["expected"], c["id"]
