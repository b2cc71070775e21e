"""`python -m workbench`: the command-line face of the workbench.

Each command lives in its own module under `workbench/cli/` and exposes
`register(subparsers)`; the module sets `func` on its parser. Errors the user can
fix are `WorkbenchError`s: they print one line naming the field and exit 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from workbench.errors import USER_ERRORS

# Command modules, in the order `--help` lists them.
_COMMANDS = ("trace", "platforms", "matrix", "inspect", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workbench",
        description="Which vLLM 0.33.0 kernel runs a quantized layer, why, and what it costs.",
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
