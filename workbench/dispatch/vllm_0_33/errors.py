"""What vLLM raised while building a layer: its exception type name and exact text."""
from __future__ import annotations


class VllmError(Exception):
    """vLLM raised `error_type` with `message`; the trace carries both, byte for byte."""

    def __init__(self, error_type: str, message: str):
        super().__init__(message)
        self.error_type = error_type
        self.message = message
