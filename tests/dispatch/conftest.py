"""Shared fixtures: the oracle cases recorded from vLLM's own selection code."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "fixtures" / "vllm_oracle_sample.json"
GENERATED = ROOT / "tests" / "fixtures" / "vllm_oracle_generated.jsonl"


def load_oracle_cases() -> list[dict]:
    cases = json.loads(SAMPLE.read_text())
    if GENERATED.exists():
        cases += [json.loads(line) for line in GENERATED.read_text().splitlines() if line.strip()]
    return cases
