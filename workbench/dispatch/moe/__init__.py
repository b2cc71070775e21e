"""Which fused-MoE kernel vLLM runs for a compressed-tensors MoE layer, and why.

    trace_moe(layer, platform, moe_backend, version)   -> MoETrace

`layer` is a `MoELayer` or the `--moe-scheme` JSON; `platform` a preset name, "host", JSON or a
`Platform`; `moe_backend` vLLM's --moe-backend value ("auto" by default); `version` a vLLM
release with MoE rules (`MOE_VERSIONS`). The rules of each release are a `MoERules` value
(`moe_rules(version)`): 0.33.0's module holds the shared rules, 0.34.0's states its changes.
"""
from __future__ import annotations

import importlib
from typing import Any

from workbench.dispatch.moe.layer import MoELayer
from workbench.dispatch.moe.trace import BackendStep, MoETrace
from workbench.dispatch.moe.vllm_0_33 import MOE_BACKENDS, MethodNotTraced, MoERules
from workbench.errors import InvalidInputError
from workbench.platforms import resolve_platform

__all__ = ["trace_moe", "moe_rules", "MoELayer", "MoETrace", "BackendStep", "MoERules",
           "MOE_VERSIONS", "MOE_BACKENDS", "MethodNotTraced", "UnknownMoEVersionError"]

# version -> the module holding its MoE rules (`RULES`)
_MODULES = {"0.33.0": "workbench.dispatch.moe.vllm_0_33",
            "0.34.0": "workbench.dispatch.moe.vllm_0_34"}
MOE_VERSIONS = tuple(_MODULES)
DEFAULT_MOE_VERSION = "0.33.0"


class UnknownMoEVersionError(InvalidInputError):
    """A vLLM version the workbench has no MoE rules for."""


def moe_rules(version: "str | MoERules | None" = None) -> MoERules:
    """The MoE rule set of a release (None: the pinned one)."""
    if isinstance(version, MoERules):
        return version
    v = DEFAULT_MOE_VERSION if version is None else version
    if v not in _MODULES:
        raise UnknownMoEVersionError(f"vllm_version: no MoE rules for {v!r}; available: "
                                     f"{', '.join(MOE_VERSIONS)}")
    return importlib.import_module(_MODULES[v]).RULES


def trace_moe(layer: Any, platform: Any = "sm90-h200", moe_backend: str = "auto",
              version: "str | MoERules | None" = None) -> MoETrace:
    """Resolve the layer's MoE method and run its kernel oracle on `platform`."""
    rules = moe_rules(version)
    ly = layer if isinstance(layer, MoELayer) else MoELayer.from_json(layer)
    backend = moe_backend.lower().replace("-", "_") if isinstance(moe_backend, str) else moe_backend
    if backend not in MOE_BACKENDS:
        # KernelConfig's field validator (config/kernel.py) refuses it before any layer exists
        raise InvalidInputError(f"moe_backend: {moe_backend!r} is not a vLLM MoEBackend; "
                                f"accepted: {', '.join(MOE_BACKENDS)}")
    p = resolve_platform(platform)
    name = platform if isinstance(platform, str) else p.name
    from workbench.dispatch.moe.vllm_0_33 import trace_moe as run
    return run(ly, p, backend, rules, name)
