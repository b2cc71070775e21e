"""What the checkpoint readers check a config against, taken from one vLLM rule set.

The readers are handed this value (`open_checkpoint(..., rules=...)`); they import nothing
of the dispatch core. `pinned(version)` builds it from the rule set of a version when a
caller has none to give, at call time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ReaderRules", "pinned"]


@dataclass(frozen=True)
class ReaderRules:
    """The accepted values one vLLM release's config readers hold."""

    vllm_version: str
    ct_formats: tuple[str, ...]  # compressed-tensors' CompressionFormat values
    gptq_bits: frozenset[int]  # the bits AutoGPTQConfig.TYPE_MAP has (symmetric or not)
    inc_supported_bits: tuple[int, ...]  # INCConfig's sets, in vLLM's declaration order
    inc_packing_formats: tuple[str, ...]
    inc_backends: tuple[str, ...]
    inc_int_packing: tuple[str, ...]  # the integer (GPTQ / AWQ tensor) packing formats
    inc_default_packing: str  # INCConfig's packing_format when the config names none

    @property
    def vllm(self) -> str:
        """"vLLM <version>": the notes name the rules they were checked against."""
        return f"vLLM {self.vllm_version}"

    @classmethod
    def of(cls, rule_set: Any) -> "ReaderRules":
        """The values of a rule set (its `rules` module or value)."""
        return cls(rule_set.VLLM_VERSION, tuple(rule_set.FORMATS),
                   frozenset(bits for bits, _ in rule_set.GPTQ_TYPES),
                   tuple(rule_set.INC_SUPPORTED_BITS), tuple(rule_set.INC_PACKING_FORMATS),
                   tuple(rule_set.INC_BACKENDS), tuple(rule_set.INC_INT_PACKING_FORMATS),
                   rule_set.DEFAULT_INT_PACKING_FORMAT)


def pinned(version: str | None = None) -> ReaderRules:
    """The ReaderRules of vLLM `version` (the default rule set's when None)."""
    from workbench.dispatch.versions import rules  # at call time: the readers stay below dispatch

    return ReaderRules.of(rules(version))
