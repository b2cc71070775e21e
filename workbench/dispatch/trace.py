"""The record of one dispatch: scheme resolution, every candidate kernel, the outcome.

A `Trace` is a value: the selection loop builds one and returns it, as vLLM's loop returns its
kernel, and each stage of the load returns a new one (`dataclasses.replace`, `noted`, `gated`,
`failed`). A stage that raises vLLM's error does so before it has added to the trace; once it
has, it returns the trace with the error (`failed`), so a refusal keeps how far the load got.
`Trace.to_json()` is the workbench's trace JSON, read by other tools: keep its keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum, StrEnum
from typing import TYPE_CHECKING

from workbench.dispatch.runtime_text import describe_runtime

if TYPE_CHECKING:
    from workbench.dispatch.types import MPConfig, Runtime, UnsplitPartition
    from workbench.dispatch.versions import RuleSet


class Level(StrEnum):
    """Where in vLLM's load a trace starts: one member per public `trace_*` entry point."""

    MP = "mp"
    """`choose_mp_linear_kernel` alone, on an `MPLinearLayerConfig`."""
    SCHEME = "scheme"
    """A compressed-tensors layer: scheme predicates, capability gate, then its kernel loop."""
    INC = "inc"
    """An INC / AutoRound layer: its scheme, then the per-platform linear method."""
    GPTQ = "gptq"
    """A GPTQ checkpoint's layer, loaded as `auto_gptq` (Marlin-checked, then the loop)."""
    AWQ = "awq"
    """An AWQ checkpoint's layer, loaded as `auto_awq` (or `awq` on CPU)."""
    CONFIG_GATE = "config-gate"
    """The model-wide config: the method vLLM resolves and its capability / dtype gate."""


class Outcome(StrEnum):
    """How one candidate kernel left `choose_mp_linear_kernel`."""

    SELECTED = "selected"
    """`can_implement` said yes: the loop returns this kernel."""
    REJECTED = "rejected"
    """`can_implement` said no; the step's reason is its text."""
    DISABLED = "disabled"
    """Named in `VLLM_DISABLED_KERNELS`: skipped before any check."""
    CAPABILITY = "capability"
    """`get_min_capability()` is above the platform's compute capability."""
    CRASHED = "crashed"
    """`can_implement` raised: the loop, and the layer's load, stop there."""


class Stage(IntEnum):
    """How far the layer's load got, in order: each stage implies the ones before it."""

    RESOLVE = 0
    """Config, scheme or method resolution and its gates only: no weights were created."""
    CREATE_WEIGHTS = 1
    """The linear method's `create_weights` ran: vLLM's recorder holds a `kernel` record."""
    KERNEL_LOOP = 2
    """`choose_mp_linear_kernel` ran: its candidates, steps and reasons are the trace's."""


@dataclass(frozen=True)
class Step:
    """One candidate kernel as the loop met it; `reason` is vLLM's text (None if selected)."""

    kernel: str
    outcome: Outcome
    reason: str | None

    def __post_init__(self):
        object.__setattr__(self, "outcome", Outcome(self.outcome))

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "outcome": self.outcome.value, "reason": self.reason}


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


_TUPLES = ("predicates", "gates", "inner", "candidates", "steps", "reasons", "notes")


@dataclass(frozen=True, kw_only=True)
class Trace:
    """A kernel selection (and, for the other levels, the resolution before it)."""

    level: Level = Level.MP
    reached: Stage = Stage.RESOLVE
    # How vLLM resolved the layer before any kernel loop.
    quantization: str | None = None  # the method name vLLM resolved from the checkpoint
    predicates: tuple[Predicate, ...] = ()  # the scheme predicates tried, in vLLM's order
    scheme: str | None = None  # the scheme (or quant method class) the layer resolved to
    gates: tuple[str, ...] = ()  # the gates it passed, in words
    method: str | None = None  # the linear method `get_quant_method` returned (gptq/awq/inc)
    inner: tuple[str, ...] = ()  # what that method delegates to
    # The mixed-precision loop (filled once `reached` is KERNEL_LOOP; mp_config may come first).
    mp_config: "MPConfig | None" = None
    candidates: tuple[str, ...] = ()  # the loop's candidates, in the order it walks them
    steps: tuple[Step, ...] = ()
    reasons: tuple[str, ...] = ()  # the loop's collected reasons, as its ValueError lists them
    # The outcome.
    selected: str | None = None  # the kernel the loop returned, or the linear method that runs
    error: str | None = None  # what vLLM raised, byte for byte; None when the layer loads
    error_type: str | None = None
    runtime_detail: "Runtime | None" = None  # what the selected kernel computes on this platform
    notes: tuple[str, ...] = ()  # vLLM's log lines and runtime facts
    # Provenance: the rule set that produced it, stamped by the caller that resolved it.
    vllm_version: str | None = None
    rules: "RuleSet | None" = field(default=None, compare=False, repr=False)  # what traced it

    def __post_init__(self):
        object.__setattr__(self, "level", Level(self.level))
        object.__setattr__(self, "reached", Stage(self.reached))
        for name in _TUPLES:  # a list handed in is copied: nothing outside can change the trace
            object.__setattr__(self, name, tuple(getattr(self, name)))

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

    def noted(self, *notes: str) -> Trace:
        """This trace with `notes` logged after its own."""
        return replace(self, notes=self.notes + notes)

    def gated(self, *gates: str) -> Trace:
        """This trace with `gates` passed after its own."""
        return replace(self, gates=self.gates + gates)

    def failed(self, error_type: str, message: str) -> Trace:
        """This trace, stopped where vLLM raised `error_type` with `message`."""
        return replace(self, error=message, error_type=error_type)

    def kernel_json(self) -> dict:
        """The kernel selection alone, in the oracle's `kernel` shape."""
        looped = self.reached >= Stage.KERNEL_LOOP
        out = {
            "mp_config": self.mp_config.to_json() if looped else None,
            "selected": self.selected if looped else None,
            "reasons": list(self.reasons),
            "error": self.error,
            "error_type": self.error_type,
        }
        if looped:  # vLLM's recorder has no candidate list when the loop never ran
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
        if self.level is not Level.MP:
            # the oracle's `kernel` record exists once the linear method's create_weights ran
            out["kernel"] = self.kernel_json() if self.reached >= Stage.CREATE_WEIGHTS else None
            out["predicates"] = [p.to_json() for p in self.predicates]
            out["gates"] = list(self.gates)
            if self.level in (Level.GPTQ, Level.AWQ, Level.INC):
                out.update(method=self.method, inner=list(self.inner))
            if self.level in (Level.GPTQ, Level.AWQ, Level.INC, Level.CONFIG_GATE):
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
