"""Tracing a checkpoint's layers through the dispatch core, and the listing table.

A compressed-tensors layer goes through `trace_scheme` (its typed `CTScheme`); an INC /
AutoRound, GPTQ or AWQ layer through `trace_inc`, `trace_gptq` or `trace_awq` with the fields
its quantization config holds.
The dispatch package is imported lazily so listing a checkpoint does not need it.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from workbench.layer import CheckpointFormat, LayerSpec

__all__ = ["trace_layer", "trace_checkpoint_layer", "resolved_scheme", "listing_rows"]

def trace_layer(spec: LayerSpec, platform: Any = "sm90-h200", env: Mapping[str, Any] | None = None,
                *, tp_size: int = 1, parallel: str | None = None, version: str | None = None):
    """The dispatch Trace of one listed or loaded layer (`version`: the vLLM rule set, None for
    the default)."""
    from workbench.dispatch import trace_awq, trace_gptq, trace_inc, trace_scheme

    if spec.format in (CheckpointFormat.COMPRESSED_TENSORS, CheckpointFormat.SYNTHETIC):
        return trace_scheme(spec.scheme_input(tp_size, parallel), platform, env, version)
    trace = {CheckpointFormat.INC: trace_inc, CheckpointFormat.GPTQ: trace_gptq,
             CheckpointFormat.AWQ: trace_awq}[spec.format]
    return trace(spec.quant_config_input(tp_size, parallel), platform, env, version)


def trace_checkpoint_layer(path: str | os.PathLike, layer: str, platform: Any = "sm90-h200",
                           env: Mapping[str, Any] | None = None, *, tp_size: int = 1,
                           parallel: str | None = None, version: str | None = None):
    """`python -m workbench trace --checkpoint PATH --layer NAME`: headers only, no weights."""
    from workbench.checkpoints.checkpoint import open_checkpoint

    return trace_layer(open_checkpoint(path).spec(layer), platform, env,
                       tp_size=tp_size, parallel=parallel, version=version)


def resolved_scheme(spec: LayerSpec, platform: Any = "sm90-h200", env: Mapping[str, Any] | None = None,
                    *, tp_size: int = 1, parallel: str | None = None,
                    version: str | None = None) -> dict:
    """The listing's "resolved scheme" column: scheme class, kernel, or vLLM's error."""
    try:
        import workbench.dispatch  # noqa: F401
    except ImportError:  # a build without the dispatch core: the column stays empty
        return {"scheme": None, "kernel": None, "error": None, "error_type": None}
    t = trace_layer(spec, platform, env, tp_size=tp_size, parallel=parallel, version=version)
    return {"scheme": t.scheme, "kernel": t.selected, "error": t.error, "error_type": t.error_type}


def listing_rows(layers: list[LayerSpec], platform: Any = "sm90-h200",
                 env: Mapping[str, Any] | None = None, *, tp_size: int = 1,
                 with_scheme: bool = True, version: str | None = None) -> list[dict]:
    """One flat row per layer (for tables): shapes, format, args, resolved scheme (with the
    rules of vLLM `version`, the default's when None)."""
    rows = []
    for s in layers:
        w, a = s.weight_args, s.input_args
        row = {
            "layer": s.name, "K": s.in_features, "N": s.out_features, "bits": s.num_bits,
            "group_size": s.group_size, "symmetric": s.symmetric, "format": s.format.value,
            "ct_format": s.ct_format, "scale_dtype": s.scale_dtype, "params_dtype": s.params_dtype,
            "weights": f"{w.type}{w.num_bits} {w.strategy}",
            "input": (f"{a.type}{a.num_bits} {a.strategy} {'sym' if a.symmetric else 'asym'} "
                      f"{'dynamic' if a.dynamic else 'static'}") if a else "none (16-bit)",
            "parallel": s.default_parallel,
        }
        if with_scheme:
            try:
                res = resolved_scheme(s, platform, env, tp_size=tp_size, version=version)
            except Exception as exc:  # noqa: BLE001 - one layer's failure must not sink the table
                from workbench.errors import USER_ERRORS

                if not isinstance(exc, USER_ERRORS):
                    raise
                res = {"scheme": None, "kernel": None, "error": str(exc), "error_type": type(exc).__name__}
            row.update({"scheme": res["scheme"], "kernel": res["kernel"],
                        "error": (f"{res['error_type']}: {res['error']}" if res["error"] else None)})
        rows.append(row)
    return rows
