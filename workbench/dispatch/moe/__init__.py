"""Which fused-MoE kernel vLLM runs for a compressed-tensors MoE layer, and why.

    trace_moe(layer, platform, moe_backend, version)   -> MoETrace

`layer` is a `MoELayer` or the `--moe-scheme` JSON; `platform` a preset name, "host", JSON or a
`Platform`; `moe_backend` vLLM's --moe-backend value ("auto" by default); `version` a vLLM
release with MoE rules (`MOE_VERSIONS`, registered in `workbench.dispatch.moe.versions`). The
rules of each release are a `MoERules` value (`moe_rules(version)`): the pinned release's
module holds the shared rules, a later one's states only what it changes.
"""
from __future__ import annotations

from typing import Any

from workbench.dispatch.moe.layer import MoELayer
from workbench.dispatch.moe.trace import BackendStep, MoETrace
from workbench.dispatch.moe.versions import (DEFAULT_MOE_VERSION, MOE_VERSIONS,
                                             UnknownMoEVersionError, moe_rules_module, shared)
from workbench.errors import InvalidInputError
from workbench.platforms import resolve_platform

__all__ = ["trace_moe", "moe_rules", "MoELayer", "MoETrace", "BackendStep", "MoERules",
           "MOE_VERSIONS", "DEFAULT_MOE_VERSION", "MOE_BACKENDS", "MethodNotTraced",
           "RoutingNotTraced", "UnknownMoEVersionError", "TRACED_METHODS"]

_shared = shared()
MoERules = _shared.MoERules
MOE_BACKENDS = _shared.MOE_BACKENDS
MethodNotTraced = _shared.MethodNotTraced
RoutingNotTraced = _shared.RoutingNotTraced
TRACED_METHODS = tuple(_shared.METHOD_TRACERS)  # the MoE methods whose oracle is modelled


def moe_rules(version: "str | MoERules | None" = None) -> "MoERules":
    """The MoE rule set of a release (None: the pinned one)."""
    if isinstance(version, MoERules):
        return version
    return moe_rules_module(version).RULES


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
    return _shared.trace_moe(ly, p, backend, rules, name)
