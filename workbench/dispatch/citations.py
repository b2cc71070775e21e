"""vLLM `file:line` citations: read, carried from one release's lines to the next, checked.

A later release's rule set inherits the rules it did not change, and with them citations of
the release it derives from. Its `LINES_MOVED` table (made from the two sdists by
`moved_lines`) says where each unchanged line went, so a trace cites the release it traced.
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Iterable, Mapping

# "path/to/file.py:12" or ":12-30" (paths under vllm/ or csrc/, as the rule sets write them).
# Read only on the rule sets' own literals and the sdists' paths, never on a checkpoint's text.
CITATION = re.compile(r"(?P<path>[\w./-]+\.(?:py|cu|h|cpp|txt|md)):(?P<a>\d+)(?:-(?P<b>\d+))?")
# where moved lines are tracked: every file a rule set's runtime cites lies under these
TRACKED = ("vllm/model_executor/kernels/linear", "vllm/model_executor/layers/quantization",
           "vllm/_custom_ops.py", "vllm/_cpu_ops.py", "vllm/envs.py", "vllm/platforms",
           "vllm/config")
Moved = Mapping[str, list[list[int]]]  # path under vllm/ -> [old first, old last + 1, new first]


def _line(old: int, blocks: list[list[int]]) -> int | None:
    for start, end, new in blocks:
        if start <= old < end:
            return new + old - start
    return None


def relocate(citation: str, moved: Moved) -> str | None:
    """`citation` in the next release's lines; None when a cited line changed there. A path
    the table does not hold kept every line."""
    m = CITATION.fullmatch(citation)
    if m is None:
        return citation
    path = m["path"]
    blocks = next((b for p, b in moved.items() if p == path or p.endswith("/" + path)), None)
    if blocks is None:
        return citation
    a = _line(int(m["a"]), blocks)
    b = _line(int(m["b"]), blocks) if m["b"] else None
    if a is None or (m["b"] and b is None):
        return None
    return f"{path}:{a}" + (f"-{b}" if m["b"] else "")


def moved_lines(old_src: Path, new_src: Path, under: Iterable[str] = TRACKED) -> dict:
    """The unchanged line blocks of every tracked file that differs between two sdists."""
    out: dict[str, list[list[int]]] = {}
    for top in under:
        base = Path(old_src) / top
        files = [base] if base.is_file() else sorted(base.rglob("*.py"))
        for f in files:
            rel = f.relative_to(Path(old_src) / "vllm").as_posix()
            other = Path(new_src) / "vllm" / rel
            if not other.is_file():
                continue
            a, b = f.read_text().splitlines(), other.read_text().splitlines()
            if a == b:
                continue
            sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
            out[rel] = [[i + 1, i + n + 1, j + 1] for i, j, n in sm.get_matching_blocks() if n]
    return out


def line_of(src: Path, citation: str) -> str | None:
    """The text of a citation's first line in an unpacked sdist (paths under vllm/, or from
    the sdist's root), None when the file or the line is not there."""
    m = CITATION.fullmatch(citation)
    if m is None:
        return None
    for f in (Path(src) / "vllm" / m["path"], Path(src) / m["path"]):
        if f.is_file():
            lines = f.read_text(errors="replace").splitlines()
            n = int(m["a"])
            last = int(m["b"]) if m["b"] else n
            return lines[n - 1] if 1 <= n <= last <= len(lines) else None
    return None
