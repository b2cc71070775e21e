"""Which vLLM kernel a quantized layer gets, and why: the public dispatch API.

    trace_mp(mp_config, platform, env)      the mixed-precision selection loop alone
    trace_scheme(scheme, platform, env)     compressed-tensors scheme resolution, then its loop
    trace_inc(layer, platform, env)         INC / AutoRound resolution (XPU backend table)
    trace_gptq(layer, platform, env)        a GPTQ checkpoint's layer (AutoGPTQ, Marlin-checked)
    trace_awq(layer, platform, env)         an AWQ checkpoint's layer (AutoAWQ Marlin or Triton)
    trace_config_gate(config, platform)     the model-wide config check and capability/dtype gate

`platform` is a preset name, `"host"`, a JSON string or object, or a `Platform`; `env` is a
mapping of `VLLM_*` variables and `linear_backend` / `linear_backend_per_quant`, or an `Env`;
`rules` is the vLLM rule set to trace with: a `RuleSet` (`versions.rule_set(version)`), a
version string naming one (`versions.available()`), or None for the pinned one. Each trace
carries `runtime_detail` (a `Runtime`: what the selected kernel computes there), the rule set
that traced it (`trace.rules`) and its version (`trace.vllm_version`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

from workbench.dispatch import env as _env
from workbench.dispatch.env import Env, KernelConfigValidationError
from workbench.dispatch.runtime_text import describe_runtime
from workbench.dispatch.trace import Level, Outcome, Predicate, Stage, Step, Trace
from workbench.dispatch.types import MPConfig, Runtime
from workbench.dispatch.versions import DEFAULT_VERSION, VERSIONS, RuleSet, rule_set
from workbench.platforms import Platform, resolve_platform

__all__ = ["trace_mp", "trace_scheme", "trace_inc", "trace_gptq", "trace_awq", "trace_config_gate",
           "Trace", "Step", "Predicate", "Level", "Outcome", "Stage", "MPConfig",
           "Env", "parse_env", "Runtime", "describe_runtime", "VERSIONS", "DEFAULT_VERSION",
           "VLLM_VERSION", "RuleSet", "rule_set"]

VLLM_VERSION = DEFAULT_VERSION  # the version traced when none is asked for
Rules = RuleSet | str | None  # what a trace function's `rules` takes


def parse_env(env: Mapping[str, Any] | Env | None, rules: Rules = None) -> Env:
    """`env.parse_env` with the accepted values of `rules` (the pinned rule set's for None)."""
    if isinstance(env, Env):
        return env
    return _env.parse_env(env, rule_set(rules).ENV)


def _run(level: Level, platform: Any, env: Any, rules: Rules,
         body: Callable[[RuleSet, Platform, Env], Trace]) -> Trace:
    """Resolve rule set, platform and env, run one trace; the trace carries the rule set.

    An env that vLLM's `KernelConfig` refuses fails before any layer is built, as in vLLM.
    """
    r = rule_set(rules)
    p = resolve_platform(platform)
    try:
        e = parse_env(env, r)
    except KernelConfigValidationError as exc:
        return Trace(level=level, error=str(exc), error_type=exc.error_type,
                     vllm_version=r.version, rules=r)
    refused = r.engine_start(p, e)  # the environment and platform checks of engine start
    if refused is not None:
        return Trace(level=level, error=refused[1], error_type=refused[0], vllm_version=r.version,
                     rules=r)
    # The rule set's body builds the whole trace; only the caller knows which rule set it
    # resolved, so the trace's provenance is stamped here, once.
    t = body(r, p, e)
    rt = t.runtime_detail
    if rt is not None and r.base is not None:  # inherited rules cite their release's lines
        rt = replace(rt, source=rt.source and r.cite(rt.source))
    return replace(t, vllm_version=r.version, rules=r, runtime_detail=rt)


def trace_mp(config: MPConfig | Mapping[str, Any], platform: Any = "sm90-h200",
             env: Env | Mapping[str, Any] | None = None, rules: Rules = None) -> Trace:
    """`choose_mp_linear_kernel(config)` on `platform`, step by step."""
    cfg = config if isinstance(config, MPConfig) else MPConfig.from_json(config)
    return _run(Level.MP, platform, env, rules,
                lambda r, p, e: r.choose_mp_linear_kernel(cfg, p, e))


def trace_scheme(scheme: Any, platform: Any = "sm90-h200",
                 env: Env | Mapping[str, Any] | None = None, rules: Rules = None) -> Trace:
    """Resolve a compressed-tensors layer's scheme, then run the selection its weights need."""
    def body(r, p, e):
        try:
            s = r.SchemeInput.of(scheme)
        except r.SchemeError as exc:  # vLLM refused the config while parsing it
            return Trace(level=Level.SCHEME, error=exc.message, error_type=exc.error_type)
        return r.trace_compressed_tensors(s, p, e)

    return _run(Level.SCHEME, platform, env, rules, body)


def trace_inc(layer: Mapping[str, Any], platform: Any = "xpu",
              env: Env | Mapping[str, Any] | None = None, rules: Rules = None,
              gate: bool = True) -> Trace:
    """INC / AutoRound layer resolution (`gate=False`: without the VllmConfig gate)."""
    return _run(Level.INC, platform, env, rules,
                lambda r, p, e: r.trace_quant_layer("inc", layer, p, e, gate))


def trace_gptq(layer: Mapping[str, Any], platform: Any = "sm90-h200",
               env: Env | Mapping[str, Any] | None = None, rules: Rules = None,
               gate: bool = True) -> Trace:
    """A GPTQ checkpoint's Linear layer, loaded as vLLM's `auto_gptq`."""
    return _run(Level.GPTQ, platform, env, rules,
                lambda r, p, e: r.trace_quant_layer("gptq", layer, p, e, gate))


def trace_awq(layer: Mapping[str, Any], platform: Any = "sm90-h200",
              env: Env | Mapping[str, Any] | None = None, rules: Rules = None,
              gate: bool = True) -> Trace:
    """An AWQ checkpoint's Linear layer, loaded as vLLM's `auto_awq` (`awq` on CPU)."""
    return _run(Level.AWQ, platform, env, rules,
                lambda r, p, e: r.trace_quant_layer("awq", layer, p, e, gate))


def trace_config_gate(config: Mapping[str, Any], platform: Any = "sm90-h200",
                      env: Env | Mapping[str, Any] | None = None,
                      rules: Rules = None) -> Trace:
    """`{"quantization", "quantization_config", "dtype"}`: the model-wide config and gate."""
    return _run(Level.CONFIG_GATE, platform, env, rules,
                lambda r, p, e: r.trace_config_gate(config, p))


TRACERS = {"mp_config": trace_mp, "scheme": trace_scheme, "inc": trace_inc, "gptq": trace_gptq,
           "awq": trace_awq, "config_gate": trace_config_gate}  # batch-line keys, one per level
