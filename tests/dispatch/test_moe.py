"""The MoE rules held to vLLM's own answers, recorded from each sdist (workbench.recorder.moe)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workbench.dispatch.moe import (MOE_VERSIONS, MoELayer, moe_rules, trace_moe,
                                    UnknownMoEVersionError)
from workbench.errors import InvalidInputError
from workbench.platforms import resolve_platform
from workbench.recorder.moe import (EXTRA, PLATFORMS, SCHEMES, VARIANTS, W4AFP8_CASES, draw,
                                    fixture_name)

FIXTURES = Path(__file__).parents[1] / "fixtures"
OLD, NEW = MOE_VERSIONS  # the pinned release, whose rules are shared, and the later one


def _cases(version: str) -> list[dict]:
    path = FIXTURES / fixture_name(version)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("version", MOE_VERSIONS)
def test_moe_rules_agree_with_recorded_vllm(version):
    cases = _cases(version)
    w4afp8 = len(W4AFP8_CASES) if moe_rules(version).has_w4afp8 else 0
    assert len(cases) == len(SCHEMES) * len(PLATFORMS) * len(VARIANTS) + len(EXTRA) + w4afp8
    bad = []
    for c in cases:
        t = trace_moe(c["input"], resolve_platform(c["platform"]),
                      c["env"].get("moe_backend", "auto"), version)
        if t.oracle_json() != c["expected"]:
            bad.append((c["id"], t.oracle_json(), c["expected"]))
    assert not bad, f"{len(bad)} of {len(cases)} disagree; first: {bad[0]}"


@pytest.mark.parametrize("version", MOE_VERSIONS)
def test_fixture_inputs_are_the_grid(version):
    """The committed inputs are the grid `draw()` makes: nothing was dropped or edited."""
    assert [(c["id"], c["input"], c["env"]) for c in _cases(version)] == \
        [(c["id"], c["input"], c["env"]) for c in draw(version)]


def test_fixtures_cover_every_outcome_the_issue_names():
    by_id = {c["id"]: c["expected"] for c in _cases(NEW)}
    assert by_id["moe-w4a8-int8-g128-arm-kleidiai-base"]["experts"] == "CPUExpertsInt4"
    assert by_id["moe-w4a8-int8-g128-x86-avx512-base"]["error"] == \
        "No W4A8 Int8 MoE backend supports the deployment configuration."
    assert by_id["moe-w4a8-int8-g128-sm90-h200-base"]["error"] == \
        "W4A8 Int8 MoE is only supported on CPU platforms"


def test_gelu_tanh_is_the_later_releases_change_on_arm():
    gelu = {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
            "input_activations": {"num_bits": 8, "type": "int", "strategy": "token",
                                  "dynamic": True},
            "num_experts": 8, "top_k": 2, "hidden_size": 1024, "intermediate_size": 512,
            "activation": "gelu_pytorch_tanh"}
    old = trace_moe(gelu, "arm-kleidiai", version=OLD)
    new = trace_moe(gelu, "arm-kleidiai", version=NEW)
    assert old.probes[0].reason == "kernel does not support MoEActivation.GELU_TANH activation"
    assert old.error == "No W4A8 Int8 MoE backend supports the deployment configuration."
    assert new.ok and new.experts == "CPUExpertsInt4"


def test_oracle_refusal_texts_differ_by_release():
    r33, r34 = moe_rules(OLD), moe_rules(NEW)
    assert r33.w4a8_int8_unsupported("CPU_INT4", "x") == (
        "W4A8 Int8 MoE backend CPU_INT4 does not support the deployment configuration since x.")
    assert r34.w4a8_int8_unsupported("CPU_INT4", "x") == (
        "W4A8 Int8 MoE backend 'CPU_INT4' does not support the deployment configuration "
        "since x.")
    assert r33.w4a8_int8_unsupported("CPU_INT4", None) == r34.w4a8_int8_unsupported(
        "CPU_INT4", None)


def test_every_rule_cites_a_line_of_its_release():
    for v in MOE_VERSIONS:
        for key, where in moe_rules(v).sources.items():
            path, line = where.rsplit(":", 1)
            assert path.endswith(".py") and int(line) > 0, (v, key, where)


@pytest.mark.skipif(not os.environ.get("WORKBENCH_VLLM_SDISTS"),
                    reason="set WORKBENCH_VLLM_SDISTS to a folder holding vllm-<version>/ of "
                           "each MoE release to check the cited lines against the sources")
def test_cited_lines_exist_in_the_sdists():
    root = Path(os.environ["WORKBENCH_VLLM_SDISTS"])
    for v in MOE_VERSIONS:
        for key, where in moe_rules(v).sources.items():
            path, line = where.rsplit(":", 1)
            lines = (root / f"vllm-{v}" / "vllm" / path).read_text().splitlines()
            assert int(line) <= len(lines) and lines[int(line) - 1].strip(), (v, key)


def test_bad_moe_input_is_named():
    base = {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
            "num_experts": 8, "top_k": 2, "hidden_size": 1024, "intermediate_size": 512}
    with pytest.raises(InvalidInputError, match="moe_scheme.top_k"):
        MoELayer.from_json({**base, "top_k": 9})
    with pytest.raises(InvalidInputError, match="moe_scheme.activation"):
        MoELayer.from_json({**base, "activation": "silu_no_mul"})
    with pytest.raises(InvalidInputError, match="moe_scheme: unknown field"):
        MoELayer.from_json({**base, "experts": 8})
    with pytest.raises(InvalidInputError, match="moe_scheme.hidden_size"):
        MoELayer.from_json({k: v for k, v in base.items() if k != "hidden_size"})
    with pytest.raises(InvalidInputError, match="moe_backend"):
        trace_moe(base, "sm90-h200", "cpu")  # the backend only the W4A8-INT8 map knows
    with pytest.raises(UnknownMoEVersionError):
        trace_moe(base, "sm90-h200", version="0.32.0")


def test_trace_renders_from_its_values():
    t = trace_moe({"weights": {"num_bits": 4, "type": "int", "strategy": "group",
                               "group_size": 128},
                   "num_experts": 8, "top_k": 2, "hidden_size": 1024,
                   "intermediate_size": 512}, "sm80-a100", version=NEW)
    assert t.experts == "MarlinExperts" and t.backend == "MARLIN"
    md = t.to_markdown()
    assert "MarlinExperts" in md and "vllm/model_executor/layers/fused_moe/oracle/int_wna16.py" in md
    assert json.loads(json.dumps(t.to_json()))["experts"] == "MarlinExperts"


def test_w4afp8_is_a_later_method_onto_the_w4a8_fp8_oracle():
    from workbench.dispatch.moe import MethodNotTraced
    layer = {"quantization": "w4afp8", "num_experts": 8, "top_k": 2, "hidden_size": 1024,
             "intermediate_size": 512}
    t = trace_moe(layer, "sm90-h200", version=NEW)
    assert (t.method, t.experts, t.predicates) == ("CompressedTensorsW4A8Fp8MoEMethod",
                                                   "CutlassExpertsW4A8Fp8", ())
    assert trace_moe({**layer, "group_size": 64}, "sm90-h200", version=NEW).error == \
        "Only group size 128 supported for W4A8 MoE"
    with pytest.raises(MethodNotTraced, match="has no such method"):
        trace_moe(layer, "sm90-h200", version=OLD)
    with pytest.raises(InvalidInputError, match="group_size: only with quantization w4afp8"):
        MoELayer.from_json({**layer, "quantization": "compressed-tensors", "group_size": 128,
                            "weights": {"num_bits": 4}})


@pytest.mark.parametrize("version", MOE_VERSIONS)
def test_moe_rules_agree_on_seeded_random_layers(version):
    """300 random layers per release (workbench.recorder.moe.draw_random), recorded like the
    grid: every one the rules trace agrees; the ones they refuse as not modelled are exactly
    those vLLM resolved to a method whose oracle is not modelled."""
    from workbench.dispatch.moe import TRACED_METHODS, MethodNotTraced
    path = FIXTURES / fixture_name(version, random_cases=True)
    cases = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(cases) == 300
    bad, untraced = [], 0
    for c in cases:
        try:
            got = trace_moe(c["input"], resolve_platform(c["platform"]),
                            c["env"].get("moe_backend", "auto"), version).oracle_json()
        except MethodNotTraced:
            untraced += 1
            assert c["expected"]["method"] not in TRACED_METHODS, c["id"]
            continue
        if got != c["expected"]:
            bad.append((c["id"], got, c["expected"]))
    assert not bad, f"{len(bad)} of {len(cases)} disagree; first: {bad[0]}"
    assert untraced < len(cases) // 3
