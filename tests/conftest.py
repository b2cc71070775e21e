"""Session-wide test set-up.

Triton binds its own `@jit` helpers to the compiler or to the CPU interpreter when it is first
imported, and several modules import it (probes, the path registry). Without a GPU, choose the
interpreter here, before any test module is collected, so the Triton kernel tests run in CI.
"""
from __future__ import annotations

import os

if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
