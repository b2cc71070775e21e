"""The registry of dispatch rule sets, one package per vLLM release, keyed by version.

Everything pinned to a release (candidate lists, reason texts, env keys and accepted values,
runtime facts, the docs table, the notes a face adds to a trace) lives in its package; its
`rules` module names them, and `rule_set(version)` hands them out as one `RuleSet` value.
A face is given a `RuleSet` (or reads `trace.rules`): nothing looks one up when imported.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping

from workbench.errors import InvalidInputError

if TYPE_CHECKING:
    from workbench.dispatch.env import EnvRules

# version -> the package holding its rules (each has a `rules` module with the entry points).
RULE_SETS = {"0.33.0": "workbench.dispatch.vllm_0_33"}
DEFAULT_VERSION = "0.33.0"
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


@dataclass(frozen=True, eq=False)  # one value per release: compared and hashed by identity
class RuleSet:
    """One vLLM release's dispatch rules: its entry points and the pinned values faces show.

    The upper-case names are the `rules` module's names for the same objects.
    """

    version: str
    package: str
    # entry points
    choose_mp_linear_kernel: Callable
    trace_compressed_tensors: Callable
    trace_quant_layer: Callable
    trace_config_gate: Callable
    kernel_runtime: Callable
    marlin_padded_nk: Callable[[int, int, int], tuple[int, int]]
    ambiguity_notes: Callable[[Any, Mapping[str, str]], list[str]]  # (trace, env) -> sentences
    SchemeInput: type
    SchemeError: type
    # pinned values
    ENV: "EnvRules"
    ACT_QUANT_FORMATS: Any
    FORMATS: Any
    INC_BACKENDS: Any
    INC_PACKING_FORMATS: Any
    INC_INT_PACKING_FORMATS: Any
    DEFAULT_INT_PACKING_FORMAT: str
    INC_SUPPORTED_BITS: Any
    MIN_TOKENS_FOR_INT8: int
    DIM_ALIGNMENT: int
    ERROR_HEADER: str
    LINEAR_BACKENDS: Any
    POSSIBLE_KERNELS: Any
    SHAPE_MULTIPLES: tuple
    ALL_KERNELS: tuple
    KERNELS_BY_NAME: Mapping
    GPTQ_TYPES: Any
    MARLIN_INT8_SCALE_LEVELS: int
    DOCS_HARDWARE: tuple[str, ...]
    DOCS_TABLE: Mapping[str, tuple[bool, ...]]
    DOCS_CUDA_COLUMNS: tuple

    @property
    def VLLM_VERSION(self) -> str:  # noqa: N802 - the rules module's name for `version`
        return self.version

    @classmethod
    def from_module(cls, package: str, module: ModuleType) -> "RuleSet":
        """The rule set a package's `rules` module names (VLLM_VERSION is its version)."""
        named = {f.name: getattr(module, f.name) for f in fields(cls)
                 if f.name not in ("version", "package")}
        return cls(version=module.VLLM_VERSION, package=package, **named)

    def __reduce__(self):
        # A rule set travels (pickled, as a cached trace is) as its version: one value per release.
        return (rule_set, (self.version,))

    def module(self, name: str) -> ModuleType:
        """One module of this release's package, e.g. its `recorder`."""
        return importlib.import_module(f"{self.package}.{name}")


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
