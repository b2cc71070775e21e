"""The registry of MoE rule sets, one module per vLLM release, keyed by version: the MoE
counterpart of `workbench.dispatch.versions` (the only place besides the modules that names a
version)."""
from __future__ import annotations

import importlib

from workbench.errors import InvalidInputError

# version -> the module holding its MoE rules (`RULES`); the first is the pinned one
MOE_RULE_SETS = {"0.33.0": "workbench.dispatch.moe.vllm_0_33",
                 "0.34.0": "workbench.dispatch.moe.vllm_0_34"}
MOE_VERSIONS = tuple(MOE_RULE_SETS)
DEFAULT_MOE_VERSION = MOE_VERSIONS[0]
SHARED_RULES = MOE_RULE_SETS[DEFAULT_MOE_VERSION]  # the module the later releases derive from


class UnknownMoEVersionError(InvalidInputError):
    """A vLLM version the workbench has no MoE rules for."""


def moe_rules_module(version: str | None):
    v = DEFAULT_MOE_VERSION if version is None else version
    if v not in MOE_RULE_SETS:
        raise UnknownMoEVersionError(f"vllm_version: no MoE rules for {v!r}; available: "
                                     f"{', '.join(MOE_VERSIONS)}")
    return importlib.import_module(MOE_RULE_SETS[v])


def shared():
    """The shared rules' module (its engine functions, keys and classes)."""
    return importlib.import_module(SHARED_RULES)
