"""Untrusted text (names from checkpoints, uploads and links) made safe for the faces that print it.

A name may hold terminal escapes (ESC ] 0 ; ... BEL renames the terminal, ESC [ 2 J clears it), line
breaks that forge table rows, bidi overrides that reorder what is read, or, in a spreadsheet, a
leading `=` that makes a cell a live formula. Every text face passes names through here.
"""
from __future__ import annotations

__all__ = ["one_line", "terminal", "csv_cell"]

# C0 and C1 controls, DEL, and the line/paragraph separators and bidi controls of Unicode.
_CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x200E, 0x200F, 0x2028, 0x2029,
             *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ONE_LINE = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _CONTROLS}
_TERMINAL = {c: s for c, s in _ONE_LINE.items() if c not in (0x0A, 0x09)}
# OWASP's list of the characters a spreadsheet reads as the start of a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def one_line(value: object) -> str:
    """`value` as one line of visible characters: every control written as a backslash escape."""
    return str(value).translate(_ONE_LINE)


def terminal(text: str) -> str:
    """Text for a terminal: line breaks and tabs kept (the face's own layout), every other
    control escaped, so no byte of a name reaches the terminal as a command."""
    return text.translate(_TERMINAL)


def csv_cell(value: object) -> object:
    """A CSV cell a spreadsheet shows as text: a string that would start a formula is prefixed
    with `'`; numbers, and strings that are numbers or a lone "-", are left as they are."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START) or value == "-":
        return value
    try:
        float(value)
        return value
    except ValueError:
        return "'" + value
