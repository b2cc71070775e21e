"""Every vLLM `file:line` a rule set cites is a line of that release's sdist.

The check runs where the release's unpacked sdist is at hand (`recorder.sdist.find_sdist`:
$WORKBENCH_VLLM_SRC, `vllm-<version>` under $WORKBENCH_VLLM_SDISTS or the user's cache dir,
which `fetch_sdist` fills); without it the test says which sdist it lacks and skips. A
citation is a path (under the sdist, or ending a path there; Humming's under its installed
package) and a line or range that the file holds. A derived release's moved-lines table is
recomputed from the two sdists, so a rule it inherits cites the line its own code has there.
"""
from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

import pytest

from workbench.dispatch import trace_mp, trace_scheme, versions
from workbench.dispatch.citations import CITATION, line_of, moved_lines
from workbench.recorder.sdist import find_sdist

VERSIONS = versions.available()
CITED = re.compile(r"(?<![\w/.-])" + CITATION.pattern)


def _sdist(version: str) -> Path:
    src = find_sdist(version)
    if src is None:
        pytest.skip(f"no unpacked vLLM {version} sdist at hand (set WORKBENCH_VLLM_SDISTS to a "
                    f"folder holding vllm-{version}/, or run workbench.recorder.sdist.fetch_sdist)")
    return src


def _roots(src: Path) -> list[Path]:
    humming = importlib.util.find_spec("humming")  # humming/... citations, where installed
    return [src] + ([Path(humming.origin).parents[1]] if humming and humming.origin else [])


@functools.cache
def _listing(root: Path) -> tuple[Path, ...]:
    return tuple(f for suffix in ("py", "cu", "h", "cpp", "txt", "md")
                 for f in root.rglob(f"*.{suffix}") if f.is_file())


@functools.cache
def _length(f: Path) -> int:
    return len(f.read_text(errors="replace").splitlines())


def _files(roots: list[Path]) -> dict[str, list[Path]]:
    """file name -> the files of that name under the roots."""
    out: dict[str, list[Path]] = {}
    for root in roots:
        for f in _listing(root):
            out.setdefault(f.name, []).append(f)
    return out


def _holds(files: dict[str, list[Path]], citation: str) -> bool:
    m = CITATION.fullmatch(citation)
    a, b = int(m["a"]), int(m["b"] or m["a"])
    for f in files.get(Path(m["path"]).name, []):
        if f.as_posix().endswith("/" + m["path"]) and a <= b <= _length(f):
            return True
    return False


def _package_citations(package: str) -> list[tuple[str, int, str]]:
    folder = Path(importlib.import_module(package).__file__).parent
    return [(f.name, n, m[0]) for f in sorted(folder.glob("*.py"))
            for n, line in enumerate(f.read_text().splitlines(), 1)
            for m in CITED.finditer(line)]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_citation_in_a_release_package_is_a_line_of_its_sdist(version):
    src = _sdist(version)
    files = _files(_roots(src))
    rules = versions.rule_set(version)
    cited = _package_citations(rules.package)
    cited += [("changes", 0, c.source) for c in rules.changes]
    assert cited
    bad = [c for c in cited if not _holds(files, c[2])]
    assert not bad, f"{len(bad)} of {len(cited)} citations miss vLLM {version}: {bad[:10]}"


@pytest.mark.parametrize("version", [v for v in VERSIONS if versions.rule_set(v).base])
def test_a_derived_release_carries_inherited_citations_to_its_own_lines(version):
    rules = versions.rule_set(version)
    src, base_src = _sdist(version), _sdist(rules.base.version)
    assert rules.LINES_MOVED == moved_lines(base_src, src), "lines_moved.json is stale"
    base_files = _files(_roots(base_src))
    was = [c.was for c in rules.changes if c.was]
    moved = rules.own().get("CITES_MOVED", {})  # (base file, line) -> this release's file:line
    was += [f"{path}:{line}" for path, line in moved]
    files = _files(_roots(src))
    assert all(_holds(files, new) for new in moved.values()), moved
    assert was and all(_holds(base_files, w) for w in was), was
    # every runtime line a trace of this release cites is the line the base release cited
    from tests.dispatch.conftest import load_oracle_cases
    seen = set()
    for case in load_oracle_cases(version):
        fn = trace_mp if case["level"] == "mp" else trace_scheme
        rt = fn(case["input"], case["platform"], case["env"], rules=rules).runtime_detail
        if rt is not None and rt.source:
            seen.add(rt.source)
    assert len(seen) >= 10
    for cited in seen:
        assert "(vLLM" not in cited, f"{cited}: a line {version} changed is still cited"
        assert line_of(src, cited) is not None, cited
