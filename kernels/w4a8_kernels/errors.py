"""Errors raised by kernel entry points; the workbench re-exports them."""
from __future__ import annotations


class KernelError(Exception):
    """Base class of every kernel error the caller can act on."""


class KernelInputError(KernelError, ValueError):
    """Tensors a kernel cannot run correctly: wrong dtype, shape, layout, or values."""


class KernelUnavailableError(KernelError, RuntimeError):
    """A kernel that cannot run on this machine (missing op, ISA, package or device)."""


class KernelMemoryError(KernelError, MemoryError):
    """A layer whose working buffers do not fit the memory this process may use."""
