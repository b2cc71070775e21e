"""Which vLLM kernel a quantized layer gets, and why: the public dispatch API.

    trace_mp(mp_config, platform, env)      the mixed-precision selection loop alone
    trace_scheme(scheme, platform, env)     compressed-tensors scheme resolution, then its loop
    trace_inc(layer, platform, env)         INC / AutoRound resolution (XPU backend table)
    trace_gptq(layer, platform, env)        a GPTQ checkpoint's layer (AutoGPTQ, Marlin-checked)
    trace_awq(layer, platform, env)         an AWQ checkpoint's layer (AutoAWQ Marlin or Triton)
    trace_config_gate(config, platform)     the model-wide config check and capability/dtype gate

`platform` is a preset name, `"host"`, a JSON string or object, or a `Platform`; `env` is a
mapping of `VLLM_*` variables and `linear_backend` / `linear_backend_per_quant`, or an `Env`;
`version` picks the vLLM rule set (`versions.VERSIONS`; the default when None). Each trace
carries `runtime_detail` (a `Runtime`: what the selected kernel computes there) and the
version it was traced with.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

from workbench.dispatch.env import Env, KernelConfigValidationError, parse_env
from workbench.dispatch.runtime_text import describe_runtime
from workbench.dispatch.trace import Level, Outcome, Predicate, Stage, Step, Trace
from workbench.dispatch.types import MPConfig, Runtime
from workbench.dispatch.versions import DEFAULT_VERSION, VERSIONS, rules
from workbench.platforms import Platform, resolve_platform

__all__ = ["trace_mp", "trace_scheme", "trace_inc", "trace_gptq", "trace_awq", "trace_config_gate",
           "Trace", "Step", "Predicate", "Level", "Outcome", "Stage", "MPConfig",
           "Env", "parse_env", "Runtime", "describe_runtime", "VERSIONS", "DEFAULT_VERSION",
           "VLLM_VERSION"]

VLLM_VERSION = DEFAULT_VERSION  # the version traced when none is asked for


def _run(level: Level, platform: Any, env: Any, version: str | None,
         body: Callable[[Any, Platform, Env], Trace]) -> Trace:
    """Resolve platform and env, run one trace, stamp the rule set that produced it.

    An env that vLLM's `KernelConfig` refuses fails before any layer is built, as in vLLM.
    """
    r = rules(version)
    p = resolve_platform(platform)
    try:
        e = env if isinstance(env, Env) else parse_env(env, r.VLLM_VERSION)
    except KernelConfigValidationError as exc:
        return Trace(level=level, error=str(exc), error_type=exc.error_type,
                     vllm_version=r.VLLM_VERSION)
    # The rule set's body builds the whole trace; only the caller knows which rule set it
    # resolved, so the trace's provenance is stamped here, once.
    return replace(body(r, p, e), vllm_version=r.VLLM_VERSION)


def trace_mp(config: MPConfig | Mapping[str, Any], platform: Any = "sm90-h200",
             env: Env | Mapping[str, Any] | None = None, version: str | None = None) -> Trace:
    """`choose_mp_linear_kernel(config)` on `platform`, step by step."""
    cfg = config if isinstance(config, MPConfig) else MPConfig.from_json(config)
    return _run(Level.MP, platform, env, version,
                lambda r, p, e: r.choose_mp_linear_kernel(cfg, p, e))


def trace_scheme(scheme: Any, platform: Any = "sm90-h200",
                 env: Env | Mapping[str, Any] | None = None, version: str | None = None) -> Trace:
    """Resolve a compressed-tensors layer's scheme, then run the selection its weights need."""
    def body(r, p, e):
        try:
            s = r.SchemeInput.of(scheme)
        except r.SchemeError as exc:  # vLLM refused the config while parsing it
            return Trace(level=Level.SCHEME, error=exc.message, error_type=exc.error_type)
        return r.trace_compressed_tensors(s, p, e)

    return _run(Level.SCHEME, platform, env, version, body)


def trace_inc(layer: Mapping[str, Any], platform: Any = "xpu",
              env: Env | Mapping[str, Any] | None = None, version: str | None = None,
              gate: bool = True) -> Trace:
    """INC / AutoRound layer resolution (`gate=False`: without the VllmConfig gate)."""
    return _run(Level.INC, platform, env, version,
                lambda r, p, e: r.trace_quant_layer("inc", layer, p, e, gate))


def trace_gptq(layer: Mapping[str, Any], platform: Any = "sm90-h200",
               env: Env | Mapping[str, Any] | None = None, version: str | None = None,
               gate: bool = True) -> Trace:
    """A GPTQ checkpoint's Linear layer, loaded as vLLM's `auto_gptq`."""
    return _run(Level.GPTQ, platform, env, version,
                lambda r, p, e: r.trace_quant_layer("gptq", layer, p, e, gate))


def trace_awq(layer: Mapping[str, Any], platform: Any = "sm90-h200",
              env: Env | Mapping[str, Any] | None = None, version: str | None = None,
              gate: bool = True) -> Trace:
    """An AWQ checkpoint's Linear layer, loaded as vLLM's `auto_awq` (`awq` on CPU)."""
    return _run(Level.AWQ, platform, env, version,
                lambda r, p, e: r.trace_quant_layer("awq", layer, p, e, gate))


def trace_config_gate(config: Mapping[str, Any], platform: Any = "sm90-h200",
                      env: Env | Mapping[str, Any] | None = None,
                      version: str | None = None) -> Trace:
    """`{"quantization", "quantization_config", "dtype"}`: the model-wide config and gate."""
    return _run(Level.CONFIG_GATE, platform, env, version,
                lambda r, p, e: r.trace_config_gate(config, p))


TRACERS = {"mp_config": trace_mp, "scheme": trace_scheme, "inc": trace_inc, "gptq": trace_gptq,
           "awq": trace_awq, "config_gate": trace_config_gate}  # batch-line keys, one per level
