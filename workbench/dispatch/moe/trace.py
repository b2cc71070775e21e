"""The record of one MoE layer's dispatch: method resolution, the oracle's backends and their
experts classes, the outcome. A frozen value, built by the rules and rendered at the faces.

The steps reuse the linear trace's types: a scheme predicate is a `Predicate`, an experts
class the oracle asked is a `Step` (selected, or rejected with vLLM's reason).
`MoETrace.oracle_json()` is the shape the MoE recorder writes (`expected` of a case).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from workbench.dispatch.trace import Outcome, Predicate, Step

if TYPE_CHECKING:
    from workbench.dispatch.moe.layer import MoELayer


@dataclass(frozen=True)
class BackendStep:
    """One backend of the oracle's priority list as the loop met it: the backend-level reason
    that skipped it (WNA16's `_backend_incompatibility_reason`), else its experts classes."""

    backend: str
    skipped: str | None = None
    probes: tuple[Step, ...] = ()
    checked: bool = False  # the oracle asked a backend-level reason (None: it had none)

    def to_json(self) -> dict:
        return {"backend": self.backend, "skipped": self.skipped,
                "probes": [p.to_json() for p in self.probes]}


@dataclass(frozen=True, kw_only=True)
class MoETrace:
    """What vLLM does with one fused-MoE layer of a compressed-tensors checkpoint."""

    layer: "MoELayer"
    platform: str
    moe_backend: str = "auto"
    predicates: tuple[Predicate, ...] = ()  # get_moe_method's tests, in vLLM's order
    method: str | None = None  # the MoE method class get_moe_method constructed
    oracle: str | None = None  # the selection function the method ran
    candidates: tuple[str, ...] = ()  # the backends it walks, in order
    backends: tuple[BackendStep, ...] = ()
    backend: str | None = None  # the backend selected
    experts: str | None = None  # its experts class: what runs
    error: str | None = None  # what vLLM raised, byte for byte
    error_type: str | None = None
    stage: str | None = None  # where it raised: "resolve", "method", "oracle", "create_weights"
    notes: tuple[str, ...] = ()  # vLLM's log lines on the way
    sources: tuple[str, ...] = ()  # the vLLM file:line of each rule applied, in order
    vllm_version: str | None = None
    runs: str | None = None  # what the selected experts compute, in words (faces render it)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def probes(self) -> tuple[Step, ...]:
        return tuple(p for b in self.backends for p in b.probes)

    def failed(self, error_type: str, message: str, stage: str) -> "MoETrace":
        return replace(self, error=message, error_type=error_type, stage=stage)

    def oracle_json(self) -> dict:
        """The recorder's `expected` shape: what vLLM's own code answered."""
        return {"method": self.method, "backend": self.backend, "experts": self.experts,
                "probes": [[p.kernel, p.outcome is Outcome.SELECTED, p.reason]
                           for p in self.probes],
                "backend_reasons": [[b.backend, b.skipped] for b in self.backends
                                    if b.checked],
                "error": self.error, "error_type": self.error_type}

    def to_json(self) -> dict:
        return {"level": "moe", "layer": self.layer.to_json(), "platform": self.platform,
                "moe_backend": self.moe_backend,
                "predicates": [p.to_json() for p in self.predicates],
                "method": self.method, "oracle": self.oracle,
                "candidates": list(self.candidates),
                "backends": [b.to_json() for b in self.backends],
                "backend": self.backend, "experts": self.experts, "runs": self.runs,
                "error": self.error, "error_type": self.error_type, "stage": self.stage,
                "notes": list(self.notes), "sources": list(self.sources),
                "vllm_version": self.vllm_version}

    def to_markdown(self, title: str = "MoE dispatch trace") -> str:
        ly = self.layer
        lines = [f"# {title}", "",
                 f"Layer `{ly.layer_name}`: {ly.num_experts} experts, top-{ly.top_k}, hidden "
                 f"{ly.hidden_size}, intermediate {ly.intermediate_size}, {ly.activation}, "
                 f"{ly.params_dtype}; platform `{self.platform}`; moe_backend "
                 f"`{self.moe_backend}`; vLLM {self.vllm_version}", ""]
        if self.predicates:
            lines += ["## Method resolution (CompressedTensorsMoEMethod.get_moe_method)", "",
                      "| # | predicate | matched | detail |", "| --- | --- | --- | --- |"]
            for i, p in enumerate(self.predicates, 1):
                lines.append(f"| {i} | `{p.name}` | "
                             f"{'yes -> ' + p.result if p.matched else 'no'} | {p.detail} |")
            lines.append("")
        if self.method:
            lines += [f"Method: `{self.method}`", ""]
        if self.oracle:
            lines += [f"## MoE kernel oracle (`{self.oracle}`)", "",
                      f"Backends in order: {', '.join(self.candidates) or '(none)'}", "",
                      "| backend | experts class | outcome | reason |",
                      "| --- | --- | --- | --- |"]
            for b in self.backends:
                if b.skipped is not None:
                    lines.append(f"| {b.backend} | - | skipped | {b.skipped} |")
                for p in b.probes:
                    lines.append(f"| {b.backend} | `{p.kernel}` | {p.outcome} | "
                                 f"{p.reason or ''} |")
            lines.append("")
        if self.experts:
            lines.append(f"**Selected:** backend `{self.backend}`, experts `{self.experts}`"
                         + (f": {self.runs}" if self.runs else ""))
        if self.error:
            lines += [f"**{self.error_type}** (at {self.stage}):", "", "```", self.error, "```"]
        if self.notes:
            lines += ["", "Log:", ""] + [f"- {n}" for n in self.notes]
        if self.sources:
            lines += ["", "Rules applied (vLLM source):", ""] + [f"- {s}" for s in self.sources]
        return "\n".join(lines) + "\n"
