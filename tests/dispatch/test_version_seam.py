"""The version seam: a vLLM version is named only by its rule-set package, the registry, the
docs and recorded data; everything else reads it (`RuleSet.version`, DEFAULT_VERSION)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from workbench.dispatch.versions import RULE_SETS

ROOT = Path(__file__).resolve().parents[2]
# Where a version may be written out: its package, the registry, the docs, recorded data.
ALLOWED = ("workbench/dispatch/vllm_", "workbench/dispatch/versions.py", "README.md", "docs/",
           # the MoE rule sets, one module per release, and their registry
           "workbench/dispatch/moe/vllm_", "workbench/dispatch/moe/versions.py",
           "notebooks/README.md", "tests/fixtures/", "benchmarks/results/",
           "tests/dispatch/test_version_seam.py")
SOURCES = (".py", ".ipynb", ".toml", ".cfg", ".c", ".h", ".sh", ".yml", ".yaml", ".txt")


def _literal() -> re.Pattern:
    """Each version as written ("0.33.0") and as its package spells it ("0_33")."""
    versions = [r"(?<![\d.])" + re.escape(v) + r"(?!\d)" for v in RULE_SETS]
    packages = [re.escape(p.rsplit(".", 1)[1].removeprefix("vllm_")) for p in RULE_SETS.values()]
    return re.compile("|".join(versions + packages))


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs the git checkout to list tracked files")
def test_no_version_literal_outside_the_seam():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    pattern, found = _literal(), []
    for name in files:
        if name.startswith(ALLOWED) or not name.endswith(SOURCES) or not (ROOT / name).is_file():
            continue
        for i, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1):
            if pattern.search(line) and not _package_entry(name, line):
                found.append(f"{name}:{i}: {line.strip()[:100]}")
    assert not found, "the vLLM version written out of the seam:\n" + "\n".join(found)


def _package_entry(name: str, line: str) -> bool:
    """pyproject.toml lists each rule-set package by name: that is the package, not a copy."""
    return name == "pyproject.toml" and all(f'"{p}"' in line or p not in line
                                            for p in RULE_SETS.values())


def test_the_env_is_read_with_the_rule_set_of_the_version_traced():
    from workbench.dispatch import parse_env, trace_mp
    from workbench.dispatch.versions import DEFAULT_VERSION, UnknownVersionError, rule_set

    c = {"weight_type": "uint4b8", "act_type": "bfloat16", "group_size": 128,
         "zero_points": False, "full_weight_shape": [4096, 4096]}
    assert parse_env({"VLLM_MARLIN_INPUT_DTYPE": "int8"}, DEFAULT_VERSION).rules is rule_set().ENV
    with pytest.raises(UnknownVersionError, match="no rule set for '0.1.0'"):
        parse_env({"linear_backend": "marlin"}, "0.1.0")
    t = trace_mp(c, "sm90-h200", {"linear_backend": "nope"}, rules=DEFAULT_VERSION)
    assert t.error_type == "ValidationError" and t.vllm_version == DEFAULT_VERSION
    assert t.rules is rule_set(DEFAULT_VERSION)


def _lines(package: str) -> int:
    import importlib
    folder = Path(importlib.import_module(package).__file__).parent
    return sum(len(f.read_text().splitlines()) for f in folder.glob("*.py"))


@pytest.mark.parametrize("version", [v for v in RULE_SETS])
def test_a_derived_release_states_only_what_it_changed(version):
    """A release derived from another holds a tenth of its base's code at most, and every
    change it records names a rule it set itself (an entry, or a kernel class it replaced)."""
    from workbench.dispatch.versions import rule_set

    r = rule_set(version)
    if r.base is None:
        pytest.skip(f"{version} is modelled whole")
    assert _lines(r.package) * 10 <= _lines(r.base.package)
    own = r.own()
    replaced = {name for name, k in r.KERNELS_BY_NAME.items() if r.base.KERNELS_BY_NAME[name] is not k}
    assert r.changes and all(c.rule in own or c.rule in replaced for c in r.changes)
    assert {k for k in own if k not in ("LINES_MOVED", "OWN_CITATIONS", "CITES_MOVED")} <= (
        {c.rule for c in r.changes} | {"ALL_KERNELS", "KERNELS_BY_NAME", "POSSIBLE_KERNELS"})
