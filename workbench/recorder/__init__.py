"""Record what a vLLM release's own code decides, as the fixtures the tests compare against.

    python -m workbench.recorder --vllm-src DIR [--out tests/fixtures/vllm-<version>]

`DIR` is an unpacked vLLM sdist. Its version (PKG-INFO) picks the rule set's `recorder` module
from `workbench.dispatch.versions.RULE_SETS`; that module imports vLLM from `DIR` and runs its
selection code on simulated platforms (see `workbench.recorder.sandbox` for what is faked).

Levels: mp (the candidate loop), scheme (compressed-tensors), gptq, awq, inc (a checkpoint's
linear layer through vLLM's model-load order), config-gate (the VllmConfig quantization gate)
and runtime (weight processing after selection). Committed mp/scheme cases keep their inputs
and get their `expected` re-recorded; the other levels are drawn from
`workbench.recorder.cases` with a fixed seed, so one command rebuilds every fixture file.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable

from workbench.dispatch.versions import RULE_SETS, rule_set
from workbench.recorder.sdist import RecorderError, sdist_version

# fixture file -> how it is written; the files whose inputs are fixed (re-recorded in place).
FIXED_FILES = {"vllm_oracle_sample.json": "json", "vllm_oracle_generated.jsonl": "jsonl"}
# level -> (file, number of seeded random cases)
GENERATED_LEVELS = {"gptq": ("vllm_oracle_gptq.jsonl", 330),
                    "awq": ("vllm_oracle_awq.jsonl", 300),
                    "inc": ("vllm_oracle_inc.jsonl", 420),
                    "config-gate": ("vllm_oracle_config_gate.jsonl", 220),
                    "runtime": ("vllm_oracle_runtime.jsonl", 240)}
PROVENANCE_FILE = "vllm_oracle_provenance.json"
CASE_KEYS = ("id", "level", "input", "platform", "env", "expected")
LEVELS = ("mp", "scheme", *GENERATED_LEVELS)


def fixture_dir(root: str | Path, version: str) -> Path:
    """Where one release's recorded cases live under a fixtures folder."""
    return Path(root) / f"vllm-{version}"


def recorder_module(version: str) -> ModuleType:
    """The rule set's recorder for `version` (`<package>.recorder`)."""
    if version not in RULE_SETS:
        raise RecorderError(f"vLLM {version}: no rule set to record for; add a package to "
                            f"workbench.dispatch.versions.RULE_SETS (have: {', '.join(RULE_SETS)})")
    return rule_set(version).module("recorder")


def open_vllm(src: str | Path, packages: tuple[str, ...] = ()) -> tuple[ModuleType, Any]:
    """(the version's recorder module, its loaded vLLM) for an unpacked sdist, imported with
    the optional `packages` present."""
    src = Path(src)
    version = sdist_version(src)
    rec = recorder_module(version)
    return rec, rec.Vllm(src, tuple(packages), version)


def record_case(rec: ModuleType, vllm: Any, case: dict) -> dict:
    """`expected` for one case, from vLLM's own code."""
    if case["level"] not in rec.RECORDERS:
        raise RecorderError(f"case {case.get('id')!r}: level {case['level']!r} is not recorded; "
                            f"levels: {', '.join(rec.RECORDERS)}")
    return rec.RECORDERS[case["level"]](vllm, case)


def read_cases(path: Path) -> list[dict]:
    if path.suffix == ".json":
        return json.loads(path.read_text())
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_cases(path: Path, cases: list[dict]) -> None:
    """The committed layouts: the sample indented by one space, the rest one case a line."""
    if path.suffix == ".json":
        path.write_text(json.dumps(cases, indent=1))
    else:
        path.write_text("".join(json.dumps({k: c[k] for k in CASE_KEYS}, separators=(",", ":"))
                                + "\n" for c in cases))


def _record_group(src: str, cases: list[dict],
                  packages: tuple[str, ...]) -> tuple[list[dict], dict]:
    """In a fresh interpreter: every case of one optional-package set, and the provenance."""
    rec, vllm = open_vllm(src, packages)
    return [record_case(rec, vllm, c) for c in cases], vllm.provenance()


def record_all(src: str | Path, cases: list[dict]) -> dict:
    """Record `expected` into each case; returns the merged provenance.

    vLLM binds optional packages when a module first imports them (the humming facade caches
    what it resolved), so the cases run in one fresh interpreter per set of packages, with a
    fixed hash seed: error texts that print a Python set then come out the same every run.
    """
    import concurrent.futures
    import multiprocessing
    import os
    groups: dict[tuple, list[int]] = {}
    for n, c in enumerate(cases):
        groups.setdefault(tuple(sorted(c["platform"].get("packages", []))), []).append(n)
    provenance: dict = {}
    os.environ["PYTHONHASHSEED"] = "0"
    ctx = multiprocessing.get_context("spawn")
    for key, idx in sorted(groups.items()):
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
            expected, prov = pool.submit(_record_group, str(src), [cases[i] for i in idx],
                                         key).result()
        for i, e in zip(idx, expected):
            cases[i]["expected"] = e
        calls = set(provenance.get("stub_calls", [])) | set(prov["stub_calls"])
        provenance = {**prov, "stub_calls": sorted(calls), "python_hash_seed": 0}
    return provenance


def regenerate(src: str | Path, out: str | Path, levels: Iterable[str] | None = None,
               seed: int = 0, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Re-record the fixed fixture files and draw and record the generated levels into `out`.

    Returns {file: number of cases}. Fixed files are read from `out` (their inputs are the
    committed ones); a generated level is drawn from `workbench.recorder.cases` with `seed`.
    The provenance file is updated for the files written.
    """
    from workbench.recorder import cases as gen
    wanted = set(levels) if levels else None
    if wanted and wanted - set(LEVELS):
        raise RecorderError(f"--levels: unknown level(s) {sorted(wanted - set(LEVELS))}; "
                            f"levels: {', '.join(LEVELS)}")
    recorder_module(sdist_version(Path(src)))  # a wrong folder fails before any interpreter starts
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[dict]] = {}
    for name in FIXED_FILES:
        path = out / name
        if path.is_file() and not (wanted and not wanted & {"mp", "scheme"}):
            files[name] = read_cases(path)
    for level, (name, n) in GENERATED_LEVELS.items():
        if not wanted or level in wanted:
            files[name] = gen.draw(level, n, seed)
    everything = [c for cases in files.values() for c in cases]
    progress(f"recording {len(everything)} cases from {src}")
    prov = record_all(src, everything)
    for name, cases in files.items():
        write_cases(out / name, cases)
        progress(f"{name}: {len(cases)} cases")
    path = out / PROVENANCE_FILE
    old = json.loads(path.read_text()) if path.is_file() else {}
    counts = {**old.get("files", {}), **{name: len(c) for name, c in files.items()}}
    calls = sorted(set(old.get("stub_calls", [])) | set(prov["stub_calls"]))
    path.write_text(json.dumps({**prov, "stub_calls": calls, "seed": seed, "files": counts},
                               indent=1) + "\n")
    return counts
