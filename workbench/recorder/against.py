"""`trace --against-vllm DIR`: one case through the workbench and through vLLM's own code.

The fields compared are the recorded ones (kernel, reasons, scheme or method, error type and
text), byte for byte; `differences` lists each that differs.
"""
from __future__ import annotations

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


def _pairs(level: str, trace: Any, expected: dict) -> list[tuple[str, Any, Any]]:
    got = trace.to_json()
    if level == "mp":
        return [(k, got[k], expected[k]) for k in ("selected", "reasons", "error", "error_type")]
    if level == "scheme":
        out = [("scheme", got["scheme"], expected["scheme"])]
        kernel = expected.get("kernel")
        if kernel is None:
            out += [(k, got[k], expected[k]) for k in ("error", "error_type")]
            out.append(("kernel", got["kernel"], None))
        else:
            mine = got["kernel"] or {}
            out += [(f"kernel.{k}", mine.get(k), v) for k, v in kernel.items()]
        return out
    kernel = expected.get("kernel") or {}
    err, err_type = expected["error"], expected["error_type"]
    if err_type is None and kernel.get("error_type"):
        err, err_type = kernel["error"], kernel["error_type"]
    out = [("error", trace.error, err), ("error_type", trace.error_type, err_type)]
    if kernel.get("mp_config") is not None:
        out += [("selected", trace.selected, kernel["selected"]),
                ("reasons", list(trace.reasons), kernel["reasons"])]
    return out


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
    diffs = [Difference(f, w, v) for f, w, v in _pairs(level, trace, expected) if w != v]
    return expected, diffs
