"""`python -m workbench`: the command-line face of the workbench.

Each command lives in its own module under `workbench/cli/` and exposes
`register(subparsers)`; the module sets `func` on its parser. Every input the user can
fix (a usage error, a `WorkbenchError`, an unreadable file) prints exactly one
`error: ...` line on stderr and exits 2; a closed stdout (`| head -1`) ends the command
quietly. Anything else is a bug: one line saying so, exit 1 (`WORKBENCH_TRACEBACK=1`
shows the traceback).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from workbench.dispatch.versions import DEFAULT_VERSION
from workbench.errors import USER_ERRORS
from workbench.text import printable


class UsageError(Exception):
    """A command line argparse refuses (unknown option, missing or malformed value)."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so `main` prints one line."""

    def error(self, message: str):
        raise UsageError(f"{message} (see `{self.prog} --help`)")

# Command modules, in the order `--help` lists them.
_COMMANDS = ("trace", "platforms", "matrix", "inspect", "bench", "predict", "report", "moe_run", "moe_report")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m workbench",
        description=f"Which vLLM {DEFAULT_VERSION} kernel runs a quantized layer, why, and what "
                    "it costs.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"workbench.cli.{name}")
        except ModuleNotFoundError as exc:  # a command whose module is not written yet
            if exc.name != f"workbench.cli.{name}":
                raise
            continue
        module.register(sub)
    return parser


def _error(message: object) -> None:
    # One line, whatever the message holds; runs of spaces are kept as vLLM wrote them.
    text = " ".join(str(message).splitlines()) or "(no message)"
    print(f"error: {text}", file=sys.stderr, flush=True)


def _escape_unencodable_output() -> None:
    # Arguments that are not valid UTF-8 arrive as lone surrogates and may be echoed back:
    # write them as backslash escapes instead of failing inside print.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


class _TerminalSafe:
    """A text stream that escapes every control character but line breaks: names from a
    checkpoint reach every command's output, and none may act on the terminal."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(printable(text, keep_newlines=True))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    _escape_unencodable_output()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _TerminalSafe(sys.stdout), _TerminalSafe(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = saved


def _main(argv: list[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except (UsageError, *USER_ERRORS) as exc:
        _error(exc)
    except BrokenPipeError:
        # The reader went away (`| head -1`): stop writing, and keep Python's exit-time
        # flush of stdout from raising again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is no file descriptor (captured in-process)
            pass
        return 0
    except OSError as exc:  # a file the user named that cannot be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        _error(f"{where}{exc.strerror or exc}")
    except MemoryError:
        _error("out of memory; use smaller sizes (see the command's --help)")
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug must not look like a traceback of bad input
        if os.environ.get("WORKBENCH_TRACEBACK"):
            raise
        _error(f"internal error ({type(exc).__name__}: {exc}); this is a bug in the workbench, "
               "not in your input: rerun with WORKBENCH_TRACEBACK=1 and report the traceback")
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
