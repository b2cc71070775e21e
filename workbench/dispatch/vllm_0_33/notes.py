"""Where this release is ambiguous or surprising for one trace: the sentences a face adds.

Each note reads the trace's typed values (steps, the selected kernel, its `Runtime`) and the
env as the user spelled it; what a note says is this release's behaviour, so it lives here.
"""
from __future__ import annotations

from typing import Mapping


def ambiguity_notes(trace, env: Mapping[str, str]) -> list[str]:
    """The notes for `trace`, traced with `env` (the user's KEY -> VALUE text)."""
    notes = []
    disabled = env.get("VLLM_DISABLED_KERNELS", "")
    if ", " in disabled or disabled != disabled.strip():  # envs.py:1219-1222: split(","), no strip
        notes.append("VLLM_DISABLED_KERNELS is split on commas and not stripped: a name with a space "
                     "around it matches no kernel, so only the first of 'A, B' is disabled.")
    if any(s.outcome == "crashed" for s in trace.steps):
        notes.append("vLLM's own check divides by the group size; with group size 0 it crashes "
                     "(ZeroDivisionError) instead of giving a reason. The trace reports the crash.")
    rt = trace.runtime_detail
    if (trace.selected == "HummingLinearKernel" and rt is not None and rt.weight_only
            and rt.activation_requested is None):  # a fallback says why in its runtime line
        notes.append("Humming accepts the layer, but it receives a 16-bit act_type: the INT8 "
                     "activation scheme is not used, so this W4A8 checkpoint runs weight-only.")
    if trace.selected == "CPUWNA16LinearKernel" and rt is not None and rt.fails_at == "forward":
        notes.append("Selection succeeds, but the op is not built for this CPU: vLLM would fail at "
                     "the first forward pass, not at load.")
    if trace.selected == "Dynamic4bitLinearKernel" and rt is not None and rt.impl == "reference":
        notes.append("Selection says W4A8, but on x86 torch's _dyn_quant_matmul_4bit has no KleidiAI "
                     "micro-kernels: it runs a generic reference path (see the Kernels page for its cost).")
    if rt is not None and rt.caveat:  # what vLLM's source leaves undetermined, from the Runtime
        notes.append(rt.caveat)
    if trace.selected == "MacheteLinearKernel" and trace.scheme == "CompressedTensorsWNA8Int":
        notes.append("The checkpoint carries an INT8 activation scheme, but Machete is weight-only: "
                     "it silently runs W4A16.")
    return notes
