"""The recorded GPTQ, AWQ, INC and config-gate cases: the workbench's traces against vLLM's.

Each level's file holds cases recorded from vLLM's own load path (ModelConfig's method
resolution, the VllmConfig gate, `get_quant_method`, `create_weights`). A case agrees when the
resolved method name, the linear method and what it wraps, the kernel stage (the MP selection
`create_weights` ran, or its error) and the error type and text all match. vLLM prints some
accepted values as Python sets, whose order follows the process's string hash seed: those
`{...}` displays are compared as sets.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.dispatch.conftest import VERSIONS, fixtures
from workbench import dispatch

LEVELS = {"gptq": ("vllm_oracle_gptq.jsonl", dispatch.trace_gptq),
          "awq": ("vllm_oracle_awq.jsonl", dispatch.trace_awq),
          "inc": ("vllm_oracle_inc.jsonl", dispatch.trace_inc),
          "config-gate": ("vllm_oracle_config_gate.jsonl", dispatch.trace_config_gate),
          "runtime": ("vllm_oracle_runtime.jsonl", None)}
ROUTES = {"scheme": dispatch.trace_scheme, "gptq": dispatch.trace_gptq,
          "awq": dispatch.trace_awq, "inc": dispatch.trace_inc}
# The share of each level's recorded cases that must agree: all of them, at every level.
FLOOR = {"gptq": 1.0, "config-gate": 1.0, "awq": 1.0, "inc": 1.0, "runtime": 1.0}
_SET = re.compile(r"\{('[^{}]*')\}")


def _same(got, expected) -> bool:
    """Equal, reading each `{'a', 'b'}` set display in a message in one canonical order."""
    def canon(v):
        if not isinstance(v, str):
            return v
        return _SET.sub(lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", v)
    return canon(got) == canon(expected)


def runtime_diff(case: dict, version: str | None = None) -> list[str]:
    """The runtime level: the route's error, else what processes the weights, the load-time
    failure (vLLM's Python before any compiled op), the activation precision and isa_hint
    where vLLM's Python decides them. Forward-time failures are not recorded there."""
    e, i = case["expected"], case["input"]
    t = ROUTES[i["route"]](i["layer"], case["platform"], case["env"], rules=version)
    if e["route_error"] is not None or t.error is not None:
        routed = t.error is not None and e["route_error"] == f"{t.error_type}: {t.error}"
        return [] if routed else ["route_error"]
    rt = t.runtime_detail
    if rt is None:
        return ["runtime_detail"]
    out = []
    if e["fails_at"] == "load":
        if (rt.fails_at, rt.error, rt.error_type) != ("load", e["error"], e["error_type"]):
            out.append("load error")
    elif rt.fails_at == "load" and not (rt.failing_op and e["load_op"] == rt.failing_op):
        out.append("fails_at")  # a compiled op's refusal is that op, reached, in the recording
    if e["activation"] is not None and rt.activation != e["activation"]:
        out.append("activation")
    if e["isa_hint"] is not None and rt.isa_hint != e["isa_hint"]:
        out.append("isa_hint")
    return out


def diff(case: dict, version: str | None = None) -> list[str]:
    if case["level"] == "runtime":
        return runtime_diff(case, version)
    e, fn = case["expected"], LEVELS[case["level"]][1]
    got = fn(case["input"], case["platform"], case["env"], rules=version).to_json()
    if case["level"] == "config-gate":
        return [k for k in ("quantization", "error", "error_type") if not _same(got[k], e[k])]
    out = [k for k in ("quantization", "method", "inner") if got[k] != e[k]]
    if e["kernel"] is None:  # vLLM raised before a method existed
        out += [k for k in ("error", "error_type") if not _same(got[k], e[k])]
        out += ["kernel"] if got["kernel"] is not None else []
    else:
        kernel = got["kernel"] or {}
        out += [f"kernel.{k}" for k, v in e["kernel"].items() if not _same(kernel.get(k), v)]
    return out


def _cases(level: str, version: str | None = None) -> list[dict]:
    path = fixtures(version or dispatch.DEFAULT_VERSION) / LEVELS[level][0]
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("level", sorted(LEVELS))
def test_recorded_level_agrees(level, version):
    """Each release's rule set against the cases recorded from that release's code."""
    cases = _cases(level, version)
    if not cases:
        pytest.skip(f"{version} {LEVELS[level][0]} not recorded")
    bad = [(c["id"], d) for c in cases if (d := diff(c, version))]
    share = 1 - len(bad) / len(cases)
    print(f"{version} {level}: {len(cases) - len(bad)}/{len(cases)} agree")
    assert share >= FLOOR[level], bad[:5]
