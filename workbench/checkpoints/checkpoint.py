"""A checkpoint directory opened for lazy, one-layer-at-a-time reading.

`open_checkpoint` reads the config and every safetensors header (no tensor data, except
the 16-byte `weight_shape` vectors of pack-quantized layers), detects the format from
`quant_method`, and lists the quantized layers. `Checkpoint.load_layer(name)` then reads
that layer's tensors only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from workbench.checkpoints.compressed_tensors import CTConfig, ct_layer_specs, load_ct_layer, parse_ct_config
from workbench.checkpoints.errors import InvalidConfigError, UnknownFormatError, UnknownLayerError, shown
from workbench.checkpoints.files import CheckpointFiles, find_config, find_files
from workbench.checkpoints.gptq import (
    GPTQFamilyConfig, gptq_layer_specs, lm_head_notes, load_gptq_layer, parse_awq_config,
    parse_gptq_config, parse_inc_config,
)
from workbench.checkpoints.reader_rules import ReaderRules, pinned
from workbench.layer import CheckpointFormat, LayerSpec, QuantizedLayer

__all__ = ["Checkpoint", "open_checkpoint", "list_layers", "load_layer", "QUANT_METHODS"]

# quant_method (lower-cased) -> the reader; vLLM overrides "auto-round" to its "inc" method.
QUANT_METHODS = {
    "compressed-tensors": CheckpointFormat.COMPRESSED_TENSORS,
    "gptq": CheckpointFormat.GPTQ,
    "auto-round": CheckpointFormat.INC,
    "inc": CheckpointFormat.INC,
    "intel/auto-round": CheckpointFormat.INC,
    "awq": CheckpointFormat.AWQ,
}
_PARAMS_DTYPES = ("bfloat16", "float16", "float32")


def _natural_key(name: str) -> list:
    # model.layers.2 before model.layers.10
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in name.split(".")]


def _params_dtype(config: dict) -> tuple[str, tuple[str, ...]]:
    """The model dtype from config.json (`dtype` in transformers 5, `torch_dtype` before)."""
    raw = config.get("dtype", config.get("torch_dtype"))
    if raw is None:
        return "bfloat16", ("config.json names no dtype; assuming bfloat16",)
    name = str(raw).removeprefix("torch.")
    name = {"half": "float16", "float": "float32", "bf16": "bfloat16"}.get(name, name)
    if name not in _PARAMS_DTYPES:
        raise InvalidConfigError(f"config.json: dtype {shown(raw)}; accepted: {', '.join(_PARAMS_DTYPES)}")
    return name, ()


@dataclass
class Checkpoint:
    """An opened checkpoint: its files, parsed quantization config and layer listing."""

    path: Path
    files: CheckpointFiles
    config: dict
    quant_config: dict
    format: CheckpointFormat
    params_dtype: str
    parsed: CTConfig | GPTQFamilyConfig
    layers: list[LayerSpec]
    notes: tuple[str, ...] = field(default=())

    def layer_names(self) -> list[str]:
        return [s.name for s in self.layers]

    def spec(self, name: str) -> LayerSpec:
        for s in self.layers:
            if s.name == name:
                return s
        listed = ", ".join(self.layer_names()[:6]) + (" ..." if len(self.layers) > 6 else "")
        raise UnknownLayerError(f"{self.path}: no quantized layer named {shown(name)}; layers: {listed}")

    def load_layer(self, name: str) -> QuantizedLayer:
        """Read one layer's tensors (only those bytes) into a QuantizedLayer."""
        spec = self.spec(name)
        if isinstance(self.parsed, CTConfig):
            return load_ct_layer(spec, self.files.tensors)
        return load_gptq_layer(spec, self.parsed, self.files.tensors)

    def to_dict(self) -> dict:
        return {
            "path": str(self.path), "format": self.format.value,
            "quant_method": self.quant_config.get("quant_method"),
            "params_dtype": self.params_dtype, "sharded": self.files.sharded,
            "files": [f.name for f in self.files.weight_files],
            "notes": list(self.notes), "layers": [s.to_dict() for s in self.layers],
        }


def open_checkpoint(path: str | os.PathLike,
                    allowed_roots: tuple[str | os.PathLike, ...] | None = None, *,
                    rules: ReaderRules | None = None) -> Checkpoint:
    """Open a checkpoint directory (or a single .safetensors file beside its config).

    Every file read must lie (symlinks followed) under the checkpoint's own directory or
    one of `allowed_roots` (default: those named by WORKBENCH_ALLOWED_ROOTS). The config is
    checked against `rules` (the default vLLM rule set's when None).
    """
    rules = pinned() if rules is None else rules
    files = find_files(path, allowed_roots)
    config, qc, where = find_config(files.root, files.roots)
    method = qc.get("quant_method")
    if method is None and where == "quantize_config.json":
        method = "gptq"  # AutoGPTQ's standalone file predates quant_method
    key = method.lower() if isinstance(method, str) else None
    if key not in QUANT_METHODS:
        raise UnknownFormatError(
            f"{files.root / where}: quant_method {shown(method)} is not a format the workbench reads; "
            f"accepted: {', '.join(QUANT_METHODS)}")
    fmt = QUANT_METHODS[key]
    params_dtype, notes = _params_dtype(config)
    source = str(files.root)
    qwhere = f"{where}:quantization_config" if where == "config.json" else where
    if fmt is CheckpointFormat.COMPRESSED_TENSORS:
        parsed = parse_ct_config(qc, qwhere, rules)
        layers = ct_layer_specs(parsed, files.tensors, params_dtype=params_dtype, source=source,
                                rules=rules)
    else:
        parse = {CheckpointFormat.GPTQ: parse_gptq_config, CheckpointFormat.INC: parse_inc_config,
                 CheckpointFormat.AWQ: parse_awq_config}[fmt]
        parsed = parse(qc, qwhere, rules)
        layers = gptq_layer_specs(parsed, files.tensors, params_dtype=params_dtype, source=source)
        notes = notes + lm_head_notes(parsed, files.tensors)
    layers.sort(key=lambda s: _natural_key(s.name))
    if not layers:
        notes = notes + ("no quantized layer found: no tensor matches the config's layout",)
    return Checkpoint(files.root, files, config, qc, fmt, params_dtype, parsed, layers,
                      notes + tuple(getattr(parsed, "notes", ())))


def list_layers(path: str | os.PathLike) -> list[LayerSpec]:
    """Every quantized layer of a checkpoint with shapes, format and args (no tensor data)."""
    return open_checkpoint(path).layers


def load_layer(path: str | os.PathLike, name: str) -> QuantizedLayer:
    """One layer of a checkpoint, reading only that layer's bytes."""
    return open_checkpoint(path).load_layer(name)
