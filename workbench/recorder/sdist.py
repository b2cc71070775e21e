"""The version an unpacked vLLM sdist declares: what picks the rule set that records from it."""
from __future__ import annotations

from pathlib import Path

from workbench.errors import InvalidInputError


class RecorderError(InvalidInputError):
    """The recorder was pointed at something it cannot record from."""


def sdist_version(src: Path) -> str:
    """The `Version:` an unpacked sdist's PKG-INFO declares."""
    if not Path(src).is_dir():
        raise RecorderError(f"--vllm-src {src}: not a directory")
    info = Path(src) / "PKG-INFO"
    if not info.is_file():
        raise RecorderError(f"--vllm-src {src}: no PKG-INFO; expected an unpacked vLLM sdist "
                            "(the directory that `tar xzf vllm-X.Y.Z.tar.gz` creates)")
    for line in info.read_text(errors="replace").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise RecorderError(f"--vllm-src {src}: PKG-INFO has no Version line")
