"""The record of one dispatch: scheme resolution, every candidate kernel, the outcome.

`Trace.to_json()` is the workbench's trace JSON, read by other tools: keep its keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workbench.dispatch.runtime_text import describe_runtime

if TYPE_CHECKING:
    from workbench.dispatch.types import MPConfig, Runtime, UnsplitPartition

OUTCOMES = ("selected", "rejected", "disabled", "capability", "crashed")


@dataclass(frozen=True)
class Step:
    """One candidate kernel as the loop met it; `reason` is vLLM's text (None if selected)."""

    kernel: str
    outcome: str
    reason: str | None

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "outcome": self.outcome, "reason": self.reason}


@dataclass(frozen=True)
class Predicate:
    """One scheme predicate as vLLM tests it, in order; `detail` says which condition decided."""

    name: str
    result: str  # the scheme class it gives, or "" when not matched
    matched: bool
    detail: str

    def to_json(self) -> dict:
        return {"name": self.name, "result": self.result or None, "matched": self.matched,
                "detail": self.detail}


@dataclass
class Trace:
    """A kernel selection (and, for scheme traces, the scheme resolution before it)."""

    steps: list[Step] = field(default_factory=list)
    selected: str | None = None
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    error_type: str | None = None
    mp_config: "MPConfig | None" = None
    candidates: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # vLLM's log lines and runtime facts
    scheme: str | None = None
    predicates: list[Predicate] = field(default_factory=list)
    gates: list[str] = field(default_factory=list)
    level: str = "mp"  # "mp", "scheme" or "inc"
    runtime_detail: "Runtime | None" = None  # what the chosen kernel computes on this platform
    kernel_stage: bool = False  # a scheme's weight creation ran (the oracle's `kernel` object)
    selection_ran: bool = False  # choose_mp_linear_kernel was called
    vllm_version: str | None = None  # the rule set that produced it
    method: str | None = None  # the linear method `get_quant_method` returned (gptq/awq/inc)
    inner: list[str] = field(default_factory=list)  # what that method delegates to
    quantization: str | None = None  # the method name vLLM resolved from the checkpoint

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def warnings(self) -> "list[UnsplitPartition]":
        """Typed warnings about the input, for the faces to render (`sentence()`): a partition
        no TP split produces (`UnsplitPartition`)."""
        w = None if self.mp_config is None else self.mp_config.partition_warning
        return [] if w is None else [w]

    @property
    def runtime(self) -> str:
        """The runtime sentence, rendered from `runtime_detail`."""
        return describe_runtime(self.runtime_detail)

    def kernel_json(self) -> dict:
        """The kernel selection alone, in the oracle's `kernel` shape."""
        out = {
            "mp_config": self.mp_config.to_json() if self.selection_ran else None,
            "selected": self.selected if self.selection_ran else None,
            "reasons": list(self.reasons),
            "error": self.error,
            "error_type": self.error_type,
        }
        if self.selection_ran:  # vLLM's recorder has no candidate list when the loop never ran
            out["candidates"] = list(self.candidates)
        return out

    def to_json(self) -> dict:
        out = {
            "scheme": self.scheme,
            "steps": [s.to_json() for s in self.steps],
            "selected": self.selected,
            "error": self.error,
            "reasons": list(self.reasons),
            "error_type": self.error_type,
        }
        if self.level != "mp":
            out["kernel"] = self.kernel_json() if self.kernel_stage else None
            out["predicates"] = [p.to_json() for p in self.predicates]
            out["gates"] = list(self.gates)
            if self.level in ("gptq", "awq", "inc"):
                # create_weights runs, and the oracle's `kernel` exists, once a method does
                out["kernel"] = self.kernel_json() if self.method is not None else None
                out.update(method=self.method, inner=list(self.inner))
            if self.level in ("gptq", "awq", "inc", "config-gate"):
                out["quantization"] = self.quantization
        else:
            out["mp_config"] = None if self.mp_config is None else self.mp_config.to_json()
            out["candidates"] = list(self.candidates)
        out["notes"] = list(self.notes)
        out["warnings"] = [w.to_json() for w in self.warnings]
        out["runtime"] = self.runtime
        out["runtime_detail"] = None if self.runtime_detail is None else self.runtime_detail.to_json()
        out["vllm_version"] = self.vllm_version
        return out

    def to_markdown(self, title: str = "Dispatch trace") -> str:
        lines = [f"# {title}", ""]
        if self.predicates:
            lines += ["## Scheme resolution", "", "| # | predicate | matched | detail |",
                      "| --- | --- | --- | --- |"]
            for i, p in enumerate(self.predicates, 1):
                lines.append(f"| {i} | `{p.name}` | {'yes -> ' + p.result if p.matched else 'no'} "
                             f"| {p.detail} |")
            lines.append("")
        if self.scheme:
            lines += [f"Scheme: `{self.scheme}`", ""]
        for gate in self.gates:
            lines.append(f"- {gate}")
        if self.mp_config is not None:
            lines += ["", "## Kernel selection", "", f"MP config: `{self.mp_config.to_json()}`", ""]
            lines += [f"**Warning:** {w.sentence()}" for w in self.warnings] + [""] * bool(self.warnings)
            lines += ["| # | kernel | outcome | reason |", "| --- | --- | --- | --- |"]
            for i, s in enumerate(self.steps, 1):
                lines.append(f"| {i} | `{s.kernel}` | {s.outcome} | {s.reason or ''} |")
        lines.append("")
        if self.selected:
            lines.append(f"**Selected:** `{self.selected}`" + (f": {self.runtime}" if self.runtime else ""))
        if self.error:
            lines += [f"**{self.error_type}:**", "", "```", self.error, "```"]
        if self.notes:
            lines += ["", "Log and runtime notes:", ""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"
