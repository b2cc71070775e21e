"""Named exceptions for input the user can fix.

Every message says what was wrong, where (field, tensor or file), and what is accepted.
Faces (CLI, app, notebooks) show the message and keep going; they never show a traceback.
"""
from __future__ import annotations

from w4a8_kernels.errors import KernelError, KernelInputError, KernelUnavailableError


class WorkbenchError(Exception):
    """Base class of every error caused by the user's input."""


class InvalidInputError(WorkbenchError, ValueError):
    """A field of a config, platform or request holds a value the workbench does not accept."""


class UnknownPresetError(InvalidInputError):
    """A platform or model preset name that does not exist."""


class CheckpointError(WorkbenchError):
    """A checkpoint directory or file that cannot be read as the format it claims."""


# Everything a face should show as a one-line message rather than a traceback.
USER_ERRORS = (WorkbenchError, KernelError)

__all__ = [
    "WorkbenchError", "InvalidInputError", "UnknownPresetError", "CheckpointError",
    "KernelError", "KernelInputError", "KernelUnavailableError", "USER_ERRORS",
]
