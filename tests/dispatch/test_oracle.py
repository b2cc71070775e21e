"""Every case recorded from vLLM's own selection code must reproduce exactly."""
from __future__ import annotations

import pytest

from tests.dispatch.conftest import VERSIONS, load_oracle_cases
from workbench.dispatch import trace_mp, trace_scheme

CASES = load_oracle_cases()  # the default release's
EVERY = [(v, c) for v in VERSIONS for c in load_oracle_cases(v)]


def _diff(case: dict, version: str | None = None) -> list[str]:
    expected = case["expected"]
    if case["level"] == "mp":
        got = trace_mp(case["input"], case["platform"], case["env"], rules=version).to_json()
        return [k for k in ("selected", "reasons", "error", "error_type") if got[k] != expected[k]]
    got = trace_scheme(case["input"], case["platform"], case["env"], rules=version).to_json()
    diffs = ["scheme"] if got["scheme"] != expected["scheme"] else []
    if expected.get("kernel") is None:
        diffs += [k for k in ("error", "error_type") if got[k] != expected[k]]
        if got["kernel"] is not None:
            diffs.append("kernel")
    else:
        kernel = got["kernel"] or {}
        diffs += [f"kernel.{k}" for k, v in expected["kernel"].items() if kernel.get(k) != v]
        # The trace JSON's own keys describe the selection the scheme ran (the CLI contract).
        diffs += [f"top.{k}" for k in ("selected", "reasons", "error", "error_type")
                  if got[k] != expected["kernel"][k]]
    return diffs


@pytest.mark.parametrize("version,case", EVERY, ids=[f"{v}-{c['id']}" for v, c in EVERY])
def test_oracle_case(version, case):
    """Each release's rule set against the cases recorded from that release's code."""
    assert _diff(case, version) == []


def test_sample_covers_every_outcome():
    """The fixture set must exercise success, rejection and every error type we claim."""
    kinds = {c["expected"].get("error_type") for c in CASES}
    assert {None, "ValueError", "NotImplementedError", "RuntimeError"} <= kinds


def test_partitions_no_tp_split_produces_are_traced_with_a_warning():
    """vLLM selects a kernel for any MPLinearLayerConfig, so the recorded cases whose partition
    no TP split gives (not dividing the full shape, larger, or splitting both K and N) are
    traced, agree above, and carry the warning on every face."""
    from workbench.dispatch.types import PartitionFit
    cases = [c for c in CASES if c["id"].startswith("mp-partition-no-tp-split-")]
    assert len(cases) >= 38
    whys = set()
    for c in cases:
        t = trace_mp(c["input"], c["platform"], c["env"])
        [w] = t.warnings
        whys.add(w.why)
        assert t.to_json()["warnings"] == [w.to_json()]
        assert f"**Warning:** {w.sentence()}" in t.to_markdown()
    assert whys == set(PartitionFit)
    assert {c["expected"]["selected"] is None for c in cases} == {True, False}
    shard = trace_mp({**cases[0]["input"], "partition_weight_shape": [4096, 1024],
                      "full_weight_shape": [4096, 4096]}, "sm90-h200")
    assert shard.warnings == [] and shard.to_json()["warnings"] == []
