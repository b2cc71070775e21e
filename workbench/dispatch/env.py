"""The environment variables and kernel-config knobs that change vLLM's dispatch.

Parsed as `vllm/envs.py` and `vllm/config/kernel.py` parse them, so a value vLLM would refuse
is refused here with the same words, and a value vLLM takes literally (no whitespace
stripping in `VLLM_DISABLED_KERNELS`) is taken literally here too. The accepted keys and
values are the rule set's (`env_rules` of a version package, through the registry).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from workbench.errors import InvalidInputError



def _pinned(version: str | None = None):
    """A rule set's env values, the default one's for None (read lazily: the rule set imports
    this module)."""
    from workbench.dispatch.versions import rule_module

    return rule_module("env_rules", version)


def __getattr__(name: str):
    """`XPU_INC_BACKENDS`, `MARLIN_INPUT_DTYPES`, `KNOWN_KEYS`: the default rule set's."""
    if name in ("XPU_INC_BACKENDS", "MARLIN_INPUT_DTYPES", "KNOWN_KEYS", "LINEAR_BACKENDS"):
        return getattr(_pinned(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class EnvChoiceError(InvalidInputError):
    """A `VLLM_*` value outside its choices; the message is vLLM's own."""


class KernelConfigValidationError(InvalidInputError):
    """`linear_backend` / `linear_backend_per_quant` values vLLM's `KernelConfig` refuses.

    vLLM fails before any selection with pydantic's ValidationError; `str()` is its text
    (pydantic 2.14, the version the reference cases were recorded with).
    """

    error_type = "ValidationError"


def _literal_error(loc: str, value: Any, version: str | None) -> str:
    rules = _pinned(version)
    backends = rules.LINEAR_BACKENDS
    choices = ", ".join(repr(b) for b in backends[:-1]) + f" or {backends[-1]!r}"
    return (f"{loc}\n  Input should be {choices} [type=literal_error, input_value={value!r}, "
            f"input_type={type(value).__name__}]\n    For further information visit "
            f"{rules.PYDANTIC_URL}literal_error")


def _validation_error(errors: list[str]) -> KernelConfigValidationError:
    n = len(errors)
    head = f"{n} validation error{'s' if n > 1 else ''} for KernelConfig"
    return KernelConfigValidationError("\n".join([head, *errors]))


@dataclass(frozen=True)
class Env:
    """Dispatch knobs. `raw` keeps what the user set, for display and export; `version` is the
    rule set whose accepted values they are checked against (None: the default)."""

    raw: tuple[tuple[str, str], ...] = ()
    disabled_kernels: tuple[str, ...] = ()
    linear_backend: str = "auto"
    linear_backend_per_quant: tuple[tuple[str, str], ...] = ()
    cpu_int4_w4a8: bool = True
    batch_invariant: bool = False
    xpu_inc_wna16_backend_raw: str | None = None
    marlin_input_dtype_raw: str | None = None
    version: str | None = None

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
                       _pinned(self.version).XPU_INC_BACKENDS)

    @property
    def marlin_input_dtype(self) -> str | None:
        return _choice("VLLM_MARLIN_INPUT_DTYPE", self.marlin_input_dtype_raw, None,
                       _pinned(self.version).MARLIN_INPUT_DTYPES)

    def to_json(self) -> dict:
        return dict(self.raw)


def _choice(name: str, value: str | None, default: str | None, choices: list[str]) -> str | None:
    if value is None:
        return default
    if value not in choices:
        raise EnvChoiceError(f"Invalid value '{value}' for {name}. Valid options: {choices}.")
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


def parse_env(env: Mapping[str, Any] | None, version: str | None = None) -> Env:
    """Build an `Env` from a mapping like the oracle's `env` object or `--env KEY=VALUE` pairs,
    checked against the keys and values of vLLM `version`'s rule set (None: the default)."""

    if env is None:
        return Env(version=version)
    if not isinstance(env, Mapping):
        raise InvalidInputError(f"env: expected a JSON object of KEY: VALUE, got {env!r}")
    values: dict[str, Any] = {}
    known_keys = _pinned(version).KNOWN_KEYS
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
    _validate_kernel_config(values, version)
    raw = tuple((k, v if isinstance(v, str) else json.dumps(v)) for k, v in env.items())
    return Env(raw=raw, **values, version=version)


def _validate_kernel_config(values: dict, version: str | None) -> None:
    """What `KernelConfig` validation refuses, in its field order (values are not normalized in
    `linear_backend_per_quant`)."""
    backends = _pinned(version).LINEAR_BACKENDS
    errors = []
    backend = values.get("linear_backend", "auto")
    if backend not in backends:
        errors.append(_literal_error("linear_backend", backend, version))
    per_quant = values.get("linear_backend_per_quant")
    if per_quant is not None:
        if not per_quant:
            errors.append("linear_backend_per_quant\n  Dictionary should have at least 1 item after "
                          "validation, not 0 [type=too_short, input_value={}, input_type=dict]\n"
                          f"    For further information visit {_pinned(version).PYDANTIC_URL}too_short")
        for scheme, value in per_quant:
            if value not in backends:
                errors.append(_literal_error(f"linear_backend_per_quant.{scheme}", value, version))
    if errors:
        raise _validation_error(errors)
