"""The one sentence every face shows for a `Runtime`, rendered from its fields."""
from __future__ import annotations

from workbench.dispatch.types import Runtime

_WHERE = {"load": "at weight loading (process_weights_after_loading)",
          "forward": "at its first forward"}


def _per(rt: Runtime) -> str:
    return "per token" if rt.activation_group_size is None else \
        f"per group of {rt.activation_group_size}"


def describe_runtime(rt: Runtime | None) -> str:
    """What runs, in one sentence; "" when nothing was selected."""
    if rt is None:
        return ""
    if rt.fails_at is not None:
        return (f"{rt.method} is selected, but vLLM fails {_WHERE[rt.fails_at]}: "
                f"{rt.error_type}: {rt.error}")
    if rt.weight_only:
        text = (f"Weight-only (W{rt.weight_bits}A16): activations stay {rt.activation}; {rt.op} "
                f"reads the {rt.weight} weights")
        if rt.isa_hint:
            text += f" with isa_hint={rt.isa_hint!r}"
    elif rt.activation == "fp8":
        fp8 = {None: "fp8 e4m3", "float8e4m3": "fp8 e4m3", "float8e3m4": "fp8 e3m4",
               "float8e5m2": "fp8 e5m2"}[rt.activation_dtype]
        text = f"W{rt.weight_bits}A8-FP8: activations quantized {_per(rt)} to {fp8}; {rt.op}"
    else:
        text = (f"Real W4A8: activations quantized {_per(rt)} to {rt.activation}; {rt.op} on "
                f"{rt.weight} weights")
        if rt.impl == "reference":
            text += ", through torch's generic reference loop (no KleidiAI here: very slow)"
        elif rt.impl == "kleidiai":
            text += ", KleidiAI micro-kernels"
    if rt.activation_requested is not None:
        text += (f", not the {rt.activation_requested} activations the layer's input schema "
                 f"asks for: Humming's input-schema fallback decides so ({rt.source})")
    if rt.min_tokens is not None:
        text += (f", for calls of at least {rt.min_tokens} tokens; smaller calls run "
                 f"{rt.fallback_op} (W4A16)")
    if rt.scale_dtype is not None:
        text += f"; the op reads the scales as {rt.scale_dtype}"
    if rt.output is not None:
        text += f"; output {rt.output}"
    text += "."
    if rt.warning:
        text += f" vLLM warns: {rt.warning}"
    return text
