"""Regular expressions from checkpoints, matched in time linear in the name.

A checkpoint supplies both the patterns (compressed-tensors `re:` targets and ignores,
GPTQModel `dynamic` keys, INC `extra_config` keys) and the names they are matched
against. vLLM matches them with Python's backtracking `re`
(vllm/model_executor/layers/quantization/utils/config_utils.py:445 `re.match` in
`is_equal_or_regex_match`; utils/gptq_utils.py:94 and :98 `re.match` in
`get_dynamic_override`; inc/config_parser.py:100 and :137 `re.search`, with the `regex`
package imported as `re` at :7, whose syntax is a superset of re's), where
`re:(a|aa)+$` against 40 characters takes tens of seconds and 60 would take days.

Here a pattern is parsed by `re`'s own parser (so syntax, escapes, classes and inline
flags mean exactly what they mean to vLLM) and run as a Thompson NFA: all paths advance
together, so the work is at most (program size) x (name length), whatever the pattern.
Whether a match exists does not depend on backtracking order, so the answer is the
one `re.match` / `re.search` gives. Lookaround is evaluated by a nested run at that
position (memoized), which keeps the bound polynomial. What cannot be run this way is
refused with `PatternRefusedError` quoting the pattern: backreferences, conditionals,
atomic groups and possessive repeats (they make the answer depend on the path taken),
case-insensitive matching of non-ASCII text, and patterns or names past the stated limits.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

try:  # Python 3.11+
    from re import _constants as _c
    from re import _parser as _p
except ImportError:  # Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]
import re

from workbench.checkpoints.errors import InvalidConfigError, PatternRefusedError

__all__ = ["Pattern", "compile_pattern", "MAX_PATTERN_CHARS", "MAX_PROGRAM_SIZE", "MAX_NAME_CHARS"]

MAX_PATTERN_CHARS = 1000
MAX_PROGRAM_SIZE = 4000  # NFA instructions after expanding counted repeats
MAX_NAME_CHARS = 1024

_IGNORECASE, _MULTILINE, _DOTALL, _ASCII = re.IGNORECASE, re.MULTILINE, re.DOTALL, re.ASCII
_REFUSED = {
    _c.GROUPREF: "a backreference", _c.GROUPREF_EXISTS: "a conditional group",
    getattr(_c, "ATOMIC_GROUP", object()): "an atomic group",
    getattr(_c, "POSSESSIVE_REPEAT", object()): "a possessive repeat",
}
_ASCII_SPACE = " \t\n\r\f\v"

# Instructions: ("char", test) consumes one character that passes `test`; ("split", a, b);
# ("jmp", a); ("at", kind, flags) a zero-width position test; ("look", program, ahead,
# negate, width); ("match",).


def _is_word(ch: str, flags: int) -> bool:
    if flags & _ASCII:
        return ch.isascii() and (ch.isalnum() or ch == "_")
    return ch.isalnum() or ch == "_"


def _category(cat, ch: str, flags: int) -> bool:
    asc = flags & _ASCII
    if cat is _c.CATEGORY_DIGIT:
        return ch.isdecimal() and (not asc or ch.isascii())
    if cat is _c.CATEGORY_NOT_DIGIT:
        return not _category(_c.CATEGORY_DIGIT, ch, flags)
    if cat is _c.CATEGORY_SPACE:
        return ch in _ASCII_SPACE if asc else ch.isspace()
    if cat is _c.CATEGORY_NOT_SPACE:
        return not _category(_c.CATEGORY_SPACE, ch, flags)
    if cat is _c.CATEGORY_WORD:
        return _is_word(ch, flags)
    if cat is _c.CATEGORY_NOT_WORD:
        return not _is_word(ch, flags)
    raise ValueError(cat)


def _folds(ch: str, flags: int) -> tuple[str, ...]:
    # Case variants under IGNORECASE; only ASCII names reach here (see Pattern.match).
    return (ch, ch.lower(), ch.upper()) if flags & _IGNORECASE else (ch,)


def _no_fold_beyond_ascii(code: int, flags: int) -> None:
    # Python's case folding of non-ASCII characters has special cases (the Kelvin sign
    # matches 'k'); rather than model them, such patterns are refused.
    if flags & _IGNORECASE and code > 127:
        raise PatternRefusedError("case-insensitive matching of the non-ASCII character "
                                  f"{chr(code)!r} is not supported; accepted: ASCII under (?i)")


def _literal_test(code: int, negate: bool, flags: int):
    _no_fold_beyond_ascii(code, flags)
    c = chr(code)
    if flags & _IGNORECASE:
        lc = c.lower()
        return lambda ch: (ch.lower() == lc or ch.upper() == c.upper()) != negate
    return lambda ch: (ch == c) != negate


def _in_test(items: list, flags: int):
    negate = bool(items) and items[0][0] is _c.NEGATE
    parts = items[1:] if negate else items
    for op, av in parts:
        if op is _c.LITERAL:
            _no_fold_beyond_ascii(av, flags)
        elif op is _c.RANGE:
            _no_fold_beyond_ascii(av[1], flags)

    def member(ch: str) -> bool:
        for op, av in parts:
            if op is _c.LITERAL and ch == chr(av):
                return True
            if op is _c.RANGE and av[0] <= ord(ch) <= av[1]:
                return True
            if op is _c.CATEGORY and _category(av, ch, flags):
                return True
        return False

    return lambda ch: any(member(v) for v in _folds(ch, flags)) != negate


@dataclass
class _Program:
    code: list

    def emit(self, ins: tuple) -> int:
        self.code.append(list(ins))
        if len(self.code) > MAX_PROGRAM_SIZE:
            raise _TooBig()
        return len(self.code) - 1


class _TooBig(Exception):
    pass


def _width(sub) -> int | None:
    lo, hi = sub.getwidth()
    return lo if lo == hi else None


def _compile_seq(prog: _Program, items, flags: int, pattern: str) -> None:
    for op, av in items:
        _compile_node(prog, op, av, flags, pattern)


def _compile_node(prog: _Program, op, av, flags: int, pattern: str) -> None:
    if op in _REFUSED:
        raise PatternRefusedError(f"it uses {_REFUSED[op]}, which cannot be "
                                  "matched in bounded time; accepted: patterns without "
                                  "backreferences, conditionals, atomic groups or possessive repeats")
    if op is _c.LITERAL:
        prog.emit(("char", _literal_test(av, False, flags)))
    elif op is _c.NOT_LITERAL:
        prog.emit(("char", _literal_test(av, True, flags)))
    elif op is _c.ANY:
        prog.emit(("char", (lambda ch: True) if flags & _DOTALL else (lambda ch: ch != "\n")))
    elif op is _c.IN:
        prog.emit(("char", _in_test(av, flags)))
    elif op is _c.AT:
        prog.emit(("at", av, flags))
    elif op is _c.SUBPATTERN:
        _group, add, remove, sub = av
        _compile_seq(prog, sub, (flags | add) & ~remove, pattern)
    elif op is _c.BRANCH:
        jumps = []
        alternatives = av[1]
        for i, alt in enumerate(alternatives):
            if i < len(alternatives) - 1:
                split = prog.emit(("split", None, None))
                prog.code[split][1] = len(prog.code)
                _compile_seq(prog, alt, flags, pattern)
                jumps.append(prog.emit(("jmp", None)))
                prog.code[split][2] = len(prog.code)
            else:
                _compile_seq(prog, alt, flags, pattern)
        for j in jumps:
            prog.code[j][1] = len(prog.code)
    elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
        lo, hi, sub = av
        for _ in range(lo):
            _compile_seq(prog, sub, flags, pattern)
        if hi is _c.MAXREPEAT:
            split = prog.emit(("split", None, None))
            prog.code[split][1] = len(prog.code)
            _compile_seq(prog, sub, flags, pattern)
            prog.emit(("jmp", split))
            prog.code[split][2] = len(prog.code)
        else:
            splits = []
            for _ in range(hi - lo):
                split = prog.emit(("split", None, None))
                prog.code[split][1] = len(prog.code)
                splits.append(split)
                _compile_seq(prog, sub, flags, pattern)
            for split in splits:
                prog.code[split][2] = len(prog.code)
    elif op in (_c.ASSERT, _c.ASSERT_NOT):
        direction, sub = av
        inner = _Program([])
        _compile_seq(inner, sub, flags, pattern)
        inner.emit(("match",))
        width = None
        if direction < 0:
            width = _width(sub)
            if width is None:  # re.compile refuses it too; kept for a clear message
                raise PatternRefusedError("look-behind requires a fixed width")
        if len(prog.code) + len(inner.code) > MAX_PROGRAM_SIZE:
            raise _TooBig()
        prog.emit(("look", inner.code, direction > 0, op is _c.ASSERT_NOT, width))
    else:
        raise PatternRefusedError(f"the construct {op} is not supported; "
                                  "accepted: literals, classes, groups, alternation, repeats, "
                                  "anchors and lookaround")


def _at(kind, flags: int, s: str, i: int) -> bool:
    n = len(s)
    if kind is _c.AT_BEGINNING:
        return i == 0 or (bool(flags & _MULTILINE) and s[i - 1] == "\n")
    if kind is _c.AT_BEGINNING_STRING:
        return i == 0
    if kind is _c.AT_END:
        if flags & _MULTILINE:
            return i == n or s[i] == "\n"
        return i == n or (i == n - 1 and s[i] == "\n")
    if kind is _c.AT_END_STRING:
        return i == n
    if kind in (_c.AT_BOUNDARY, _c.AT_NON_BOUNDARY):
        if n == 0:
            return False  # sre: neither \b nor \B holds in an empty string
        before = i > 0 and _is_word(s[i - 1], flags)
        after = i < n and _is_word(s[i], flags)
        return (before != after) == (kind is _c.AT_BOUNDARY)
    raise ValueError(kind)


def _run(code: list, s: str, start: int, stop: int | None, search: bool, memo: dict) -> bool:
    """Does `code` match s from `start` (any start >= it when `search`)? With `stop`, the
    match must end exactly at `stop`."""

    def look(ins: list, i: int) -> bool:
        key = (id(ins), i)
        if key not in memo:
            _, inner, ahead, negate, width = ins
            if ahead:
                ok = _run(inner, s, i, None, False, memo)
            else:
                ok = i - width >= 0 and _run(inner, s, i - width, i, False, memo)
            memo[key] = ok != negate
        return memo[key]

    def closure(pcs: list[int], i: int) -> tuple[list[int], bool]:
        seen: set[int] = set()
        out: list[int] = []
        matched = False
        stack = list(reversed(pcs))
        while stack:
            pc = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            ins = code[pc]
            kind = ins[0]
            if kind == "char":
                out.append(pc)
            elif kind == "match":
                matched = True
            elif kind == "jmp":
                stack.append(ins[1])
            elif kind == "split":
                stack.append(ins[2])
                stack.append(ins[1])
            elif kind == "at":
                if _at(ins[1], ins[2], s, i):
                    stack.append(pc + 1)
            elif kind == "look":
                if look(ins, i):
                    stack.append(pc + 1)
        return out, matched

    end = len(s) if stop is None else stop
    current, matched = closure([0], start)
    i = start
    while True:
        if matched and (stop is None or i == stop):
            return True
        if i >= end:
            return False
        if not current and not search:
            return False
        ch = s[i]
        nxt = [pc + 1 for pc in current if code[pc][1](ch)]
        i += 1
        if search:
            nxt.append(0)
        current, matched = closure(nxt, i)


@dataclass(frozen=True)
class Pattern:
    """A checkpoint's regular expression, checked once, matched in linear time."""

    text: str
    ignorecase: bool
    _code: tuple

    def _check_name(self, name: str) -> None:
        if len(name) > MAX_NAME_CHARS:
            raise PatternRefusedError(
                f"pattern {self.text!r}: the name matched against it has {len(name)} characters; "
                f"accepted: at most {MAX_NAME_CHARS}")
        if self.ignorecase and not name.isascii():
            raise PatternRefusedError(
                f"pattern {self.text!r} is case-insensitive and the name {name[:80]!r} is not "
                "ASCII; case-insensitive matching is supported for ASCII names only")

    def match(self, name: str) -> bool:
        """`re.match(self.text, name) is not None`."""
        self._check_name(name)
        return _run(list(self._code), name, 0, None, False, {})

    def search(self, name: str) -> bool:
        """`re.search(self.text, name) is not None`."""
        self._check_name(name)
        return _run(list(self._code), name, 0, None, True, {})


@lru_cache(maxsize=1024)
def compile_pattern(text: str, where: str = "checkpoint regex") -> Pattern:
    """Check a checkpoint's regex: InvalidConfigError when `re` rejects it (as vLLM's
    `re.match` would raise), PatternRefusedError when it cannot be run in bounded work."""
    if not isinstance(text, str):
        raise InvalidConfigError(f"{where}: pattern {text!r} must be a string")
    if len(text) > MAX_PATTERN_CHARS:
        raise PatternRefusedError(f"{where}: pattern {text[:60]!r}... has {len(text)} characters; "
                                  f"accepted: at most {MAX_PATTERN_CHARS}")
    try:
        re.compile(text)
        parsed = _p.parse(text)
    except (re.error, RecursionError, OverflowError) as exc:
        raise InvalidConfigError(f"{where}: {text!r} is not a valid regex ({exc})") from None
    flags = parsed.state.flags
    prog = _Program([])
    try:
        _compile_seq(prog, parsed, flags, text)
        prog.emit(("match",))
        ignorecase = _uses_ignorecase(parsed, flags)
    except RecursionError:
        raise PatternRefusedError(f"{where}: pattern {text!r} nests too deeply; accepted: "
                                  "patterns nested at most a few hundred levels") from None
    except _TooBig:
        raise PatternRefusedError(
            f"{where}: pattern {text!r} expands to more than {MAX_PROGRAM_SIZE} matching steps "
            "(counted repeats multiply); accepted: smaller patterns") from None
    except PatternRefusedError as exc:
        raise PatternRefusedError(f"{where}: pattern {text!r}: {exc}") from None
    return Pattern(text, ignorecase, tuple(tuple(i) for i in prog.code))


def _uses_ignorecase(items, flags: int) -> bool:
    """Whether any part of the pattern is matched case-insensitively (inline flags included)."""
    if flags & _IGNORECASE:
        return True
    for op, av in items:
        if op is _c.SUBPATTERN and (av[1] & _IGNORECASE or _uses_ignorecase(av[3], (flags | av[1]) & ~av[2])):
            return True
        if op is _c.BRANCH and any(_uses_ignorecase(alt, flags) for alt in av[1]):
            return True
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT) and _uses_ignorecase(av[2], flags):
            return True
        if op in (_c.ASSERT, _c.ASSERT_NOT) and _uses_ignorecase(av[1], flags):
            return True
    return False
