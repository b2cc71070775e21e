"""Allowed roots, and the one way a checkpoint file is opened.

Every file a reader opens (config JSON, the shard index, each safetensors file) goes through
`open_file`. Its real path (symlinks followed) must lie under an allowed root: a symlink
inside the checkpoint that points elsewhere is refused by name. It must be a regular file,
judged by `stat` before opening, because `open()` on a FIFO blocks forever and a device can
stream without end; the resolved path is opened component by component with O_NOFOLLOW
(the file itself with O_NONBLOCK too) and the descriptor checked again
with `fstat`, and must be the very file that was judged (same device and inode), so a file
swapped in between is refused too.

The roots of a checkpoint are its own directory plus the directories named in
WORKBENCH_ALLOWED_ROOTS (os.pathsep-separated), e.g. a Hugging Face cache whose snapshot
folders symlink into `blobs/`.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from workbench.checkpoints.errors import CheckpointError, NotAFileError, OutsideRootsError

__all__ = ["ROOTS_ENV", "checkpoint_roots", "real_path", "open_file", "file_kind"]

ROOTS_ENV = "WORKBENCH_ALLOWED_ROOTS"
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """'a FIFO (named pipe)', 'a directory', ... for a stat mode that is not a regular file."""
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def checkpoint_roots(root: Path, extra: tuple[str | os.PathLike, ...] | None = None) -> tuple[Path, ...]:
    """The checkpoint's own (resolved) directory, then `extra` or else WORKBENCH_ALLOWED_ROOTS."""
    if extra is None:
        extra = tuple(p for p in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if p.strip())
    out = [Path(os.path.realpath(root))]
    for part in extra:
        out.append(Path(os.path.realpath(Path(str(part).strip()).expanduser())))
    return tuple(out)


def real_path(path: Path, roots: tuple[Path, ...], missing: type[CheckpointError]) -> tuple[Path, os.stat_result]:
    """The resolved path and its stat, if it is a regular file under one of `roots`.

    `missing` is the error class for a path that does not exist (the caller knows whether
    an absent config or an absent shard is at fault).
    """
    try:
        real = Path(os.path.realpath(path, strict=True))
        st = os.stat(real)
    except FileNotFoundError:
        raise missing(f"{path}: no such file") from None
    except ValueError as exc:  # an embedded NUL byte
        raise missing(f"{str(path)!r}: not a usable path ({exc})") from None
    except OSError as exc:  # ELOOP (a symlink loop), EACCES, ENAMETOOLONG
        raise NotAFileError(f"{path}: cannot be resolved to a regular file: {exc.strerror or exc}") from None
    if not any(real == r or real.is_relative_to(r) for r in roots):
        via = f" (a symlink to {real})" if real != Path(os.path.abspath(path)) else ""
        raise OutsideRootsError(
            f"{path}{via}: lies outside the allowed roots; allowed: "
            f"{', '.join(map(str, roots))}. Add a root with {ROOTS_ENV}=/path/a{os.pathsep}/path/b")
    if not stat.S_ISREG(st.st_mode):
        raise NotAFileError(f"{path}: is {file_kind(st.st_mode)}, not a regular file; refused "
                            "unopened (a checkpoint file must be a regular file)")
    return real, st


def _open_no_links(real: Path) -> int:
    """Open a resolved path one component at a time, none of them followed if a symlink: a
    directory swapped for a link after `realpath` cannot redirect the open outside the roots."""
    if os.open not in os.supports_dir_fd or not real.is_absolute():
        return os.open(real, _OPEN_FLAGS)
    dir_flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(real.anchor, dir_flags)
    try:
        for part in real.parts[1:-1]:
            nxt = os.open(part, dir_flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(real.name, _OPEN_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


def open_file(path: Path, roots: tuple[Path, ...], missing: type[CheckpointError]) -> BinaryIO:
    """`real_path`'s checks, then open it read-only and check the descriptor is that file."""
    real, before = real_path(path, roots, missing)
    try:
        fd = _open_no_links(real)
    except OSError as exc:  # ELOOP: a component became a symlink after the check
        raise NotAFileError(f"{path}: cannot be opened as a regular file: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise NotAFileError(f"{path}: changed while it was being opened (now "
                            f"{'a regular file' if stat.S_ISREG(st.st_mode) else file_kind(st.st_mode)}"
                            "); refused")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
