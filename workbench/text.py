"""Untrusted names (tensor, layer and file names from checkpoints) made safe to print.

A name can hold terminal escapes (`ESC]0;...BEL` renames the terminal, `ESC[2J` clears it),
line breaks that forge table rows, and bidi controls that reorder what is shown. Every text
face passes such names through `printable`; CSV cells also through `csv_cell`, so that a
spreadsheet never reads a cell as a formula.
"""
from __future__ import annotations

import unicodedata

__all__ = ["printable", "csv_cell"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Cc: C0, DEL and C1 controls; Cf: format characters (bidi overrides and isolates, zero-width
# marks); Zl / Zp: the Unicode line and paragraph separators; Cs: lone surrogates.
_UNSAFE = {"Cc", "Cf", "Zl", "Zp", "Cs"}
# OWASP's CSV injection rule: a cell starting with one of these is prefixed with a quote.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _escape(c: str) -> str:
    if c in _NAMED:
        return _NAMED[c]
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def printable(value: object, *, keep_newlines: bool = False) -> str:
    """`value` as text with every control, format and separator character written as a
    visible escape (`\\x1b`, `\\n`, `\\u202e`); `keep_newlines` leaves line breaks for a face
    that lays out several lines itself. Backslashes are kept: names and patterns read as typed."""
    text = str(value)
    if text.isprintable() and text.isascii():
        return text
    return "".join(c if (keep_newlines and c == "\n") or unicodedata.category(c) not in _UNSAFE
                   else _escape(c) for c in text)


def csv_cell(value: object) -> object:
    """A CSV cell: numbers and None as they are; text printable and never starting a formula."""
    if not isinstance(value, str):
        return value
    text = printable(value)
    # A lone "-" (a table's "none") cannot be a formula; numbers come as numbers, not text.
    return "'" + text if value.startswith(_FORMULA_START) and value != "-" else text
