"""Checkpoint readers: compressed-tensors, GPTQ, AWQ and AutoRound / INC, safetensors only.

    open_checkpoint(path) -> Checkpoint     config + headers, the quantized-layer listing
    list_layers(path) -> [LayerSpec]        shapes, format, args; no tensor data
    load_layer(path, name) -> QuantizedLayer  one layer, reading only its bytes
    trace_checkpoint_layer(path, name, platform, env, tp_size=, parallel=) -> Trace

Every failure is a `CheckpointError` subclass (see `workbench.checkpoints.errors`).
"""
from __future__ import annotations

from workbench.checkpoints.checkpoint import Checkpoint, list_layers, load_layer, open_checkpoint
from workbench.checkpoints.errors import *  # noqa: F403 - the named errors are public
from workbench.checkpoints.errors import __all__ as _errors
from workbench.checkpoints.listing import listing_rows, resolved_scheme, trace_checkpoint_layer, trace_layer

__all__ = ["Checkpoint", "open_checkpoint", "list_layers", "load_layer", "trace_checkpoint_layer",
           "trace_layer", "resolved_scheme", "listing_rows", *_errors]
