"""Dispatch rules of vLLM v0.34.0: only what changed against 0.33.0, each change cited."""

VLLM_VERSION = "0.34.0"
