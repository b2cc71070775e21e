"""`trace --against-vllm DIR`: one case through the workbench and through vLLM's own code.

The fields compared are the recorded ones, byte for byte (a set display in any order): the
MP level's kernel, reasons and error; the scheme; for GPTQ / AWQ / INC the method vLLM resolved,
the linear method and what it wraps; the kernel stage `create_weights` ran (its MP config,
kernel, reasons, candidates, error); and, where the trace has Humming run, the activation
Humming's input-schema decision gives in vLLM's weight processing. `differences` lists each
field that differs. The MP level compares no activation: vLLM's runtime recording builds a
layer, which an MP config alone does not give.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from workbench.errors import InvalidInputError
from workbench.platforms import Platform

# trace CLI kind -> recorder level
LEVELS = {"mp_config": "mp", "scheme": "scheme", "gptq": "gptq", "awq": "awq", "inc": "inc"}
QUANT_METHOD = {"gptq": "gptq", "awq": "awq", "inc": "auto-round"}
LAYER_DEFAULTS = {"layer_name": "model.layers.0.mlp.down_proj", "in_features": 4096,
                  "out_features": 4096, "params_dtype": "bfloat16"}
LAYER_KEYS = set(LAYER_DEFAULTS) | {"input_size_per_partition", "output_size_per_partition"}
HUMMING = "HummingLinearKernel"


@dataclass(frozen=True)
class Difference:
    field: str
    workbench: Any
    vllm: Any


def oracle_platform(p: Platform) -> dict:
    """The recorder's platform fields of a workbench `Platform`."""
    out = {"device": p.device, "capability": p.capability, "cpu_arch": p.cpu_arch, "gfx": p.gfx,
           "zen": p.zen, "amx": p.amx, "packages": list(p.packages),
           "torch_ops": list(p.torch_ops)}
    if not p.ark_backend_lib:
        out["ark_backend_lib"] = False
    return out


def oracle_input(kind: str, data: dict) -> dict:
    """The recorder's input for a trace argument (the short layer forms filled in)."""
    if kind == "mp_config":
        return dict(data)
    if kind == "scheme":
        return {"output_activations": None, "input_activations": None, **LAYER_DEFAULTS, **data}
    if "quantization_config" in data:
        return {**LAYER_DEFAULTS, **data}
    qc = {"quant_method": QUANT_METHOD[kind], **{k: v for k, v in data.items()
                                                 if k not in LAYER_KEYS}}
    return {**LAYER_DEFAULTS, **{k: v for k, v in data.items() if k in LAYER_KEYS},
            "quantization_config": qc}


# vLLM prints some accepted values as Python sets, in the order of the process's string hash
# seed: those `{'a', 'b'}` displays are compared as sets.
_SET = re.compile(r"\{('[^{}]*')\}")


def _canonical(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    return _SET.sub(lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", value)


def _kernel_pairs(got: dict, expected: dict) -> list[tuple[str, Any, Any]]:
    """The kernel stage: vLLM's error before any selection ran, else each recorded field of
    the selection `create_weights` ran."""
    kernel = expected.get("kernel")
    if kernel is None:
        return [(k, got[k], expected[k]) for k in ("error", "error_type")] + \
            [("kernel", got["kernel"], None)]
    mine = got["kernel"] or {}
    return [(f"kernel.{k}", mine.get(k), v) for k, v in kernel.items()]


def _pairs(level: str, trace: Any, expected: dict,
           short: bool) -> list[tuple[str, Any, Any]]:
    got = trace.to_json()
    if level == "mp":
        return [(k, got[k], expected[k]) for k in ("selected", "reasons", "error", "error_type")]
    if level == "scheme":
        return [("scheme", got["scheme"], expected["scheme"])] + _kernel_pairs(got, expected)
    # the method vLLM resolved, the linear method get_quant_method returned and what it wraps:
    # a layer vLLM leaves unquantized (UnquantizedLinearMethod) where the trace selects a
    # kernel differs here, whatever the kernel fields say. The short layer form names no
    # quant_method, so its trace resolves none: vLLM's resolution of the one filled in is
    # not compared then.
    keys = ("quantization", "method", "inner") if short is False else ("method", "inner")
    return [(k, got[k], expected[k]) for k in keys] + _kernel_pairs(got, expected)


def _humming_activation(trace: Any) -> str | None:
    """The activation the trace says Humming runs (its input-schema decision), if it has one."""
    detail = trace.to_json().get("runtime_detail") or {}
    if trace.selected == HUMMING and detail.get("method") == HUMMING:
        return detail.get("activation")
    return None


def compare(kind: str, data: dict, platform: Platform, env: dict, trace: Any,
            vllm_src: str) -> tuple[dict, list[Difference]]:
    """(vLLM's recorded outcome, the fields where the workbench's `trace` differs from it)."""
    from pathlib import Path

    from workbench.recorder import open_vllm, record_case, sdist_version
    if trace.vllm_version and sdist_version(Path(vllm_src)) != trace.vllm_version:
        raise InvalidInputError(f"--against-vllm {vllm_src}: that sdist is vLLM "
                                f"{sdist_version(Path(vllm_src))}, the trace used the "
                                f"{trace.vllm_version} rules (pick it with --vllm-version)")
    if kind not in LEVELS:
        raise InvalidInputError(f"--against-vllm: takes one of --mp-config, --scheme, --gptq, "
                                f"--awq, --inc, got {kind}")
    level = LEVELS[kind]
    case = {"id": "cli", "level": level, "input": oracle_input(kind, data),
            "platform": oracle_platform(platform), "env": dict(env)}
    rec, vllm = open_vllm(vllm_src, tuple(sorted(case["platform"]["packages"])))
    expected = record_case(rec, vllm, case)
    pairs = _pairs(level, trace, expected, "quantization_config" not in data)
    mine = _humming_activation(trace)
    if mine is not None and level != "mp":  # vLLM's runtime level builds a layer, not a config
        ran = record_case(rec, vllm, {**case, "level": "runtime",
                                      "input": {"route": level, "layer": case["input"]}})
        expected["runtime"] = ran
        if ran["kernel"] == HUMMING and ran["activation"] is not None:
            pairs.append(("runtime.activation", mine, ran["activation"]))
    diffs = [Difference(f, w, v) for f, w, v in pairs if _canonical(w) != _canonical(v)]
    return expected, diffs
