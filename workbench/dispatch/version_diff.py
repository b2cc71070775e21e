"""What changes for one layer on one platform when vLLM is upgraded: two traces, compared.

`version_diff(trace_old, trace_new)` holds the rows where the two releases' traces differ:
the scheme, each candidate's step (outcome and reason), the selection, the runtime
(activation, op, where it fails and why), the error, and the environment variables the newer
release no longer reads. Each row names, for both releases, the vLLM file:line behind it: the
runtime's own source, else the change the newer rule set records for that rule (its
`Change.source`, and `Change.was` in the older release). No row: "no change".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from workbench.dispatch.trace import Trace
from workbench.dispatch.versions import Change, RuleSet


@dataclass(frozen=True)
class DiffRow:
    """One thing the two traces answer differently."""

    aspect: str  # "scheme", "step", "selected", "runtime", "error", "env"
    subject: str  # the kernel of a step, the runtime field, the env key, or the aspect again
    old: str | None
    new: str | None
    old_source: str | None  # vLLM file:line in the older release
    new_source: str | None  # and in the newer one

    def to_json(self) -> dict:
        return {"aspect": self.aspect, "subject": self.subject, "old": self.old, "new": self.new,
                "old_source": self.old_source, "new_source": self.new_source}


@dataclass(frozen=True)
class VersionDiff:
    old_version: str
    new_version: str
    rows: tuple[DiffRow, ...]

    @property
    def changed(self) -> bool:
        return bool(self.rows)

    def to_json(self) -> dict:
        return {"old_version": self.old_version, "new_version": self.new_version,
                "changed": self.changed, "rows": [r.to_json() for r in self.rows]}

    def to_text(self, indent: str = "  ") -> str:
        if not self.rows:
            return f"{indent}no change"
        out = []
        for r in self.rows:
            label = r.aspect if r.subject == r.aspect else f"{r.aspect} {r.subject}"
            out.append(f"{indent}{label}: {r.old or '-'}  ->  {r.new or '-'}")
            out.append(f"{indent}    {self.old_version}: {r.old_source or '-'} | "
                       f"{self.new_version}: {r.new_source or '-'}")
        return "\n".join(out)


def _changes(rules: RuleSet | None, old: RuleSet | None) -> list[Change]:
    """The changes recorded between `old` and `rules` (every release in between, newest first)."""
    out: list[Change] = []
    r = rules
    while r is not None and r is not old:
        out += list(r.changes)
        r = r.base
    return out


def _cited(changes: list[Change], *rules: str) -> tuple[str | None, str | None]:
    """Both releases' file:line of every change recorded for `rules` (joined), or None."""
    hits = [c for c in changes if c.rule in rules]
    if not hits:
        return None, None
    return (", ".join(dict.fromkeys(c.was for c in hits if c.was)) or None,
            ", ".join(dict.fromkeys(c.source for c in hits)))


def _step(step) -> str | None:
    if step is None:
        return None
    return str(step.outcome) + (f": {step.reason}" if step.reason else "")


def _runtime_fields(t: Trace) -> dict[str, str | None]:
    rt = t.runtime_detail
    if rt is None:
        return {}
    fails = None if rt.fails_at is None else f"at {rt.fails_at}: {rt.error_type}: {rt.error}"
    return {"method": rt.method, "activation": rt.activation, "op": rt.op, "fails": fails}


def version_diff(old: Trace, new: Trace, env: Mapping[str, Any] | None = None) -> VersionDiff:
    """The rows where `new` (the later release's trace) differs from `old`, for one layer
    traced under `env` (the user's keys: a key the newer release stops reading is a row)."""
    changes = _changes(new.rules, old.rules)
    rows: list[DiffRow] = []

    def add(aspect, subject, a, b, sources=(None, None)):
        if a != b:
            rows.append(DiffRow(aspect, subject, a, b, *sources))

    add("scheme", "scheme", old.scheme, new.scheme)
    old_steps = {s.kernel: s for s in old.steps}
    new_steps = {s.kernel: s for s in new.steps}
    # a release that stops before the loop (engine start, method resolution) walked nothing
    # to compare step by step: its selection and error rows say it
    walked = bool(old_steps) and bool(new_steps)
    for kernel in list(dict.fromkeys([*old_steps, *new_steps])) if walked else []:
        cited = _cited(changes, kernel)
        if cited == (None, None):  # its rule is unchanged: the loop stops elsewhere now
            cited = ("not reached" if kernel not in old_steps else "unchanged rule",
                     "not reached" if kernel not in new_steps else "unchanged rule")
        add("step", kernel, _step(old_steps.get(kernel)), _step(new_steps.get(kernel)), cited)
    error_sources = _error_sources(new, changes, env or {})
    kernel_sources = (_cited(changes, old.selected or "", new.selected or "") if walked
                      else error_sources)  # nothing selected: what stopped the load says why
    add("selected", "selected", old.selected, new.selected, kernel_sources)
    a, b = _runtime_fields(old), _runtime_fields(new)
    rt_sources = (old.runtime_detail.source if old.runtime_detail else None,
                  new.runtime_detail.source if new.runtime_detail else None)
    for key in dict.fromkeys([*a, *b]) if a and b else []:  # a runtime on both sides
        add("runtime", key, a.get(key), b.get(key), rt_sources)
    old_error = f"{old.error_type}: {old.error}" if old.error else None
    new_error = f"{new.error_type}: {new.error}" if new.error else None
    add("error", "error", old_error, new_error, error_sources)
    rows += _env_rows(old, new, changes, env or {})
    return VersionDiff(old.vllm_version or "?", new.vllm_version or "?", tuple(rows))


def _error_sources(new: Trace, changes: list[Change],
                   env: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The changes behind the newer trace's error, by where the load stopped."""
    if new.steps:  # the loop ran: its candidates' changes
        return _cited(changes, *(s.kernel for s in new.steps))
    removed = dict(new.rules.ENV.removed) if new.rules is not None else {}
    if any(key in removed for key in env):  # engine start refused a removed variable
        return _cited(changes, "ENV")
    if new.quantization is None and new.method is None:  # engine start or method resolution
        return _cited(changes, "engine_start", "QUANTIZATION_METHODS")
    return _cited(changes, "gptq_linear")


def _env_rows(old: Trace, new: Trace, changes: list[Change],
              env: Mapping[str, Any]) -> list[DiffRow]:
    """The knobs set in `env` that the older release reads and the newer one does not."""
    if old.rules is None or new.rules is None:
        return []
    a, b = old.rules.ENV, new.rules.ENV
    removed = dict(b.removed)
    rows = []
    for key in a.known_keys:
        if key not in env or key in b.known_keys:
            continue
        now = f"removed: {removed[key]}" if key in removed else "not read"
        rows.append(DiffRow("env", key, "read", now, *_cited(changes, "ENV")))
    return rows
