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


class MeasurementDiedError(WorkbenchError):
    """A measurement's child process died (a native crash, killed for memory) or was stopped
    at its time limit: what died (`what`), how (`how`: a signal's name, "timeout", "out of
    memory"), during which path and M where known, and what to do, in the message. The
    process that asked goes on (`workbench.contained`)."""

    def __init__(self, message: str, *, what: str = "", how: str = "", path: str | None = None,
                 m: int | None = None, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.what, self.how, self.path, self.m, self.stderr_tail = what, how, path, m, stderr_tail


# Everything a face should show as a one-line message rather than a traceback.
USER_ERRORS = (WorkbenchError, KernelError)

__all__ = [
    "WorkbenchError", "InvalidInputError", "UnknownPresetError", "CheckpointError", "MeasurementDiedError",
    "KernelError", "KernelInputError", "KernelUnavailableError", "USER_ERRORS",
]
