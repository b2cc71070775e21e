"""Which vLLM kernel a quantized layer gets, and why: the public dispatch API.

    trace_mp(mp_config, platform, env)      the mixed-precision selection loop alone
    trace_scheme(scheme, platform, env)     compressed-tensors scheme resolution, then its loop
    trace_inc(layer, platform, env)         INC / AutoRound resolution (XPU backend table)

`platform` is a preset name, `"host"`, a JSON string or object, or a `Platform`; `env` is a
mapping of `VLLM_*` variables and `linear_backend` / `linear_backend_per_quant`, or an `Env`.
Rules are pinned to vLLM 0.33.0 (`workbench/dispatch/vllm_0_33/`).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from workbench.dispatch.env import Env, KernelConfigValidationError, parse_env
from workbench.dispatch.trace import Predicate, Step, Trace
from workbench.dispatch.types import MPConfig
from workbench.dispatch.vllm_0_33 import VLLM_VERSION
from workbench.dispatch.vllm_0_33.compressed_tensors import (SchemeError, SchemeInput,
                                                            trace_compressed_tensors)
from workbench.dispatch.vllm_0_33.runtime import runtime_note
from workbench.dispatch.vllm_0_33.selector import choose_mp_linear_kernel
from workbench.platforms import Platform, resolve_platform

__all__ = ["trace_mp", "trace_scheme", "trace_inc", "Trace", "Step", "Predicate", "MPConfig",
           "Env", "parse_env", "VLLM_VERSION"]


def _run(level: str, platform: Any, env: Any, body: Callable[[Platform, Env], Trace]) -> Trace:
    """Resolve platform and env, run one trace, add what the chosen kernel computes there.

    An env that vLLM's `KernelConfig` refuses fails before any layer is built, as in vLLM.
    """
    p = resolve_platform(platform)
    try:
        e = env if isinstance(env, Env) else parse_env(env)
    except KernelConfigValidationError as exc:
        return Trace(level=level, error=str(exc), error_type=exc.error_type)
    trace = body(p, e)
    if trace.selected and trace.mp_config is not None:
        trace.runtime = runtime_note(trace.selected, trace.mp_config, p, e)
    return trace


def trace_mp(config: MPConfig | Mapping[str, Any], platform: Any = "sm90-h200",
             env: Env | Mapping[str, Any] | None = None) -> Trace:
    """`choose_mp_linear_kernel(config)` on `platform`, step by step."""
    cfg = config if isinstance(config, MPConfig) else MPConfig.from_json(config)
    return _run("mp", platform, env, lambda p, e: choose_mp_linear_kernel(cfg, p, e))


def trace_scheme(scheme: SchemeInput | Mapping[str, Any], platform: Any = "sm90-h200",
                 env: Env | Mapping[str, Any] | None = None) -> Trace:
    """Resolve a compressed-tensors layer's scheme, then run the selection its weights need."""
    try:
        s = scheme if isinstance(scheme, SchemeInput) else SchemeInput.from_json(dict(scheme))
    except SchemeError as exc:  # vLLM refused the config while parsing it
        refused = Trace(level="scheme", error=exc.message, error_type=exc.error_type)
        return _run("scheme", platform, env, lambda p, e: refused)
    return _run("scheme", platform, env, lambda p, e: trace_compressed_tensors(s, p, e))


def trace_inc(layer: Mapping[str, Any], platform: Any = "xpu",
              env: Env | Mapping[str, Any] | None = None) -> Trace:
    """INC / AutoRound layer resolution (facts §5)."""
    from workbench.dispatch.vllm_0_33.inc import trace_inc_layer

    return _run("inc", platform, env, lambda p, e: trace_inc_layer(layer, p, e))
