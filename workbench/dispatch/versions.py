"""The registry of dispatch rule sets, one package per vLLM release, keyed by version.

Everything pinned to a release (candidate lists, reason texts, env keys and accepted values,
runtime facts) lives in its package; the rest of the workbench asks this registry for it.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from workbench.errors import InvalidInputError

# version -> the package holding its rules (each has a `rules` module with the entry points).
RULE_SETS = {"0.33.0": "workbench.dispatch.vllm_0_33"}
DEFAULT_VERSION = "0.33.0"
VERSIONS = tuple(RULE_SETS)


class UnknownVersionError(InvalidInputError):
    """A vLLM version the workbench has no rule set for."""


def check_version(version: str | None) -> str:
    """The version to use: `version`, or the default when None."""
    if version is None:
        return DEFAULT_VERSION
    if version not in RULE_SETS:
        raise UnknownVersionError(f"vllm_version: no rule set for {version!r}; available: "
                                  f"{', '.join(VERSIONS)}")
    return version


def rules(version: str | None = None) -> ModuleType:
    """The `rules` module of a version's package (the default version when None)."""
    return importlib.import_module(RULE_SETS[check_version(version)] + ".rules")


def rule_module(name: str, version: str | None = None) -> ModuleType:
    """One module of a version's package, e.g. `rule_module("env_rules")`."""
    return importlib.import_module(f"{RULE_SETS[check_version(version)]}.{name}")
