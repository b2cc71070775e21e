"""Tracing a checkpoint's layers through the dispatch core, and the listing table.

A compressed-tensors layer goes through `trace_scheme` (its scheme JSON), an INC /
AutoRound layer through `trace_inc`, a GPTQ layer through AutoGPTQConfig's own checks
and then `trace_mp` with the MP config `AutoGPTQLinearMethod` builds (uint4b8 or
uint8b128, the model dtype, the group size, no zero points). AWQ is named, not traced.
The dispatch package is imported lazily so listing a checkpoint does not need it.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from workbench.layer import CheckpointFormat, LayerSpec

__all__ = ["trace_layer", "trace_checkpoint_layer", "resolved_scheme", "listing_rows"]

# AutoGPTQConfig.TYPE_MAP: (bits, sym) -> weight type; anything else is refused.
_GPTQ_TYPES = {(4, True): "uint4b8", (8, True): "uint8b128"}
_DESC_ACT_ERROR = ("GPTQ group activation ordering (desc_act=True) is no longer supported. "
                   "Use a checkpoint with static activation ordering or desc_act=False.")


def _gptq_trace(spec: LayerSpec, platform: Any, env: Any, tp_size: int, parallel: str | None):
    from workbench.dispatch import Trace, trace_mp

    qc = spec.quant_config
    if qc.get("desc_act") and spec.group_size != -1:
        return Trace(level="scheme", error=_DESC_ACT_ERROR, error_type="ValueError")
    key = (spec.num_bits, spec.symmetric)
    if key not in _GPTQ_TYPES:
        return Trace(level="scheme", error=f"Unsupported quantization config: bits={key[0]}, "
                     f"sym={key[1]}", error_type="ValueError")
    k_part, n_part = spec.partition_shape(tp_size, parallel)
    trace = trace_mp({"weight_type": _GPTQ_TYPES[key], "act_type": spec.params_dtype,
                      "group_size": spec.group_size, "zero_points": False,
                      "full_weight_shape": [spec.in_features, spec.out_features],
                      "partition_weight_shape": [k_part, n_part]}, platform, env)
    trace.scheme = "AutoGPTQLinearMethod"
    return trace


def trace_layer(spec: LayerSpec, platform: Any = "sm90-h200", env: Mapping[str, Any] | None = None,
                *, tp_size: int = 1, parallel: str | None = None):
    """The dispatch Trace of one listed or loaded layer."""
    from workbench.dispatch import trace_inc, trace_scheme

    if spec.format in (CheckpointFormat.COMPRESSED_TENSORS, CheckpointFormat.SYNTHETIC):
        return trace_scheme(spec.scheme_input(tp_size, parallel), platform, env)
    if spec.format is CheckpointFormat.INC:
        return trace_inc(spec.quant_config_input(tp_size, parallel), platform, env)
    if spec.format is CheckpointFormat.GPTQ:
        return _gptq_trace(spec, platform, env, tp_size, parallel)
    from workbench.dispatch import Trace

    trace = Trace(level="scheme", scheme="AWQConfig")
    trace.notes.append("AWQ checkpoints are listed and loaded; their vLLM route is not traced.")
    return trace


def trace_checkpoint_layer(path: str | os.PathLike, layer: str, platform: Any = "sm90-h200",
                           env: Mapping[str, Any] | None = None, *, tp_size: int = 1,
                           parallel: str | None = None):
    """`python -m workbench trace --checkpoint PATH --layer NAME`: headers only, no weights."""
    from workbench.checkpoints.checkpoint import open_checkpoint

    return trace_layer(open_checkpoint(path).spec(layer), platform, env,
                       tp_size=tp_size, parallel=parallel)


def resolved_scheme(spec: LayerSpec, platform: Any = "sm90-h200", env: Mapping[str, Any] | None = None,
                    *, tp_size: int = 1, parallel: str | None = None) -> dict:
    """The listing's "resolved scheme" column: scheme class, kernel, or vLLM's error."""
    try:
        import workbench.dispatch  # noqa: F401
    except ImportError:  # a build without the dispatch core: the column stays empty
        return {"scheme": None, "kernel": None, "error": None, "error_type": None}
    t = trace_layer(spec, platform, env, tp_size=tp_size, parallel=parallel)
    return {"scheme": t.scheme, "kernel": t.selected, "error": t.error, "error_type": t.error_type}


def listing_rows(layers: list[LayerSpec], platform: Any = "sm90-h200",
                 env: Mapping[str, Any] | None = None, *, tp_size: int = 1,
                 with_scheme: bool = True) -> list[dict]:
    """One flat row per layer (for tables): shapes, format, args, resolved scheme."""
    rows = []
    for s in layers:
        w, a = s.weight_args, s.input_args
        row = {
            "layer": s.name, "K": s.in_features, "N": s.out_features, "bits": s.num_bits,
            "group_size": s.group_size, "symmetric": s.symmetric, "format": s.format.value,
            "ct_format": s.ct_format, "scale_dtype": s.scale_dtype, "params_dtype": s.params_dtype,
            "weights": f"{w.get('type')}{w.get('num_bits')} {w.get('strategy')}",
            "input": (f"{a.get('type')}{a.get('num_bits')} {a.get('strategy')} "
                      f"{'sym' if a.get('symmetric') else 'asym'} "
                      f"{'dynamic' if a.get('dynamic') else 'static'}") if a else "none (16-bit)",
            "parallel": s.default_parallel,
        }
        if with_scheme:
            try:
                res = resolved_scheme(s, platform, env, tp_size=tp_size)
            except Exception as exc:  # noqa: BLE001 - one layer's failure must not sink the table
                from workbench.errors import USER_ERRORS

                if not isinstance(exc, USER_ERRORS):
                    raise
                res = {"scheme": None, "kernel": None, "error": str(exc), "error_type": type(exc).__name__}
            row.update({"scheme": res["scheme"], "kernel": res["kernel"],
                        "error": (f"{res['error_type']}: {res['error']}" if res["error"] else None)})
        rows.append(row)
    return rows
