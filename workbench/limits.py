"""The bounds the core puts on sizes and counts, and the one check that applies them.

Every public entry point that takes a size (a layer's N or K, a group size, a TP size, a
token count M) calls `check_int`, so 0, negatives, booleans, floats, NaN and 10^100 are one
named error that says the field and the accepted range, never a TypeError deep inside.
"""
from __future__ import annotations

import math
import os
import re
from typing import Any

from workbench.errors import InvalidInputError

MAX_DIM = 2**31 - 1  # a layer dimension (N, K): bench's --n / --k take the same
MAX_PATH_CHARS = 4096  # Linux PATH_MAX
MAX_NAME_CHARS = 255  # Linux NAME_MAX, per path component
MAX_M = 2**20  # tokens in one GEMM call: above any max_num_batched_tokens a server runs
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")  # ASCII digits only, within int64


def shown(value: Any, limit: int = 60) -> str:
    """`repr` of a caller's value cut to `limit` characters (a message stays one line)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_int(field: str, value: Any, lo: int, hi: int, *, also: tuple[int, ...] = ()) -> int:
    """`value` if it is an int (not a bool) in [lo, hi] or in `also`; else a named error."""
    if (isinstance(value, bool) or not isinstance(value, int)
            or not (lo <= value <= hi or value in also)):
        accepted = f"an integer from {lo} to {hi}" + "".join(f" or {a}" for a in also)
        raise InvalidInputError(f"{field}: {shown(value)}; accepted: {accepted}")
    return value


def check_positive(field: str, value: Any, hi: float = math.inf) -> float:
    """`value` if it is a real number (not a bool) above 0 and finite, at most `hi`."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not 0 < value <= hi or not math.isfinite(value)):
        bound = "a finite number above 0" + ("" if hi == math.inf else f" and at most {hi:g}")
        raise InvalidInputError(f"{field}: {shown(value)}; accepted: {bound}")
    return value


def check_ms(ms: Any, field: str = "m") -> list[int]:
    """Token counts: a non-empty sequence of integers from 1 to MAX_M."""
    if isinstance(ms, (str, bytes)) or not hasattr(ms, "__iter__"):
        raise InvalidInputError(f"{field}: {shown(ms)}; accepted: a list of integers from 1 to "
                                f"{MAX_M}")
    ms = list(ms)
    if not ms:
        raise InvalidInputError(f"{field}: empty; accepted: at least one integer from 1 to {MAX_M}")
    return [check_int(f"{field}[{i}]", m, 1, MAX_M) for i, m in enumerate(ms)]


def int_list(text: str, what: str, lo: int, hi: int, most: int = 64) -> list[int]:
    """Comma-separated integers in [lo, hi], at most `most`, in the order given: the one
    reader of a typed list of sizes (CLI --m, the app's token counts). An empty entry is
    refused: `1,,2` is a typo, not the list 1,2."""
    accepted = f"an integer from {lo} to {hi} (comma-separated)"
    if not isinstance(text, str) or len(text) > 32 * most:
        raise InvalidInputError(f"{what}: {shown(text, 40)}; accepted: at most {most} "
                                "comma-separated integers")
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise InvalidInputError(f"{what}: empty; accepted: comma-separated integers")
    if len(parts) > most:
        raise InvalidInputError(f"{what}: {len(parts)} values; accepted: at most {most}")
    if not all(parts):
        raise InvalidInputError(f"{what}: {shown(text, 40)} has an empty entry (entry "
                                f"{parts.index('') + 1}); accepted: comma-separated integers")
    out = []
    for part in parts:
        value = int(part) if _INTEGER.fullmatch(part) else None
        if value is None or not lo <= value <= hi:
            raise InvalidInputError(f"{what}: {shown(part, 40)}; accepted: {accepted}")
        out.append(value)
    return out


def check_path(text: str, what: str) -> str:
    """A path the OS can take: no NUL byte, not empty, within PATH_MAX / NAME_MAX."""
    if not text:
        raise InvalidInputError(f"{what}: empty path; accepted: a non-empty path")
    if "\0" in text:
        raise InvalidInputError(f"{what}: the path {shown(text, 80)} contains a NUL byte; "
                                "accepted: a path without NUL bytes")
    if len(text) > MAX_PATH_CHARS:
        raise InvalidInputError(f"{what}: the path is {len(text)} characters long; accepted: at "
                                f"most {MAX_PATH_CHARS}")
    longest = max(text.split(os.sep), key=len)
    if len(longest) > MAX_NAME_CHARS:
        raise InvalidInputError(f"{what}: a path component is {len(longest)} characters long; "
                                f"accepted: at most {MAX_NAME_CHARS} per component")
    return text
