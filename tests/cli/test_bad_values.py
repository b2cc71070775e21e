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
    ("trace", ["--mp-config", MP], "--against-vllm", []),
    *[("predict", ["--n", "64", "--k", "128", "--group", "32", "--m", "1"], opt, []) for opt in
      ("--platform", "--n", "--k", "--group", "--m", "--paths")],
    ("report", [], None, []),
    *[("report", ["Llama-3.2-3B"], opt, []) for opt in ("--platform", "--tp", "--decode-m", "--prefill-m")],
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


# Each field of each JSON input replaced by a value of the wrong type: a named error or a trace.
FIELD_INPUTS = {
    "--mp-config": {"weight_type": "int4", "act_type": "bfloat16", "group_size": 128,
                    "zero_points": False, "out_type": None, "full_weight_shape": [256, 256],
                    "partition_weight_shape": [256, 256]},
    "--scheme": {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                             "symmetric": True},
                 "input_activations": {"num_bits": 8, "type": "int", "strategy": "token",
                                       "dynamic": True, "symmetric": True},
                 "format": "int-quantized", "in_features": 4096, "out_features": 4096,
                 "params_dtype": "bfloat16", "layer_name": "l"},
    "--inc": {"bits": 4, "group_size": 128, "sym": True, "in_features": 4096, "out_features": 4096,
              "params_dtype": "bfloat16", "packing_format": "auto_round:auto_gptq",
              "backend": "auto", "data_type": "int", "extra_config": {}},
    "--gptq": {"bits": 4, "group_size": 128, "desc_act": False, "sym": True, "in_features": 4096,
               "out_features": 4096, "params_dtype": "bfloat16"},
    "--awq": {"bits": 4, "group_size": 128, "zero_point": True, "in_features": 4096,
              "out_features": 4096, "params_dtype": "float16"},
    "--platform": {"preset": "sm90-h200", "device": "cuda", "capability": 90,
                   "packages": ["humming"], "torch_ops": [], "gfx": None},
}
WRONG_TYPES = ["x", 5, -1, None, True, [], {}, ["x"], 2**62]


def _fields(data: dict, prefix: tuple = ()):
    for key, value in data.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from _fields(value, prefix + (key,))


@pytest.mark.parametrize("option", list(FIELD_INPUTS))
def test_wrong_field_types_give_a_named_error_or_a_trace(option):
    import json

    base = FIELD_INPUTS[option]
    failures = []
    for path in _fields(base):
        for bad in WRONG_TYPES:
            data = json.loads(json.dumps(base))
            node = data
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = bad
            if option == "--platform":
                argv = ["trace", "--mp-config", json.dumps(FIELD_INPUTS["--mp-config"]),
                        "--platform", json.dumps(data), "--json"]
            else:
                argv = ["trace", option, json.dumps(data), "--platform", "x86-avx512", "--json"]
            rc, _, err = run_cli(argv)
            if rc not in (0, 2) or (rc == 2 and len(err.splitlines()) != 1):
                failures.append(f"{'.'.join(path)} = {bad!r}: rc={rc} {err[:200]!r}")
    assert not failures, "\n".join(failures)


def _commands() -> dict:
    from workbench.__main__ import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return dict(sub.choices)


# Values that are no valid number, name or file anywhere, so that no command starts real work.
NEVER_VALID = {k: v for k, v in BAD_VALUES.items() if k not in ("huge", "negative", "json-number")}


@pytest.mark.parametrize("command", list(_commands()))
def test_every_option_of_every_command_refuses_bad_values_in_one_line(command, tmp_path, monkeypatch):
    """Found from the parser itself, so a command added later is walked too."""
    monkeypatch.chdir(tmp_path)
    parser = _commands()[command]
    takes_value = [a for a in parser._actions if a.option_strings and a.nargs != 0
                   and a.dest != "help"]
    positional = any(not a.option_strings for a in parser._actions)
    argvs = [[command, a.option_strings[0], v] for a in takes_value for v in NEVER_VALID.values()]
    argvs += [[command, v] for v in NEVER_VALID.values()] if positional else []
    failures = []
    for argv in argvs:
        rc, _, err = run_cli(argv)
        lines = err.splitlines()
        if rc != 2 or len(lines) != 1 or not lines[0].startswith("error: "):
            failures.append(f"{argv[1:]!r:.80}: rc={rc} {err[:200]!r}")
    assert not failures, "\n".join(failures)
