"""Every case recorded from vLLM's own selection code must reproduce exactly."""
from __future__ import annotations

import pytest

from tests.dispatch.conftest import load_oracle_cases
from workbench.dispatch import trace_mp, trace_scheme

CASES = load_oracle_cases()


def _diff(case: dict) -> list[str]:
    expected = case["expected"]
    if case["level"] == "mp":
        got = trace_mp(case["input"], case["platform"], case["env"]).to_json()
        return [k for k in ("selected", "reasons", "error", "error_type") if got[k] != expected[k]]
    got = trace_scheme(case["input"], case["platform"], case["env"]).to_json()
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


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_oracle_case(case):
    assert _diff(case) == []


def test_sample_covers_every_outcome():
    """The fixture set must exercise success, rejection and every error type we claim."""
    kinds = {c["expected"].get("error_type") for c in CASES}
    assert {None, "ValueError", "NotImplementedError", "RuntimeError"} <= kinds
