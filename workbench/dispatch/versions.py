"""The registry of dispatch rule sets, one package per vLLM release, keyed by version.

Everything pinned to a release (candidate lists, reason texts, env keys and accepted values,
runtime facts, the docs table, the notes a face adds to a trace) lives in its package; its
`rules` module builds them into one `RuleSet` value (`RULES`), and `rule_set(version)` hands
it out. A later release derives its set from the one before (`RuleSet.derive`) and states only
what it changed, each change cited (`Change`). A face is given a `RuleSet` (or reads
`trace.rules`): nothing looks one up when imported.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any, Callable, Mapping

from workbench.errors import InvalidInputError

# version -> the package holding its rules (each has a `rules` module with the entry points).
RULE_SETS = {"0.33.0": "workbench.dispatch.vllm_0_33", "0.34.0": "workbench.dispatch.vllm_0_34"}
DEFAULT_VERSION = "0.34.0"  # the newest release; every other is one choice away
VERSIONS = tuple(RULE_SETS)  # the versions shipped; `available()` also sees one added later


class UnknownVersionError(InvalidInputError):
    """A vLLM version the workbench has no rule set for."""


def available() -> tuple[str, ...]:
    """Every version with a rule set now, the shipped ones and any registered since."""
    return tuple(RULE_SETS)


def check_version(version: str | None) -> str:
    """The version to use: `version`, or the default when None."""
    if version is None:
        return DEFAULT_VERSION
    if version not in RULE_SETS:
        raise UnknownVersionError(f"vllm_version: no rule set for {version!r}; available: "
                                  f"{', '.join(available())}")
    return version


# The names every rule set answers: the entry points faces call and the pinned values they
# show. A rule set may hold more (the seams its own modules read through it).
REQUIRED = (
    "choose_mp_linear_kernel", "trace_compressed_tensors", "trace_quant_layer",
    "trace_config_gate", "kernel_runtime", "marlin_padded_nk", "ambiguity_notes", "SchemeInput",
    "SchemeError", "ENV", "ACT_QUANT_FORMATS", "FORMATS", "INC_BACKENDS", "INC_PACKING_FORMATS",
    "INC_INT_PACKING_FORMATS", "DEFAULT_INT_PACKING_FORMAT", "INC_SUPPORTED_BITS",
    "MIN_TOKENS_FOR_INT8", "DIM_ALIGNMENT", "ERROR_HEADER", "LINEAR_BACKENDS", "POSSIBLE_KERNELS",
    "SHAPE_MULTIPLES", "ALL_KERNELS", "KERNELS_BY_NAME", "GPTQ_TYPES", "MARLIN_INT8_SCALE_LEVELS",
    "DOCS_HARDWARE", "DOCS_TABLE", "DOCS_CUDA_COLUMNS",
)


def takes_rules(fn: Callable) -> Callable:
    """Mark a rule that is handed the rule set it runs under as its first argument: read from
    a `RuleSet`, it comes bound to that set, so what it calls through the set is the version's."""
    fn.takes_rules = True
    return fn


@dataclass(frozen=True)
class Change:
    """One thing a release changed against the release it derives from, where its code says so."""

    rule: str  # the rule set's name for what changed (a kernel class's name for its rules)
    what: str  # one sentence
    source: str  # the file:line in this release's sdist (under vllm/)
    was: str | None = None  # the file:line it replaces in the base release's sdist


@dataclass(frozen=True, eq=False)  # one value per release: compared and hashed by identity
class RuleSet:
    """One vLLM release's dispatch rules: named entry points, rule classes and pinned values.

    A release derived from another (`derive`) holds only what it changed; every other name is
    read from its base. A rule marked `takes_rules` comes bound to the set it is read from, so
    a changed rule reaches every path that calls it, whichever module the path lives in.
    """

    version: str
    package: str
    entries: Mapping[str, Any]
    base: "RuleSet | None" = None
    changes: tuple[Change, ...] = ()

    @classmethod
    def root(cls, version: str, package: str, entries: Mapping[str, Any]) -> "RuleSet":
        """A release modelled whole (the first one)."""
        missing = [n for n in REQUIRED if n not in entries]
        if missing:
            raise TypeError(f"rule set {version}: missing {', '.join(missing)}")
        return cls(version, package, dict(entries))

    def derive(self, version: str, package: str, changes: tuple[Change, ...] = (),
               **entries: Any) -> "RuleSet":
        """The next release: this one with `entries` replaced (or added), `changes` cited."""
        return RuleSet(version, package, {**self.entries, **entries}, self, tuple(changes))

    def __getattr__(self, name: str) -> Any:
        entries = self.__dict__.get("entries")
        if entries is None or name not in entries:
            raise AttributeError(f"rule set {self.__dict__.get('version')}: no rule {name!r}")
        value = entries[name]
        if getattr(value, "takes_rules", False):
            return partial(value, self)
        return value

    def own(self) -> dict[str, Any]:
        """The entries this release set itself (all of them for a root)."""
        if self.base is None:
            return dict(self.entries)
        return {k: v for k, v in self.entries.items() if self.base.entries.get(k) is not v}

    def lineage(self) -> tuple["RuleSet", ...]:
        """This release and the ones it derives from, newest first."""
        return (self,) + (self.base.lineage() if self.base is not None else ())

    def cite(self, citation: str) -> str:
        """A `file:line` an inherited rule wrote, in this release's lines (unchanged for the
        release that wrote it); a line this release changed is cited as the base's, so marked."""
        own = self.own()
        if self.base is None or citation in own.get("OWN_CITATIONS", ()):
            return citation
        from workbench.dispatch.citations import CITATION, relocate
        carried = self.base.cite(citation)
        m = CITATION.fullmatch(carried)
        moved_to = own.get("CITES_MOVED", {}).get((m["path"], int(m["a"])) if m else None)
        if moved_to is not None:  # a line that moved to another file
            return moved_to
        moved = relocate(carried, self.entries.get("LINES_MOVED", {}))
        return moved if moved is not None else f"{carried} (vLLM {self.base.version})"

    @property
    def VLLM_VERSION(self) -> str:  # noqa: N802 - the rules module's name for `version`
        return self.version

    @classmethod
    def from_module(cls, package: str, module: ModuleType) -> "RuleSet":
        """The rule set a package's `rules` module holds (`RULES`), or, for a module that names
        every required rule itself, the set of its public names (VLLM_VERSION its version)."""
        built = getattr(module, "RULES", None)
        if isinstance(built, RuleSet) and built.package == package:
            return built
        named = {k: v for k, v in vars(module).items() if not k.startswith("_")}
        if isinstance(built, RuleSet):  # another release's names, some of them replaced
            return built.derive(module.VLLM_VERSION, package,
                                **{k: v for k, v in named.items()
                                   if k in built.entries and built.entries[k] is not v})
        return cls.root(module.VLLM_VERSION, package, named)

    def __reduce__(self):
        # A rule set travels (pickled, as a cached trace is) as its version: one value per release.
        return (rule_set, (self.version,))

    def module(self, name: str) -> ModuleType:
        """One module of this release's package, e.g. its `recorder`; a module the release did
        not change is its base's."""
        for r in self.lineage():
            try:
                return importlib.import_module(f"{r.package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{r.package}.{name}":
                    raise
        raise ModuleNotFoundError(f"rule set {self.version}: no module {name!r}")


_BUILT: dict[str, tuple[ModuleType, RuleSet]] = {}


def rule_set(which: "RuleSet | str | None" = None) -> RuleSet:
    """The rule set of a version (a `RuleSet` is returned as given; None: the pinned one)."""
    if isinstance(which, RuleSet):
        return which
    version = check_version(which)
    package = RULE_SETS[version]
    module = importlib.import_module(package + ".rules")
    built = _BUILT.get(version)
    if built is None or built[0] is not module or built[1].package != package:
        built = _BUILT[version] = (module, RuleSet.from_module(package, module))
    return built[1]


def pinned() -> RuleSet:
    """The rule set of the pinned release (`DEFAULT_VERSION`)."""
    return rule_set(DEFAULT_VERSION)


def rules(version: str | None = None) -> RuleSet:
    """`rule_set(version)`, by its older name."""
    return rule_set(version)
