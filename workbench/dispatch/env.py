"""The environment variables and kernel-config knobs that change vLLM's dispatch.

Parsed as `vllm/envs.py` and `vllm/config/kernel.py` parse them, so a value vLLM would refuse
is refused here with the same words, and a value vLLM takes literally (no whitespace
stripping in `VLLM_DISABLED_KERNELS`) is taken literally here too. The accepted keys and
values are a rule set's (`EnvRules`, built by each version package's `env_rules`): the caller
hands them in, so this module needs no registry.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from workbench.errors import InvalidInputError



@dataclass(frozen=True)
class EnvRules:
    """What one vLLM release accepts for these knobs, and what an unset knob means."""

    linear_backends: tuple[str, ...]  # KernelConfig's Literal, in its order
    xpu_inc_backends: tuple[str, ...]  # VLLM_XPU_INC_WNA16_BACKEND's choices
    marlin_input_dtypes: tuple[str, ...]  # VLLM_MARLIN_INPUT_DTYPE's choices
    # (every key this dispatch reads, its unset value spelled as a value the env accepts);
    # pairs, so that an Env holding these rules stays hashable
    unset_pairs: tuple[tuple[str, str], ...]
    pydantic_url: str  # the error links of the pydantic release vLLM's errors were recorded with
    # (variable, the hint vLLM's engine start raises with) for variables the release removed
    removed: tuple[tuple[str, str], ...] = ()

    @property
    def unset_values(self) -> dict[str, str]:
        return dict(self.unset_pairs)

    @property
    def known_keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.unset_pairs)


class EnvChoiceError(InvalidInputError):
    """A `VLLM_*` value outside its choices; the message is vLLM's own."""


class KernelConfigValidationError(InvalidInputError):
    """`linear_backend` / `linear_backend_per_quant` values vLLM's `KernelConfig` refuses.

    vLLM fails before any selection with pydantic's ValidationError; `str()` is its text
    (pydantic 2.14, the version the reference cases were recorded with).
    """

    error_type = "ValidationError"


def _literal_error(loc: str, value: Any, rules: EnvRules) -> str:
    backends = rules.linear_backends
    choices = ", ".join(repr(b) for b in backends[:-1]) + f" or {backends[-1]!r}"
    return (f"{loc}\n  Input should be {choices} [type=literal_error, input_value={value!r}, "
            f"input_type={type(value).__name__}]\n    For further information visit "
            f"{rules.pydantic_url}literal_error")


def _validation_error(errors: list[str]) -> KernelConfigValidationError:
    n = len(errors)
    head = f"{n} validation error{'s' if n > 1 else ''} for KernelConfig"
    return KernelConfigValidationError("\n".join([head, *errors]))


@dataclass(frozen=True)
class Env:
    """Dispatch knobs. `raw` keeps what the user set, for display and export; `rules` are the
    accepted values they are checked against (a lazily read value too)."""

    raw: tuple[tuple[str, str], ...] = ()
    disabled_kernels: tuple[str, ...] = ()
    linear_backend: str = "auto"
    linear_backend_per_quant: tuple[tuple[str, str], ...] = ()
    cpu_int4_w4a8: bool = True
    batch_invariant: bool = False
    xpu_inc_wna16_backend_raw: str | None = None
    marlin_input_dtype_raw: str | None = None
    rules: EnvRules | None = None  # None only for an Env built by hand with no lazy values

    def mp_linear_backend(self) -> tuple[str, str]:
        """`_get_linear_backend(quantization="mixed_precision")`: (backend, where it came from)."""
        override = dict(self.linear_backend_per_quant).get("mixed_precision")
        if override:
            return override, "linear_backend_per_quant"
        return self.linear_backend, "linear_backend"

    @property
    def xpu_inc_wna16_backend(self) -> str:
        """Validated lazily, as vLLM's `env_with_choices` does on first read."""
        return _choice("VLLM_XPU_INC_WNA16_BACKEND", self.xpu_inc_wna16_backend_raw, "auto",
                       self._rules().xpu_inc_backends)

    @property
    def marlin_input_dtype(self) -> str | None:
        return _choice("VLLM_MARLIN_INPUT_DTYPE", self.marlin_input_dtype_raw, None,
                       self._rules().marlin_input_dtypes)

    def _rules(self) -> EnvRules:
        if self.rules is None:
            raise InvalidInputError("Env: a VLLM_* choice is set but no rule set's accepted "
                                    "values came with it; build it with parse_env(env, rules)")
        return self.rules

    def to_json(self) -> dict:
        return dict(self.raw)


def _choice(name: str, value: str | None, default: str | None, choices: tuple[str, ...]) -> str | None:
    if value is None:
        return default
    if value not in choices:
        raise EnvChoiceError(f"Invalid value '{value}' for {name}. Valid options: {list(choices)}.")
    return value


def _env_bool(name: str, value: Any) -> bool:
    """vLLM reads these with `bool(int(os.getenv(...)))`."""
    try:
        return bool(int(value))
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"env {name}: {value!r} is not an integer; vLLM reads it with bool(int(...)), "
            "accepted: 0 or 1"
        ) from None


def parse_env(env: Mapping[str, Any] | None, rules: EnvRules) -> Env:
    """Build an `Env` from a mapping like the oracle's `env` object or `--env KEY=VALUE` pairs,
    checked against one release's keys and values (`RuleSet.ENV`)."""
    if not isinstance(rules, EnvRules):
        raise TypeError(f"parse_env: rules must be an EnvRules (a RuleSet's ENV), got {rules!r}")
    if env is None:
        return Env(rules=rules)
    if not isinstance(env, Mapping):
        raise InvalidInputError(f"env: expected a JSON object of KEY: VALUE, got {env!r}")
    values: dict[str, Any] = {}
    known_keys = rules.known_keys
    for key, value in env.items():
        if key not in known_keys:
            if isinstance(key, str) and key.startswith("VLLM_"):
                continue  # a real vLLM variable that does not touch this dispatch: kept in raw only
            raise InvalidInputError(f"env: unknown key {key!r}; accepted: {', '.join(known_keys)} "
                                    "or any other VLLM_* variable (no effect on dispatch)")
        if key == "VLLM_DISABLED_KERNELS":
            if isinstance(value, (list, tuple)):
                value = ",".join(value)
            values["disabled_kernels"] = tuple(str(value).split(","))
        elif key == "VLLM_CPU_INT4_W4A8":
            values["cpu_int4_w4a8"] = _env_bool(key, value)
        elif key == "VLLM_BATCH_INVARIANT":
            values["batch_invariant"] = _env_bool(key, value)
        elif key == "VLLM_XPU_INC_WNA16_BACKEND":
            values["xpu_inc_wna16_backend_raw"] = str(value)
        elif key == "VLLM_MARLIN_INPUT_DTYPE":
            values["marlin_input_dtype_raw"] = str(value)
        elif key == "linear_backend":
            backend = value.lower().replace("-", "_") if isinstance(value, str) else value
            values["linear_backend"] = backend  # KernelConfig's normalizer ran first
        elif key == "linear_backend_per_quant":
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except (json.JSONDecodeError, RecursionError):  # malformed, or nested too deep
                    raise InvalidInputError(
                        "env linear_backend_per_quant: expected a JSON object such as "
                        '{"mixed_precision": "marlin"}'
                    ) from None
            if value is None:
                continue
            if not isinstance(value, dict):
                raise InvalidInputError(
                    "env linear_backend_per_quant: expected an object of scheme -> backend, e.g. "
                    '{"mixed_precision": "marlin"}'
                )
            values["linear_backend_per_quant"] = tuple(value.items())
    _validate_kernel_config(values, rules)
    raw = tuple((k, v if isinstance(v, str) else json.dumps(v)) for k, v in env.items())
    return Env(raw=raw, **values, rules=rules)


def removed_variable(env: Env) -> str | None:
    """`Platform.validate_environ`'s refusal of a removed variable the env sets (vLLM's text),
    in the order the user set them; None when none is set."""
    removed = dict(env.rules.removed) if env.rules is not None else {}
    for key, _ in env.raw:
        if key in removed:
            return f"{key} has been removed. {removed[key]}"
    return None


def _validate_kernel_config(values: dict, rules: EnvRules) -> None:
    """What `KernelConfig` validation refuses, in its field order (values are not normalized in
    `linear_backend_per_quant`)."""
    backends = rules.linear_backends
    errors = []
    backend = values.get("linear_backend", "auto")
    if backend not in backends:
        errors.append(_literal_error("linear_backend", backend, rules))
    per_quant = values.get("linear_backend_per_quant")
    if per_quant is not None:
        if not per_quant:
            errors.append("linear_backend_per_quant\n  Dictionary should have at least 1 item after "
                          "validation, not 0 [type=too_short, input_value={}, input_type=dict]\n"
                          f"    For further information visit {rules.pydantic_url}too_short")
        for scheme, value in per_quant:
            if value not in backends:
                errors.append(_literal_error(f"linear_backend_per_quant.{scheme}", value, rules))
    if errors:
        raise _validation_error(errors)

