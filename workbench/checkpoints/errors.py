"""Named errors for checkpoints that cannot be read as the format they claim.

All derive from `CheckpointError`, so a face can catch one class. Each message names
the file, tensor or config field at fault and says what would have been accepted.
"""
from __future__ import annotations

from workbench.errors import CheckpointError

__all__ = [
    "shown",
    "MissingConfigError", "InvalidConfigError", "UnknownFormatError", "MissingWeightsError",
    "PickleRefusedError", "CorruptFileError", "MissingTensorError", "TensorMismatchError",
    "GroupSizeError", "BadScalesError", "UnknownLayerError", "UnsupportedLayerError",
    "OutsideRootsError", "NotAFileError", "PatternRefusedError", "PatternSyntaxError",
]


class MissingConfigError(CheckpointError):
    """No config.json (nor quantize_config.json) where the checkpoint should have one."""


class InvalidConfigError(CheckpointError):
    """A config file that is not valid JSON, or a field with a value the format forbids."""


class UnknownFormatError(CheckpointError):
    """A quant_method or compression format the workbench does not read."""


class MissingWeightsError(CheckpointError):
    """No safetensors file in the checkpoint, or an index naming a file that is absent."""


class PickleRefusedError(CheckpointError):
    """A pickle (or torch zip) file offered as weights: refused without being read."""


class CorruptFileError(CheckpointError):
    """A safetensors file that is truncated or whose header is malformed or lies."""


class MissingTensorError(CheckpointError):
    """A tensor the layer's format requires is not in the checkpoint."""


class TensorMismatchError(CheckpointError):
    """Config and tensors disagree (shape, dtype, packed size, value range)."""


class GroupSizeError(TensorMismatchError):
    """A group size that does not divide the layer's in_features."""


class BadScalesError(CheckpointError):
    """Scales holding NaN, Inf or zero: the dequantized layer would be garbage."""


class UnknownLayerError(CheckpointError):
    """A layer name that is not a quantized layer of the checkpoint."""


class UnsupportedLayerError(CheckpointError):
    """A quantized layer the workbench lists but cannot load (e.g. not an int weight)."""


class OutsideRootsError(CheckpointError):
    """A file whose real path (symlinks followed) lies outside every allowed root."""


class NotAFileError(CheckpointError):
    """A FIFO, device, socket or directory where a checkpoint file is expected: refused unopened."""


class PatternRefusedError(InvalidConfigError):
    """A regular expression from a checkpoint that cannot be matched with bounded work."""


class PatternSyntaxError(InvalidConfigError):
    """A regular expression from a checkpoint that the library vLLM compiles it with rejects.
    `library_error`: that library's own message where it raised its `error` (what vLLM's call
    raises), else None."""

    def __init__(self, message: str, library_error: str | None = None):
        super().__init__(message)
        self.library_error = library_error


def shown(value: object, limit: int = 120) -> str:
    """repr(value) for a message, cut to `limit` characters: a hostile config or header must
    not turn one error line into megabytes."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
