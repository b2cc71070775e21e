"""Per-layer quantization of INC and GPTQ checkpoints, as the pinned vLLM resolves it: one
matcher and one policy, read by the checkpoint readers (which layers a listing holds, with
which bits, group size and symmetry) and by the rule set (what vLLM builds for a layer).

- The matcher: `compile_pattern` in the `regex` dialect. Both vLLM files import the `regex`
  package as `re`: inc/config_parser.py:7 (`re.search` at :100 and :137) and
  utils/gptq_utils.py:8 (`re.match` at :94 and :98).
- INC: `INCConfigParser._resolve_raw` (inc/config_parser.py:82-214): an exact extra_config key,
  then a key the name ends with (".key"), with the base values; otherwise the layer is
  quantized unless it is the ParallelLMHead (:171), `block_name_to_quantize` deciding instead
  when set (:172-176), and the first regex key that searches the name applies (:130-153),
  with 16-bit defaults for an unquantized layer. bits >= 16 is unquantized (:73).
- GPTQ: `get_linear_quant_method` (utils/gptq_utils.py:172-202): the ParallelLMHead gets a
  quantized method only when the config's `lm_head` is true (:179-182; AutoGPTQConfig reads
  it at auto_gptq.py:198); a "-:" dynamic rule or a name outside
  `modules_in_block_to_quantize` leaves the layer unquantized (:183-195); `override_config`
  (:55-82) takes a dynamic rule's bits / group_size / sym when they have the base's type.

The ParallelLMHead is the checkpoint's `lm_head` (`workbench.layer.is_lm_head`); the caller
says whether the layer is one, so a stand-in Linear named "lm_head" stays a Linear.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from workbench.checkpoints.errors import PatternSyntaxError
from workbench.checkpoints.patterns import Pattern, compile_pattern

__all__ = ["REGEX_SPECIAL", "Quant", "inc_regex", "inc_layer", "gptq_dynamic", "gptq_layer",
           "dynamic_body"]

# The characters that make an extra_config key a regex (config_parser.py:85 and :129).
REGEX_SPECIAL = frozenset(r"*+?^$()[]{}|\\")

Quant = tuple[Any, Any, Any]  # (bits, group_size, sym), as the config wrote them
UNQUANTIZED_INC: Quant = (16, -1, True)  # get_config's defaults for a layer left unquantized


def inc_regex(key: str, where: str | None = None) -> Pattern | None:
    """The pattern of an extra_config key vLLM treats as a regex, or None: a key without a
    special character, or one the `regex` package rejects (skipped: `except re.error`). A
    pattern that cannot be run in bounded work raises PatternRefusedError."""
    if not isinstance(key, str) or not any(ch in REGEX_SPECIAL for ch in key):
        return None
    try:
        return compile_pattern(key, where or f"extra_config key {key!r}")
    except PatternSyntaxError:
        return None


def _entry(cfg: Mapping, default: Quant) -> Quant:
    return (cfg.get("bits", default[0]), cfg.get("group_size", default[1]),
            cfg.get("sym", default[2]))


def inc_layer(name: str, *, lm_head: bool, base: Quant, extra: Mapping[str, Mapping],
              blocks: Sequence[str] = (), where: str | None = None) -> Quant:
    """(bits, group_size, sym) INC gives layer `name`; bits >= 16 means unquantized.
    `where` names the config in a refused pattern's error."""
    if name in extra:
        return _entry(extra[name], base)
    for key in extra:
        if name.endswith(f".{key}"):
            return _entry(extra[key], base)
    quantized = not lm_head
    if blocks:
        quantized = any(name.startswith(b) for b in blocks)
    default = base if quantized else UNQUANTIZED_INC
    for key, cfg in extra.items():
        pattern = inc_regex(key, where)
        if pattern is not None and pattern.search(name):
            return _entry(cfg, default)
    return default


def dynamic_body(key: str) -> str:
    """A dynamic rule's pattern: "-:" negates, "+:" is optional (utils/gptq_utils.py:93-98)."""
    return key.removeprefix("-:") if key.startswith("-:") else key.removeprefix("+:")


def _match(pattern: str, name: str) -> bool:
    return compile_pattern(pattern, "gptq.dynamic").match(name)


def gptq_dynamic(dynamic: Mapping[str, Any], name: str, key: str | None = None,
                 default: Any = None, match: Callable[[str, str], bool] = _match) -> Any:
    """`get_dynamic_override` (utils/gptq_utils.py:85-103): False when a "-:" rule matches
    first, else the first matching rule's dict (or its `key`), else `default`."""
    for pattern, values in dynamic.items():
        if pattern.startswith("-:"):
            if match(dynamic_body(pattern), name):
                return False
        elif match(dynamic_body(pattern), name):
            return values if key is None else values.get(key, default)
    return default


def gptq_layer(name: str, *, lm_head: bool, lm_head_quantized: bool, base: Quant,
               dynamic: Mapping[str, Any], blocks: Sequence[str] = (),
               match: Callable[[str, str], bool] = _match) -> Quant | None:
    """(bits, group_size, sym) GPTQ gives layer `name`, or None when vLLM leaves it
    unquantized (the ParallelLMHead without `lm_head: true`, a "-:" rule, a name outside
    `modules_in_block_to_quantize`)."""
    if lm_head and not lm_head_quantized:
        return None
    if gptq_dynamic(dynamic, name, match=match) is False or (
            blocks and not any(b in name for b in blocks)):
        return None
    if not name:  # override_config runs for a named layer only (utils/gptq_utils.py:197-199)
        return base
    got = [gptq_dynamic(dynamic, name, key, value, match)
           for key, value in zip(("bits", "group_size", "sym"), base)]
    return (got[0] if isinstance(got[0], int) else base[0],
            got[1] if isinstance(got[1], int) else base[1],
            got[2] if isinstance(got[2], bool) else base[2])
