"""Every subcommand, every option, fed the same generic bad values: never a traceback.

Each value goes into each option of each command (and into each positional): the command
either runs (exit 0) or prints exactly one `error: ...` line and exits 2. Exit 1 would be
the CLI's "internal error" line, i.e. a bug; a raw exception fails the test outright.
"""
from __future__ import annotations

import io
import os
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch

from workbench.__main__ import main

REPO = Path(__file__).resolve().parents[2]
SAMPLE = str(REPO / "sample_models" / "ct-w4a8-int-g128")
MP = ('{"weight_type": "int4", "act_type": "bfloat16", "group_size": 128, "zero_points": false, '
      '"out_type": null, "full_weight_shape": [256, 256], "partition_weight_shape": [256, 256]}')
TINY_BENCH = ["--n", "32", "--k", "64", "--group", "32", "--m", "1", "--repeats", "1",
              "--warmup", "0", "--paths", "w4a16_fallback"]

BAD_VALUES = {
    "empty": "",
    "nul": "a\0b",
    "huge": "1" + "0" * 100,
    "negative": "-5",
    "json-string": '"str"',
    "json-number": "5",
    "json-null": "null",
    "json-array": "[1, 2]",
    "json-deep": "[" * 5000 + "]" * 5000,
    "json-nan": '{"x": NaN}',
    "missing-path": "/dev/null/nowhere.json",
    "directory": tempfile.gettempdir(),
    "dev-zero": "/dev/zero",
    "at-dev-zero": "@/dev/zero",
    "long-path": "a" * 5000,
}

# (command, arguments before the value, option, arguments after): the value goes after option.
SLOTS = [
    ("trace", [], "--mp-config", []),
    ("trace", [], "--scheme", []),
    ("trace", [], "--inc", []),
    ("trace", [], "--gptq", []),
    ("trace", [], "--awq", []),
    ("trace", ["--mp-config", MP], "--vllm-version", []),
    ("trace", [], "--batch", []),
    ("trace", ["--layer", "x"], "--checkpoint", []),
    ("trace", ["--checkpoint", SAMPLE], "--layer", []),
    ("trace", ["--checkpoint", SAMPLE, "--layer", "model.layers.0.mlp.down_proj"], "--tp", []),
    ("trace", ["--mp-config", MP], "--platform", []),
    ("trace", ["--mp-config", MP], "--env", []),
    ("platforms", [], None, []),
    ("matrix", [], "--env", []),
    ("inspect", [], None, []),
    ("inspect", [SAMPLE], "--platform", []),
    ("inspect", [SAMPLE], "--tp", []),
    *[("bench", TINY_BENCH, opt, []) for opt in
      ("--m", "--n", "--k", "--group", "--paths", "--repeats", "--warmup", "--threads", "--seed",
       "--max-call-s", "--out")],
    ("bench", TINY_BENCH + ["--model", "Llama-3.1-8B"], "--layer", []),
    ("bench", TINY_BENCH + ["--layer", "o_proj"], "--model", []),
]


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()  # bench --threads sets the process-wide value
    cwd = os.getcwd()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            rc = main(argv)
    finally:
        torch.set_num_threads(threads)
        os.chdir(cwd)
    return rc, out.getvalue(), err.getvalue()


def _slot_id(slot) -> str:
    cmd, before, opt, _ = slot
    return f"{cmd}-{opt or 'positional'}" + ("-model" if "--model" in before else "")


@pytest.mark.parametrize("slot", SLOTS, ids=[_slot_id(s) for s in SLOTS])
def test_no_bad_value_gives_a_traceback(slot, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a value that happens to be a valid --out file lands here
    cmd, before, opt, after = slot
    failures = []
    for name, value in BAD_VALUES.items():
        argv = [cmd, *before, *([opt] if opt else []), value, *after]
        rc, _, err = run_cli(argv)
        lines = err.splitlines()
        if rc == 0:
            continue  # e.g. `--seed 5`: a value that is not bad here
        if rc != 2 or len(lines) != 1 or not lines[0].startswith("error: "):
            failures.append(f"{name}: rc={rc} stderr={err[:300]!r}")
    assert not failures, "\n".join(failures)
