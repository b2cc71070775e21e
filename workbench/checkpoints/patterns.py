"""Regular expressions from checkpoints, matched as vLLM matches them, in bounded time.

A checkpoint supplies both the patterns (compressed-tensors `re:` targets and ignores,
GPTQModel `dynamic` keys, INC `extra_config` keys) and the names they are matched
against. the pinned vLLM matches all three with the `regex` package imported as `re`
(utils/config_utils.py:9 for `is_equal_or_regex_match`'s `re.match` at :445,
utils/gptq_utils.py:8 for `get_dynamic_override`'s `re.match` at :94 and :98,
inc/config_parser.py:7 for `re.search` at :100 and :137), which backtracks: `(a|aa)+$`
against 40 characters takes tens of seconds, 60 would take days.

One matcher per semantics (`Dialect.RE` for Python's `re`, `Dialect.REGEX` for the
`regex` package in its default VERSION0 mode): a pattern is checked by that library (so
what it rejects is rejected here, `PatternSyntaxError`), parsed by `re`'s own parser,
and run as a Thompson NFA: all paths advance together, so whether a match exists, which
does not depend on backtracking order, is found in (program size) x (name length) steps.
Lookarounds are position tests computed for every position in one sweep of their own
program (a lookahead's reversed, right to left), so they keep the bound linear.

Under `Dialect.REGEX`, a set holding a POSIX class (`[[:digit:]]`, which `re` reads as a
set of `[:digt` and a `]`) is matched by `regex` itself, one character at a time. What
neither library path can run this way is refused with `PatternRefusedError` quoting the
pattern: syntax only `regex` accepts (variable-width look-behind, `\\p{..}`, fuzzy
`{e<=1}`, inline flags mid-pattern, ...), backreferences, conditionals, atomic groups and
possessive repeats (the answer would depend on the path taken), case-insensitive matching
of non-ASCII text, and patterns or names past the stated limits.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from functools import lru_cache

try:  # Python 3.11+
    from re import _constants as _c
    from re import _parser as _p
except ImportError:  # Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

from workbench.checkpoints.errors import InvalidConfigError, PatternRefusedError, PatternSyntaxError

__all__ = ["Dialect", "Pattern", "compile_pattern", "MAX_PATTERN_CHARS", "MAX_PROGRAM_SIZE",
           "MAX_NAME_CHARS", "MAX_PATTERNS", "check_pattern_count"]

MAX_PATTERN_CHARS = 1000
MAX_PROGRAM_SIZE = 4000  # NFA instructions, lookaround programs included, after expanding counted repeats
MAX_NAME_CHARS = 1024


class Dialect(str, enum.Enum):
    """Which library's semantics a pattern has: the one the vLLM line it models imports."""

    RE = "re"
    """Python's `re`."""
    REGEX = "regex"
    """The `regex` package (VERSION0, its default), which the pinned vLLM imports as `re`."""


_IGNORECASE, _MULTILINE, _DOTALL, _ASCII = re.IGNORECASE, re.MULTILINE, re.DOTALL, re.ASCII
_REFUSED = {
    _c.GROUPREF: "a backreference", _c.GROUPREF_EXISTS: "a conditional group",
    getattr(_c, "ATOMIC_GROUP", object()): "an atomic group",
    getattr(_c, "POSSESSIVE_REPEAT", object()): "a possessive repeat",
}
_ASCII_SPACE = " \t\n\r\f\v"
_REGEX_AT = 1 << 30  # marks a position test compiled under Dialect.REGEX
# A set holding a POSIX class is replaced by one of these before `re` parses the pattern.
_PLACEHOLDER = 0x100000  # Supplementary Private Use Area-B
# These two scan a checkpoint's pattern text, never a layer name: no nested repeat, so `re`
# runs each in time linear in the (MAX_PATTERN_CHARS-bounded) text.
_POSIX = re.compile(r"\[:\^?[A-Za-z_]+:\]")
# `regex` reads `{...}` holding an error kind (e, i, s, d) or a comparison as a fuzzy
# constraint (`a{e<=1}`); `re` reads it as literal text.
_FUZZY = re.compile(r"(?:^|[^A-Za-z])[eisd](?:[^A-Za-z]|$)|[<>=]")

# Instructions: ("char", test) consumes one character that passes `test`; ("split", a, b);
# ("jmp", a); ("at", kind, flags) a zero-width position test; ("look", key) a lookaround's
# per-position table; ("match",).


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


def _regex_set_test(text: str, flags: int):
    """A set with a POSIX class, matched one character at a time by `regex` itself."""
    import regex

    rflags = regex.VERSION0
    for mine, theirs in ((_IGNORECASE, regex.IGNORECASE), (_ASCII, regex.ASCII),
                         (_DOTALL, regex.DOTALL), (_MULTILINE, regex.MULTILINE)):
        if flags & mine:
            rflags |= theirs
    one = regex.compile(text, rflags)
    return lambda ch: one.fullmatch(ch) is not None


class _TooBig(Exception):
    pass


@dataclass
class _Builder:
    """Programs under construction: the main one and one per lookaround, sharing one budget."""

    sets: tuple[str, ...]  # placeholder index -> the POSIX-class set's text
    regex: bool = False
    size: int = 0
    looks: list | None = None  # key -> (code, ahead, negate)

    def emit(self, code: list, ins: tuple) -> int:
        code.append(list(ins))
        self.size += 1
        if self.size > MAX_PROGRAM_SIZE:
            raise _TooBig()
        return len(code) - 1


def _compile_seq(b: _Builder, code: list, items, flags: int, rev: bool) -> None:
    seq = list(items)
    for op, av in (reversed(seq) if rev else seq):
        _compile_node(b, code, op, av, flags, rev)


def _compile_node(b: _Builder, code: list, op, av, flags: int, rev: bool) -> None:
    if op in _REFUSED:
        raise PatternRefusedError(f"it uses {_REFUSED[op]}, which cannot be "
                                  "matched in bounded time; accepted: patterns without "
                                  "backreferences, conditionals, atomic groups or possessive repeats")
    if op is _c.LITERAL and av >= _PLACEHOLDER and av - _PLACEHOLDER < len(b.sets):
        b.emit(code, ("char", _regex_set_test(b.sets[av - _PLACEHOLDER], flags)))
    elif op is _c.LITERAL:
        b.emit(code, ("char", _literal_test(av, False, flags)))
    elif op is _c.NOT_LITERAL:
        b.emit(code, ("char", _literal_test(av, True, flags)))
    elif op is _c.ANY:
        b.emit(code, ("char", (lambda ch: True) if flags & _DOTALL else (lambda ch: ch != "\n")))
    elif op is _c.IN:
        b.emit(code, ("char", _in_test(av, flags)))
    elif op is _c.AT:
        b.emit(code, ("at", av, flags | (_REGEX_AT if b.regex else 0)))
    elif op is _c.SUBPATTERN:
        _group, add, remove, sub = av
        _compile_seq(b, code, sub, (flags | add) & ~remove, rev)
    elif op is _c.BRANCH:
        jumps = []
        alternatives = av[1]
        for i, alt in enumerate(alternatives):
            if i < len(alternatives) - 1:
                split = b.emit(code, ("split", None, None))
                code[split][1] = len(code)
                _compile_seq(b, code, alt, flags, rev)
                jumps.append(b.emit(code, ("jmp", None)))
                code[split][2] = len(code)
            else:
                _compile_seq(b, code, alt, flags, rev)
        for j in jumps:
            code[j][1] = len(code)
    elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
        # Reversed, X{lo,hi} is rev(X){lo,hi}: a concatenation of copies.
        lo, hi, sub = av
        for _ in range(lo):
            _compile_seq(b, code, sub, flags, rev)
        if hi is _c.MAXREPEAT:
            split = b.emit(code, ("split", None, None))
            code[split][1] = len(code)
            _compile_seq(b, code, sub, flags, rev)
            b.emit(code, ("jmp", split))
            code[split][2] = len(code)
        else:
            splits = []
            for _ in range(hi - lo):
                split = b.emit(code, ("split", None, None))
                code[split][1] = len(code)
                splits.append(split)
                _compile_seq(b, code, sub, flags, rev)
            for split in splits:
                code[split][2] = len(code)
    elif op in (_c.ASSERT, _c.ASSERT_NOT):
        direction, sub = av
        ahead = direction > 0
        inner: list = []
        # A lookahead at i asks whether some s[i:j] matches: its program runs reversed from
        # the end, right to left. A look-behind (fixed width in `re`) asks whether some s[j:i]
        # matches: its program runs forwards. Either sweep fills the answer for every i at once.
        _compile_seq(b, inner, sub, flags, rev=ahead)
        b.emit(inner, ("match",))
        key = len(b.looks)
        b.looks.append((inner, ahead, op is _c.ASSERT_NOT))
        b.emit(code, ("look", key))
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
        if n == 0:  # sre: neither \b nor \B holds in an empty string; regex: \B does
            return bool(flags & _REGEX_AT) and kind is _c.AT_NON_BOUNDARY
        before = i > 0 and _is_word(s[i - 1], flags)
        after = i < n and _is_word(s[i], flags)
        return (before != after) == (kind is _c.AT_BOUNDARY)
    raise ValueError(kind)


class _Matcher:
    """One name against one compiled pattern: lookaround tables filled on first use."""

    def __init__(self, looks: tuple, s: str) -> None:
        self.looks, self.s, self.tables = looks, s, {}

    def look(self, key: int, i: int) -> bool:
        table = self.tables.get(key)
        if table is None:
            code, ahead, negate = self.looks[key]
            table = [hit != negate for hit in self.sweep(code, not ahead)]
            self.tables[key] = table
        return table[i]

    def closure(self, code: list, pcs: list[int], i: int) -> tuple[list[int], bool]:
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
                if _at(ins[1], ins[2], self.s, i):
                    stack.append(pc + 1)
            elif kind == "look":
                if self.look(ins[1], i):
                    stack.append(pc + 1)
        return out, matched

    def sweep(self, code: list, forward: bool) -> list[bool]:
        """hit[i] for every position i: forwards, whether some s[j:i] (j <= i) matches the
        program; backwards (a reversed program), whether some s[i:j] (j >= i) does."""
        s, n = self.s, len(self.s)
        hit = [False] * (n + 1)
        positions = range(n + 1) if forward else range(n, -1, -1)
        current: list[int] = []
        for i in positions:
            current, hit[i] = self.closure(code, current + [0], i)
            if forward and i < n:
                ch = s[i]
            elif not forward and i > 0:
                ch = s[i - 1]
            else:
                break
            current = [pc + 1 for pc in current if code[pc][1](ch)]
        return hit

    def run(self, code: list, search: bool) -> bool:
        """Does `code` match s from 0 (from any start when `search`)?"""
        s, n = self.s, len(self.s)
        current, matched = self.closure(code, [0], 0)
        i = 0
        while True:
            if matched:
                return True
            if i >= n or (not current and not search):
                return False
            ch = s[i]
            nxt = [pc + 1 for pc in current if code[pc][1](ch)]
            i += 1
            if search:
                nxt.append(0)
            current, matched = self.closure(code, nxt, i)


@dataclass(frozen=True)
class Pattern:
    """A checkpoint's regular expression, checked once, matched in linear time."""

    text: str
    dialect: Dialect
    ignorecase: bool
    _code: tuple
    _looks: tuple = ()

    def _check_name(self, name: str) -> None:
        if len(name) > MAX_NAME_CHARS:
            raise PatternRefusedError(
                f"pattern {self.text!r}: the name matched against it has {len(name)} characters; "
                f"accepted: at most {MAX_NAME_CHARS}")
        if self.ignorecase and not name.isascii():
            raise PatternRefusedError(
                f"pattern {self.text!r} is case-insensitive and the name {name[:80]!r} is not "
                "ASCII; case-insensitive matching is supported for ASCII names only")

    def _matcher(self, name: str) -> _Matcher:
        self._check_name(name)
        return _Matcher(tuple((list(c), a, n) for c, a, n in self._looks), name)

    def match(self, name: str) -> bool:
        """`re.match(self.text, name) is not None` in the pattern's dialect."""
        return self._matcher(name).run(list(self._code), False)

    def search(self, name: str) -> bool:
        """`re.search(self.text, name) is not None` in the pattern's dialect."""
        return self._matcher(name).run(list(self._code), True)


def _library_error(text: str, dialect: Dialect) -> tuple[str, bool] | None:
    """The dialect's own compile error for `text` and whether the library raised its `error`
    (the exception vLLM's call raises), or None when it compiles."""
    import warnings

    lib = re
    if dialect is Dialect.REGEX:
        import regex as lib
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re's "Possible nested set" FutureWarning
        # Compiled only for the library's own error text (at most MAX_PATTERN_CHARS, checked
        # before): nothing is ever matched with it; matching is this module's bounded program.
        try:
            lib.compile(text)
        except lib.error as exc:
            return str(exc), True
        except (RecursionError, OverflowError, ValueError) as exc:
            return str(exc), False
        return None


def _posix_sets(text: str) -> tuple[str, tuple[str, ...], bool]:
    """(text with each set holding a POSIX class replaced by a placeholder, those sets,
    whether a `{...}` reads as a fuzzy constraint), scanning as `regex` VERSION0 does."""
    out: list[str] = []
    sets: list[str] = []
    fuzzy = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            out.append(text[i:i + 2])
            i += 2
        elif ch == "{":
            end = text.find("}", i)
            if end > 0 and _FUZZY.search(text[i + 1:end]):
                fuzzy = True
            out.append(ch)
            i += 1
        elif ch == "[":
            j = i + 1
            if j < n and text[j] == "^":
                j += 1
            if j < n and text[j] == "]":  # a leading ] is literal
                j += 1
            posix = False
            while j < n and text[j] != "]":
                if text[j] == "\\":
                    j += 2
                    continue
                m = _POSIX.match(text, j) if text[j] == "[" else None
                if m:
                    posix, j = True, m.end()
                    continue
                j += 1
            if posix and j < n:
                out.append(chr(_PLACEHOLDER + len(sets)))
                sets.append(text[i:j + 1])
            else:
                out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out), tuple(sets), fuzzy


MAX_PATTERNS = 2000  # regexes in one list (ignore, targets, dynamic, extra_config): every name
# is matched against each, so the listing's work grows with names x patterns


def check_pattern_count(count: int, where: str) -> None:
    """Refuse a list of more than MAX_PATTERNS regexes by name (5000 took 20 s for 7 layers)."""
    if count > MAX_PATTERNS:
        raise PatternRefusedError(f"{where}: {count} regex patterns; accepted: at most {MAX_PATTERNS} "
                                  "(every layer name is matched against each)")


def compile_pattern(text: str, where: str = "checkpoint regex",
                    dialect: Dialect = Dialect.REGEX) -> Pattern:
    """Check a checkpoint's regex: PatternSyntaxError when the dialect's library rejects it
    (vLLM's `re.match` would raise), PatternRefusedError when it cannot be run in bounded work."""
    if not isinstance(text, str):
        raise InvalidConfigError(f"{where}: pattern {text!r} must be a string")
    # Cached by the pattern alone: every layer asks for each ignore / target pattern again
    # under its own `where`, and a cache keyed on it too thrashed past 1024 patterns
    # (2000 re: ignores took 20 s to list 7 layers).
    try:
        return _compiled(text, dialect)
    except PatternRefusedError as exc:
        raise PatternRefusedError(f"{where}{exc}") from None
    except PatternSyntaxError as exc:
        raise PatternSyntaxError(f"{where}{exc}", exc.library_error) from None


@lru_cache(maxsize=4 * MAX_PATTERNS)  # an ignore list, targets, ... of one checkpoint at once
def _compiled(text: str, dialect: Dialect) -> Pattern:
    where = ""  # compile_pattern puts the caller's in front of every message
    if len(text) > MAX_PATTERN_CHARS:
        raise PatternRefusedError(f"{where}: pattern {text[:60]!r}... has {len(text)} characters; "
                                  f"accepted: at most {MAX_PATTERN_CHARS}")
    error = _library_error(text, dialect)
    if error is not None:
        raise PatternSyntaxError(f"{where}: {text!r} is not a valid regex for the {dialect.value} "
                                 f"module ({error[0]})", error[0] if error[1] else None)
    sets: tuple[str, ...] = ()
    parse_text = text
    if dialect is Dialect.REGEX:
        if any(ord(ch) >= _PLACEHOLDER for ch in text):
            raise PatternRefusedError(f"{where}: pattern {text!r} holds a character from "
                                      "U+100000 up; accepted: characters below U+100000")
        parse_text, sets, fuzzy = _posix_sets(text)
        if fuzzy:
            raise PatternRefusedError(
                f"{where}: pattern {text!r}: the regex package (which vLLM matches it with) "
                "reads its {...} as a fuzzy-match constraint; the workbench does not run fuzzy "
                "matching; accepted: counted repeats {m}, {m,n}")
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(parse_text)
            parsed = _p.parse(parse_text)
    except (re.error, RecursionError, OverflowError) as exc:
        # Only `regex` accepts it: variable-width look-behind, \p{..}, (?|..), flags mid-pattern...
        raise PatternRefusedError(
            f"{where}: pattern {text!r} uses syntax that only the `regex` package (which vLLM "
            f"matches it with) accepts ({exc} in re); the workbench matches the syntax the two "
            "share, plus POSIX classes such as [[:digit:]]") from None
    flags = parsed.state.flags
    b = _Builder(sets, regex=dialect is Dialect.REGEX, looks=[])
    code: list = []
    try:
        _compile_seq(b, code, parsed, flags, rev=False)
        b.emit(code, ("match",))
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
    looks = tuple((tuple(tuple(i) for i in c), a, neg) for c, a, neg in b.looks)
    return Pattern(text, dialect, ignorecase, tuple(tuple(i) for i in code), looks)


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
