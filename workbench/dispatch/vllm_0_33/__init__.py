"""Dispatch rules of vLLM v0.33.0 (sdist commit 4ba787ec9), one module per part of vLLM."""

VLLM_VERSION = "0.33.0"
