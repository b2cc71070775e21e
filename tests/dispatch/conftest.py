"""Shared fixtures: the oracle cases recorded from each vLLM release's own selection code."""
from __future__ import annotations

import json
from pathlib import Path

from workbench.dispatch.versions import DEFAULT_VERSION, available
from workbench.recorder import fixture_dir

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
VERSIONS = available()  # every release with a rule set is held to its own recorded cases


def fixtures(version: str = DEFAULT_VERSION) -> Path:
    """The folder of `version`'s recorded cases."""
    return fixture_dir(FIXTURES, version)


def load_oracle_cases(version: str = DEFAULT_VERSION) -> list[dict]:
    """The mp and scheme cases (the sample and the generated file) of `version`."""
    folder = fixtures(version)
    cases = json.loads((folder / "vllm_oracle_sample.json").read_text())
    generated = folder / "vllm_oracle_generated.jsonl"
    if generated.exists():
        cases += [json.loads(line) for line in generated.read_text().splitlines() if line.strip()]
    return cases

# The first release modelled: the facts the worked tests were written against are its (each
# such test names it through this, never by number); the newest release is DEFAULT_VERSION.
FIRST = VERSIONS[0]
NEWEST = VERSIONS[-1]
