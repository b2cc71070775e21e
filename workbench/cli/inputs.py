"""What every command reads from its arguments: JSON text, `@file` arguments, paths, numbers.

Each reader is bounded (size, nesting depth, integer range, file kind) and turns every bad
value into an `InvalidInputError` that names the option, the problem and what is accepted,
so no command has to guess what a user may type.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import stat
import sys
from typing import Any, BinaryIO, Callable, Iterator

from workbench.errors import InvalidInputError
from workbench.limits import MAX_NAME_CHARS, check_path
from workbench.limits import MAX_M, int_list

MAX_ARG_BYTES = 1 << 20  # a JSON argument, inline or @file, and one --batch line
MAX_JSON_DEPTH = 16  # the deepest real input (INC extra_config) nests 3 levels
MAX_JSON_INT = 2**63 - 1  # torch sizes are int64: no tensor dimension is larger


def shown(value: Any, limit: int = 80) -> str:
    """`repr` of a user's value, cut to `limit` characters (a message stays one short line)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


# --------------------------------------------------------------------------- paths


def open_input(path: str, what: str, *, fifo: bool = False) -> BinaryIO:
    """A binary stream on a regular file (or, with `fifo`, a pipe); devices and folders refused.

    Opened non-blocking, so that a FIFO cannot stall the open, and the kind is checked on
    the open descriptor, so nothing can swap the file between the check and the read.
    """
    check_path(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InvalidInputError(f"{what}: cannot read {shown(path)}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or (fifo and stat.S_ISFIFO(mode))):
        os.close(fd)
        accepted = "a regular file or a pipe" if fifo else "a regular file"
        raise InvalidInputError(f"{what}: {shown(path)} is {_kind(mode)}; accepted: {accepted}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def open_stdin(what: str) -> BinaryIO:
    """stdin as bytes when it is a file, a pipe, a socket, a terminal or /dev/null; another
    device such as /dev/zero is refused (it never ends a line), and so is a closed stdin."""
    if sys.stdin is None:
        raise InvalidInputError(f"{what}: '-' reads stdin, which is closed; accepted: a file or "
                                "a pipe")
    fd = sys.stdin.fileno()
    info = os.fstat(fd)
    mode = info.st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)
            or (stat.S_ISCHR(mode) and info.st_rdev == os.stat(os.devnull).st_rdev)):
        raise InvalidInputError(f"{what}: stdin is {_kind(mode)}; accepted: a file, a pipe or a "
                                "terminal")
    return sys.stdin.buffer


def read_regular_file(path: str, what: str, limit: int = MAX_ARG_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes."""
    with open_input(path, what) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InvalidInputError(f"{what}: {shown(path)} holds over {limit} bytes; accepted: at "
                                f"most {limit}")
    return data


def bounded_lines(stream: BinaryIO,
                  limit: int = MAX_ARG_BYTES) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) per line; None for a line over `limit` bytes, which is skipped."""
    number = 0
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        number += 1
        if len(line) > limit and not line.endswith(b"\n"):
            while True:  # discard the rest of the long line, a bounded chunk at a time
                rest = stream.readline(limit + 1)
                if not rest or rest.endswith(b"\n"):
                    break
            yield number, None
        else:
            yield number, line


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def checkpoint_path(text: str, what: str) -> str:
    """A path that exists and is a directory or a regular file (checkpoints: never a device)."""
    check_path(text, what)
    try:
        mode = os.stat(text).st_mode
    except OSError as exc:
        raise InvalidInputError(f"{what}: {shown(text)}: {exc.strerror}") from None
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise InvalidInputError(f"{what}: {shown(text)} is {_kind(mode)}; accepted: a checkpoint "
                                "directory or a .safetensors file")
    return text


def output_file(text: str, what: str, suffixes: tuple[str, ...]) -> str:
    """A file path to write: not a directory, one of `suffixes`, its folder creatable."""
    check_path(text, what)
    if os.path.isdir(text) or text.endswith(os.sep):
        raise InvalidInputError(f"{what}: {shown(text)} is a directory; accepted: a file path "
                                f"ending in {' or '.join(suffixes)}")
    if not text.endswith(suffixes):
        raise InvalidInputError(f"{what}: {shown(text)}; accepted: a file path ending in "
                                f"{' or '.join(suffixes)}")
    if os.path.exists(text) and not os.path.isfile(text):
        raise InvalidInputError(f"{what}: {shown(text)} exists and is not a regular file")
    folder = os.path.dirname(os.path.abspath(text))
    while not os.path.exists(folder):  # the writer creates missing folders: check where it starts
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise InvalidInputError(f"{what}: cannot write under {shown(folder)} (not a writable "
                                "directory); accepted: a file path in a writable directory")
    return text


# --------------------------------------------------------------------------- JSON


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str | bytes, what: str) -> Any:
    """Strict, bounded JSON: no NaN/Infinity, integers within int64, nesting within MAX_JSON_DEPTH."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"{what}: not UTF-8 text (byte {exc.start}); accepted: "
                                    "JSON in UTF-8") from None
    if len(text) > MAX_ARG_BYTES:
        raise InvalidInputError(f"{what}: {len(text)} characters of JSON; accepted: at most "
                                f"{MAX_ARG_BYTES}")
    depth = _bracket_depth(text)  # before parsing: the decoder itself recurses
    if depth > MAX_JSON_DEPTH:
        raise InvalidInputError(f"{what}: JSON nested {depth} levels deep; accepted: at most "
                                f"{MAX_JSON_DEPTH}")
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_int=_int_or_digits)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{what}: malformed JSON ({exc.msg} at line {exc.lineno} column "
                                f"{exc.colno})") from None
    except ValueError as exc:  # NaN / Infinity
        raise InvalidInputError(f"{what}: {exc}; accepted: strict JSON (finite numbers)") from None
    _check_values(value, what)
    return value


class _Digits(str):
    """An integer literal too long to be any accepted value, kept as text for the message."""


def _int_or_digits(text: str) -> int | _Digits:
    # Converting a 10^6-digit literal costs seconds (and Python refuses over 4300 digits).
    return int(text) if len(text.lstrip("-")) <= 19 else _Digits(text)


_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


def _bracket_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings (a linear scan, no recursion)."""
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        ch = match.group()
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _check_values(value: Any, what: str) -> None:
    """Every number finite and every integer within int64, found iteratively with its JSON path."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, dict):
            stack.extend((f"{where}.{k}" if where else str(k), x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((f"{where}[{i}]", x) for i, x in enumerate(v))
        elif isinstance(v, _Digits) or (isinstance(v, int) and not isinstance(v, bool)
                                        and abs(v) > MAX_JSON_INT):
            digits = len(str(v).lstrip("-"))
            raise InvalidInputError(f"{what}: {where or 'value'} = an integer of {digits} digits is "
                                    f"out of range; accepted: integers within +-{MAX_JSON_INT} "
                                    "(torch sizes are int64)")
        elif isinstance(v, float) and not math.isfinite(v):
            raise InvalidInputError(f"{what}: {where or 'value'} overflows to {v}; accepted: finite "
                                    "numbers")


def json_arg(text: str, what: str) -> Any:
    """A JSON argument, inline or `@path` (a regular file of at most MAX_ARG_BYTES)."""
    if text.startswith("@"):
        return parse_json(read_regular_file(text[1:], what), what)
    return parse_json(text, what)


def json_object(value: Any, what: str) -> dict:
    """`value` if it is a JSON object; otherwise say which JSON type it is."""
    if not isinstance(value, dict):
        raise InvalidInputError(f"{what}: expected a JSON object {{...}}, got {json_type(value)}"
                                + ("" if value is None else f" {shown(value, 40)}"))
    return value


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type."""
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), (int, "a number"), (float, "a number"),
                       (str, "a string"), (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def platform_arg(text: str, what: str = "--platform") -> str | dict:
    """A preset name or 'host' as given; platform JSON (inline or @file) parsed here, bounded."""
    stripped = text.strip()
    if stripped.startswith(("{", "@")):
        return json_object(json_arg(stripped, what), what)
    if len(stripped) > 64 or "\0" in stripped or not stripped:
        raise InvalidInputError(f"{what}: {shown(text, 40)} is no preset name; accepted: a preset "
                                "(see `python -m workbench platforms`), 'host', 'host-cpu', or a JSON object")
    return stripped


# --------------------------------------------------------------------------- numbers


def int_in(lo: int, hi: int, *, also: tuple[int, ...] = ()) -> Callable[[str], int]:
    """An argparse `type` for integers in [lo, hi] (plus the values in `also`, e.g. -1)."""
    accepted = f"an integer from {lo} to {hi}" + "".join(f" or {a}" for a in also)

    def parse(text: str) -> int:
        try:
            value = int(text.strip()) if len(text) <= 32 else None
        except ValueError:
            value = None
        if value is None or not (lo <= value <= hi or value in also):
            raise argparse.ArgumentTypeError(f"{shown(text, 40)}; accepted: {accepted}")
        return value

    parse.__name__ = "integer"
    return parse


def float_in(lo: float, hi: float) -> Callable[[str], float]:
    """An argparse `type` for finite numbers in (lo, hi]."""
    def parse(text: str) -> float:
        try:
            value = float(text) if len(text) <= 32 else math.nan
        except ValueError:
            value = math.nan
        if not (lo < value <= hi):
            raise argparse.ArgumentTypeError(f"{shown(text, 40)}; accepted: a number above {lo:g} "
                                             f"and at most {hi:g}")
        return value

    parse.__name__ = "number"
    return parse


def m_list(text: str, what: str = "--m") -> list[int]:
    """Token counts M, as every command reads them: 1 to MAX_M each, no empty entry."""
    return int_list(text, what, 1, MAX_M)


def name_list(text: str, what: str, known: Any) -> list[str]:
    """Comma-separated names from `known`, each once, in the given order; an empty entry or
    an unknown name is refused (quoted, the message cut to one line)."""
    parts = [p.strip() for p in text.split(",")] if len(text) <= MAX_NAME_CHARS * 16 else None
    if parts is None or not any(parts):
        raise InvalidInputError(f"{what}: {'empty' if parts is not None else 'too long'}; "
                                f"accepted: comma-separated names from {', '.join(known)}")
    if not all(parts):
        raise InvalidInputError(f"{what}: {shown(text, 40)} has an empty entry (entry "
                                f"{parts.index('') + 1}); accepted: comma-separated names")
    unknown = [p for p in parts if p not in known]
    if unknown:
        raise InvalidInputError(f"{what}: unknown {', '.join(unknown)[:80]}; known: "
                                f"{', '.join(known)}")
    return list(dict.fromkeys(parts))
