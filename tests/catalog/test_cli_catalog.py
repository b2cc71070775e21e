"""Bad input to `python -m workbench`: each row one `error:` line and exit 2, or the right result.

Rows run the CLI's `main(argv)` in this process with stdout/stderr captured (a subprocess
where the process itself is the point: stdin, a closed pipe).
"""
from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from workbench.__main__ import main

SURFACE = "cli"

REPO = Path(__file__).resolve().parents[2]
SAMPLE = str(REPO / "sample_models" / "ct-w4a8-int-g128")
SAMPLE_1152 = str(REPO / "sample_models" / "ct-w4a8-int-intermediate-1152")
EXAMPLE = str(REPO / "examples" / "trace_batch.jsonl")
MP = {"weight_type": "int4", "act_type": "bfloat16", "group_size": 128, "zero_points": False,
      "out_type": None, "full_weight_shape": [256, 256], "partition_weight_shape": [256, 256]}
SCHEME = {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
          "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True},
          "format": "int-quantized", "in_features": 4096, "out_features": 4096,
          "params_dtype": "bfloat16"}


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _error(argv: list[str], gist: str):
    """Exit 2, nothing on stdout, exactly one stderr line: `error: ` and text matching `gist`."""
    def run():
        rc, out, err = _main(argv)
        lines = err.splitlines()
        assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), (rc, err)
        assert re.search(gist, lines[0]), (gist, lines[0])
        assert out == "", out
    return run


def _ok(argv: list[str]):
    """Exit 0, nothing on stderr; with --json, every stdout line is a JSON record."""
    def run():
        rc, out, err = _main(argv)
        assert rc == 0 and err == "", (rc, err)
        if "--json" in argv:
            assert all(isinstance(json.loads(line), dict) for line in out.splitlines()), out
    return run


def _warns(argv: list[str], start: str):
    """Exit 0, nothing on stderr, a stdout line `warning: <start>...`; the JSON trace's
    `warnings` holds the same sentence."""
    def run():
        rc, out, err = _main(argv)
        assert rc == 0 and err == "", (rc, err)
        assert any(line.startswith(f"warning: {start}") for line in out.splitlines()), out
        rc, out, err = _main(argv + ["--json"])
        warnings = json.loads(out)["warnings"]
        assert rc == 0 and [w["message"][:len(start)] for w in warnings] == [start], out
    return run


_TMP = tempfile.TemporaryDirectory(prefix="cli-catalog-")  # removed when the process ends


def _tmp_file(text: str | bytes, suffix: str = ".jsonl") -> str:
    f = tempfile.NamedTemporaryFile("wb", suffix=suffix, delete=False, dir=_TMP.name)
    f.write(text.encode() if isinstance(text, str) else text)
    f.close()
    return f.name


def _batch_goes_on():
    text = "5\n" + "[" * 3000 + "]" * 3000 + "\n" + json.dumps({"mp_config": MP}) + "\n"
    rc, out, err = _main(["trace", "--batch", _tmp_file(text)])
    outs = [json.loads(x) for x in out.splitlines()]
    assert rc == 2 and len(err.splitlines()) == 1 and "line 1, 2" in err, err
    assert "expected a JSON object" in outs[0]["input_error"]
    assert "nested 3000 levels deep" in outs[1]["input_error"]
    assert outs[2]["selected"] == "HummingLinearKernel"


def _batch_line_field_types():
    lines = [{"mp_config": MP, "vllm_version": [1]}, {"mp_config": MP, "platform": 5},
             {"mp_config": MP, "env": "x"}, {"mp_config": MP, "platfrom": "xpu"}]
    rc, out, err = _main(["trace", "--batch", _tmp_file("\n".join(map(json.dumps, lines)) + "\n")])
    outs = [json.loads(x) for x in out.splitlines()]
    assert rc == 2 and len(err.splitlines()) == 1 and "line 1, 2, 3, 4" in err, err
    assert "case.vllm_version: expected a version string" in outs[0]["input_error"]
    assert "case.platform: expected a preset name or a JSON object" in outs[1]["input_error"]
    assert "case.env: expected a JSON object" in outs[2]["input_error"]
    assert "unknown key(s) ['platfrom']" in outs[3]["input_error"]


def _batch_platform_text_deep():
    line = {"mp_config": MP, "platform": '{"a":' + "[" * 3000 + "]" * 3000 + "}"}
    rc, out, err = _main(["trace", "--batch", _tmp_file(json.dumps(line) + "\n")])
    assert rc == 2 and "case.platform: JSON nested 3001 levels deep" in json.loads(out)["input_error"]


def _awq_group_zero():
    rc, out, _ = _main(["trace", "--awq", '{"bits": 4, "group_size": 0, "zero_point": true}', "--json"])
    t = json.loads(out)
    assert rc == 0 and (t["error_type"], t["error"]) == ("ZeroDivisionError", "integer modulo by zero")


def _inc_missing_group_size():
    rc, out, _ = _main(["trace", "--inc", '{"bits": 4}', "--platform", "xpu", "--json"])
    t = json.loads(out)
    assert rc == 0 and (t["error_type"], t["selected"]) == ("ValueError", None)
    assert t["error"] == "Cannot find any of ['group_size'] in the model's quantization config."


def _checkpoint_row_parallel_default():
    rc, out, _ = _main(["trace", "--checkpoint", SAMPLE_1152, "--layer", "model.layers.0.mlp.down_proj",
                        "--tp", "2", "--json"])
    assert rc == 0 and "input_size_per_partition=576" in json.loads(out)["error"]


def _closed_pipe():
    big = _tmp_file(Path(EXAMPLE).read_text() * 60)
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "trace", "--batch", big],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0 and proc.stderr.read() == b""


def _stdin_devices():
    for stdin, gist in ((subprocess.DEVNULL, None), (open("/dev/zero", "rb"), "stdin is a character device")):
        p = subprocess.run([sys.executable, "-m", "workbench", "trace", "--batch", "-"], stdin=stdin,
                           capture_output=True, timeout=60, cwd=REPO)
        if gist is None:  # /dev/null: an empty batch
            assert p.returncode == 0 and p.stdout == b"" and p.stderr == b"", p
        else:
            assert p.returncode == 2 and p.stderr.decode().count("error:") == 1 and gist in p.stderr.decode()
    p = subprocess.run([sys.executable, "-c", "import os, sys; os.close(0); sys.stdin = None; "
                        "from workbench.__main__ import main; sys.exit(main(['trace', '--batch', '-']))"],
                       capture_output=True, timeout=60, cwd=REPO)
    assert p.returncode == 2 and b"which is closed" in p.stderr and b"Traceback" not in p.stderr


def _argv_not_utf8():
    import os
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}  # no surrogateescape to hide behind
    for argv, rc, stream in (([b"--inc", b'{"bits": 4, "group_size": 128, "packing_format": "\xff"}'], 0, "stdout"),
                             ([b"--mp-config", json.dumps(MP).encode(), b"--platform", b"\xff"], 2,
                              "stderr")):
        p = subprocess.run([sys.executable.encode(), b"-m", b"workbench", b"trace", *argv],
                           capture_output=True, timeout=60, cwd=REPO, env=env)
        assert p.returncode == rc and b"\\udcff" in getattr(p, stream), p
        assert b"Traceback" not in p.stderr and b"internal error" not in p.stderr


def _stdin_batch_bad_utf8():
    p = subprocess.run([sys.executable, "-m", "workbench", "trace", "--batch", "-"], input=b"\xff\xfe{\n",
                       capture_output=True, timeout=120, cwd=REPO)
    out = json.loads(p.stdout)
    assert p.returncode == 2 and "not UTF-8" in out["input_error"] and b"Traceback" not in p.stderr


DEEP = "[" * 50 + "]" * 50
HUGE = "1" + "0" * 100

def _hostile_names():
    """Tensor names holding an OSC title escape, BEL, a line break and a formula: inspect and
    report (table and CSV) print none of those bytes raw, forge no row, start no formula."""
    import shutil

    from safetensors.torch import load_file, save_file

    from workbench.text import csv_cell

    root = Path(tempfile.mkdtemp()) / "ck"
    shutil.copytree(SAMPLE, root)
    hostile = "o\x1b]0;pwned\x07_proj\nforged\x1b[2J"
    for f in root.glob("*.safetensors"):
        save_file({k.replace("o_proj", hostile): v for k, v in load_file(f).items()}, f,
                  metadata={"format": "pt"})
    for argv in (["inspect", str(root)], ["report", str(root), "--platform", "sm90-h200"],
                 ["report", str(root), "--platform", "sm90-h200", "--csv"]):
        rc, out, err = _main(argv)
        assert rc == 0, (argv, err)
        assert not set(out + err) & {"\x1b", "\x07", "\r"}, argv
        assert not [line for line in out.splitlines() if line.startswith("forged")], argv
        assert "o\\x1b]0;pwned\\x07_proj\\nforged" in out, argv
    assert [csv_cell(v) for v in ("=HYPERLINK(1)", "+1+2", "@SUM(A1)", "-2+3", "-", 3, -1.5)] == [
        "'=HYPERLINK(1)", "'+1+2", "'@SUM(A1)", "'-2+3", "-", 3, -1.5]


CATALOG = [
    ("tensor names with terminal escapes, a line break and a formula (inspect, report, --csv)",
     "escaped as \\x1b / \\x07 / \\n; CSV cells cannot start a formula", _hostile_names),
    ("trace --scheme '\"str\"'", "exit 2: error: --scheme: expected a JSON object {...}, got a string",
     _error(["trace", "--scheme", '"str"'], r"--scheme: expected a JSON object .*got a string")),
    ("trace --scheme 5", "exit 2: error: --scheme: expected a JSON object, got a number",
     _error(["trace", "--scheme", "5"], r"got a number 5")),
    ("trace --scheme null", "exit 2: error: --scheme: expected a JSON object, got null",
     _error(["trace", "--scheme", "null"], r"got null$")),
    ("trace --mp-config '[1, 2]'", "exit 2: error: --mp-config: expected a JSON object, got an array",
     _error(["trace", "--mp-config", "[1, 2]"], r"--mp-config: .*got an array")),
    ("trace --scheme @/dev/zero", "exit 2: error: '/dev/zero' is a character device; accepted: a regular file (no read)",
     _error(["trace", "--scheme", "@/dev/zero"], r"character device; accepted: a regular file")),
    ("trace --scheme @<a directory>", "exit 2: error: ... is a directory; accepted: a regular file",
     _error(["trace", "--scheme", "@" + tempfile.gettempdir()], r"is a directory; accepted: a regular file")),
    ("trace --scheme @<a 2 MiB file>", "exit 2: error: ... holds over 1048576 bytes; accepted: at most 1048576",
     lambda: _error(["trace", "--scheme", "@" + _tmp_file(b" " * 2**21, ".json")],
                    r"holds over 1048576 bytes; accepted: at most 1048576")()),
    ("trace --mp-config <JSON nested 50 deep>", "exit 2: error: JSON nested 50 levels deep; accepted: at most 16",
     _error(["trace", "--mp-config", DEEP], r"nested 50 levels deep; accepted: at most 16")),
    ("trace --scheme with in_features = 10^100", "exit 2: error: in_features = an integer of 101 digits is out of range (int64)",
     _error(["trace", "--scheme", json.dumps({**SCHEME, "in_features": 10**100})],
            r"in_features = an integer of 101 digits is out of range; accepted: integers within")),
    ("trace --mp-config with full_weight_shape [4096, -10^30]", "exit 2: error: full_weight_shape[1] out of range",
     _error(["trace", "--mp-config", json.dumps({**MP, "full_weight_shape": [4096, -10**30]})],
            r"full_weight_shape\[1\] = an integer of 31 digits")),
    ("trace --mp-config '{\"group_size\": NaN}'", "exit 2: error: NaN is not JSON",
     _error(["trace", "--mp-config", '{"group_size": NaN}'], r"NaN is not JSON")),
    ("trace --mp-config '{not json'", "exit 2: error: --mp-config: malformed JSON (... line 1 column 2)",
     _error(["trace", "--mp-config", "{not json"], r"malformed JSON \(.* at line 1 column 2\)")),
    ("trace --platform '{\"capability\": \"x\"}'", "exit 2: error: platform.device: missing",
     _error(["trace", "--mp-config", json.dumps(MP), "--platform", '{"capability": "x"}'], r"platform.device: missing")),
    ("trace --platform '{\"preset\": \"sm90-h200\", \"capability\": \"x\"}'",
     "exit 2: error: platform.capability: got 'x'; accepted: null or an integer from 10 to 199",
     _error(["trace", "--mp-config", json.dumps(MP), "--platform", '{"preset": "sm90-h200", "capability": "x"}'],
            r"platform.capability: got 'x'; accepted: null or an integer from 10 to 199")),
    ("trace --platform <5000 characters>", "exit 2: error: --platform: ... is no preset name",
     _error(["trace", "--mp-config", json.dumps(MP), "--platform", "x" * 5000], r"is no preset name")),
    ("trace --batch: lines `5`, 3000-deep array, a good case", "ok: two input_error records, then the trace; exit 2, one error line naming lines 1, 2",
     _batch_goes_on),
    ("trace --batch: vllm_version [1], platform 5, env \"x\", key \"platfrom\"",
     "ok: each line its own input_error naming the field (a misspelt key is refused, not ignored)",
     _batch_line_field_types),
    ("trace --batch - with non-UTF-8 bytes", "ok: that line's input_error says not UTF-8; exit 2, no traceback",
     _stdin_batch_bad_utf8),
    ("trace --batch - < /dev/zero, < /dev/null, stdin closed",
     "exit 2: error: stdin is a character device (never read); empty batch ok; stdin closed named",
     _stdin_devices),
    ("trace with argument bytes that are not UTF-8 (\\xff), output encoding strict",
     "ok: echoed as \\udcff in the trace or the one error line, no UnicodeEncodeError",
     _argv_not_utf8),
    ("trace --batch /dev/zero", "exit 2: error: --batch: '/dev/zero' is a character device (never read)",
     _error(["trace", "--batch", "/dev/zero"], r"--batch: '/dev/zero' is a character device")),
    ("trace --batch FILE --markdown", "exit 2: error: --markdown: --batch prints one JSON trace per line",
     _error(["trace", "--batch", EXAMPLE, "--markdown"], r"--batch prints one JSON trace per line")),
    ("trace --mp-config ... --tp 2 (no --checkpoint)", "exit 2: error: --tp: given without --checkpoint",
     _error(["trace", "--mp-config", json.dumps(MP), "--tp", "2"], r"--tp: given without --checkpoint")),
    ("trace --checkpoint <5000-character path>", "exit 2: error: the path is 5000 characters long; accepted: at most 4096",
     _error(["trace", "--checkpoint", "a" * 5000, "--layer", "x"], r"5000 characters long; accepted: at most 4096")),
    ("trace --checkpoint 'a<NUL>b'", "exit 2: error: the path ... contains a NUL byte",
     _error(["trace", "--checkpoint", "a\0b", "--layer", "x"], r"contains a NUL byte")),
    ("trace --inc '{\"bits\": 4}' (no group_size)",
     "ok: vLLM's ValueError \"Cannot find any of ['group_size'] in the model's quantization config.\" (inc/inc.py:279), no default 128",
     _inc_missing_group_size),
    ("trace --awq with group_size 0 on sm90-h200",
     "ok: vLLM's own ZeroDivisionError from create_weights (auto_awq.py:819), recorded in the trace",
     _awq_group_zero),
    ("trace --checkpoint ... --layer down_proj --tp 2", "ok: row-parallel by default, K split to 576: vLLM's group-size ValueError",
     _checkpoint_row_parallel_default),
    ("trace (no source)", "exit 2: error: one of the arguments --mp-config ... is required (usage error)",
     _error(["trace"], r"one of the arguments --mp-config .* is required")),
    ("nope (unknown command)", "exit 2: error: argument command: invalid choice: 'nope'",
     _error(["nope"], r"invalid choice: 'nope'")),
    ("trace --env linear_backend_per_quant=<JSON nested 3000 deep>",
     "exit 2: error: env linear_backend_per_quant: expected a JSON object (no RecursionError)",
     _error(["trace", "--mp-config", json.dumps(MP), "--env",
             "linear_backend_per_quant={\"a\":" + "[" * 3000 + "]" * 3000 + "}"],
            r"env linear_backend_per_quant: expected a JSON object")),
    ("trace --batch line with \"platform\": \"<JSON text nested 3000 deep>\"",
     "ok: that line's input_error says case.platform: JSON nested 3001 levels deep",
     _batch_platform_text_deep),
    ("trace --mp-config ... --against-vllm ''", "exit 2: error: --against-vllm: empty path (was silently ignored)",
     _error(["trace", "--mp-config", json.dumps(MP), "--against-vllm", ""], r"--against-vllm: empty path")),
    ("matrix --env NOEQUALS", "exit 2: error: --env: expected KEY=VALUE",
     _error(["matrix", "--env", "NOEQUALS"], r"--env: expected KEY=VALUE")),
    ("inspect /dev/null", "exit 2: error: '/dev/null' is a character device; accepted: a checkpoint directory or a .safetensors file",
     _error(["inspect", "/dev/null"], r"character device; accepted: a checkpoint directory")),
    ("inspect --platform nope", "exit 2: error: platform: unknown preset 'nope' (once, no table)",
     _error(["inspect", SAMPLE, "--platform", "nope"], r"unknown preset 'nope'")),
    ("inspect --tp 0", "exit 2: error: argument --tp: '0'; accepted: an integer from 1 to 1024",
     _error(["inspect", SAMPLE, "--tp", "0"], r"--tp: '0'; accepted: an integer from 1 to 1024")),
    ("bench --m 1048576 --n 262144 --k 262144", "exit 2: error: size: ... needs about N GiB; the limit here is M GiB",
     _error(["bench", "--m", "1048576", "--n", "262144", "--k", "262144"], r"needs about [\d.]+ GiB; the limit here is [\d.]+ GiB")),
    ("bench --out <a directory>", "exit 2: error: --out: ... is a directory (before any timing)",
     _error(["bench", "--n", "32", "--k", "64", "--group", "32", "--out", tempfile.gettempdir()], r"--out: .* is a directory")),
    ("bench --out /dev/null/x.json", "exit 2: error: --out: cannot write under '/dev/null'",
     _error(["bench", "--n", "32", "--k", "64", "--group", "32", "--out", "/dev/null/x.json"], r"cannot write under '/dev/null'")),
    ("bench --n 10^100", "exit 2: error: argument --n: ...; accepted: an integer from 1 to 2147483647",
     _error(["bench", "--n", HUGE], r"--n: .*accepted: an integer from 1 to 2147483647")),
    ("bench --m ''", "exit 2: error: --m: empty; accepted: comma-separated integers",
     _error(["bench", "--m", ""], r"--m: empty")),
    ("bench --m 1,-4", "exit 2: error: --m: '-4'; accepted: an integer from 1 to 1048576",
     _error(["bench", "--m", "1,-4"], r"--m: '-4'; accepted: an integer from 1 to 1048576")),
    ("bench --max-call-s nan", "exit 2: error: argument --max-call-s: 'nan'; accepted: a number above 0",
     _error(["bench", "--max-call-s", "nan"], r"'nan'; accepted: a number above 0")),
    ("bench --layer o_proj (no --model)", "exit 2: error: --layer: given without --model",
     _error(["bench", "--layer", "o_proj"], r"--layer: given without --model")),
    ("trace --mp-config weight_type int3", "exit 2: error: mp_config.weight_type: unknown weight type 'int3'; accepted: vLLM's scalar_types uint2, ...",
     _error(["trace", "--mp-config", json.dumps({**MP, "weight_type": "int3"})],
            r"weight_type: unknown weight type 'int3'; accepted: vLLM's scalar_types uint2, uint3, int4, .*uint8b128")),
    ("trace --mp-config weight_type uint4b7", "exit 2: error: mp_config.weight_type: unknown weight type 'uint4b7'",
     _error(["trace", "--mp-config", json.dumps({**MP, "weight_type": "uint4b7"})], r"unknown weight type 'uint4b7'; accepted")),
    ("trace --mp-config weight_type bfloat16", "ok: exit 0 (vLLM's colloquial name for float16_e8m7)",
     _ok(["trace", "--mp-config", json.dumps({**MP, "weight_type": "bfloat16"}), "--json"])),
    ("trace --mp-config out_type int3", "exit 2: error: mp_config.out_type: unknown dtype 'int3'; accepted: torch dtypes float32, ...",
     _error(["trace", "--mp-config", json.dumps({**MP, "out_type": "int3"})], r"out_type: unknown dtype 'int3'; accepted: torch dtypes float32")),
    ("trace --mp-config partition [8192, 8192] of full [4096, 4096]", "ok: exit 0, traced as vLLM selects; warning: ... is larger than the full shape: no TP split produces it",
     _warns(["trace", "--mp-config", json.dumps({**MP, "full_weight_shape": [4096, 4096], "partition_weight_shape": [8192, 8192]})],
            "partition [8192, 8192] of full [4096, 4096] is larger than the full shape: no TP split produces it")),
    ("trace --mp-config partition [4096, 3000] of full [4096, 4096]", "ok: exit 0, traced as vLLM selects; warning: ... does not divide the full shape",
     _warns(["trace", "--mp-config", json.dumps({**MP, "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 3000]})],
            "partition [4096, 3000] of full [4096, 4096] does not divide the full shape: no TP split produces it")),
    ("trace --mp-config partition [2048, 2048] of full [4096, 4096]", "ok: exit 0, traced as vLLM selects; warning: ... splits both K and N",
     _warns(["trace", "--mp-config", json.dumps({**MP, "full_weight_shape": [4096, 4096], "partition_weight_shape": [2048, 2048]})],
            "partition [2048, 2048] of full [4096, 4096] splits both K and N, but tensor parallelism splits one of them: no TP split")),
    ("trace --mp-config partition [4096, 1024] of full [4096, 4096]", "ok: exit 0 (column parallel, TP 4)",
     _ok(["trace", "--mp-config", json.dumps({**MP, "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 1024]}), "--json"])),
    ("trace --platform capability 1000000000", "exit 2: error: platform.capability: got 1000000000; accepted: null or an integer from 10 to 199",
     _error(["trace", "--mp-config", json.dumps(MP), "--platform", '{"preset": "sm90-h200", "capability": 1000000000}'],
            r"capability: got 1000000000; accepted: null or an integer from 10 to 199")),
    ("trace --platform capability 0", "exit 2: error: platform.capability: got 0; accepted: ... from 10 to 199",
     _error(["trace", "--mp-config", json.dumps(MP), "--platform", '{"preset": "sm90-h200", "capability": 0}'],
            r"capability: got 0; accepted: null or an integer from 10")),
    ("bench --m 0", "exit 2: error: --m: '0'; accepted: an integer from 1 to 1048576 (before any timing)",
     _error(["bench", "--m", "0", "--n", "32", "--k", "64", "--group", "32"], r"--m: '0'; accepted: an integer from 1 to 1048576")),
    ("bench --m 1,,2", "exit 2: error: --m: '1,,2' has an empty entry (entry 2)",
     _error(["bench", "--m", "1,,2", "--n", "32", "--k", "64", "--group", "32"], r"--m: '1,,2' has an empty entry \(entry 2\)")),
    ("predict --m 1,,2", "exit 2: error: --m: '1,,2' has an empty entry (entry 2)",
     _error(["predict", "--n", "4096", "--k", "4096", "--m", "1,,2"], r"--m: '1,,2' has an empty entry \(entry 2\)")),
    ("predict --m 99999999999", "exit 2: error: --m: '99999999999'; accepted: an integer from 1 to 1048576",
     _error(["predict", "--n", "4096", "--k", "4096", "--m", "99999999999"], r"--m: '99999999999'; accepted: an integer from 1 to 1048576")),
    ("predict --m 1,", "exit 2: error: --m: '1,' has an empty entry (entry 2)",
     _error(["predict", "--n", "4096", "--k", "4096", "--m", "1,"], r"--m: '1,' has an empty entry \(entry 2\)")),
    ("bench --paths w4a8_native,,int8_mm", "exit 2: error: --paths: ... has an empty entry (entry 2)",
     _error(["bench", "--paths", "w4a8_native,,int8_mm", "--n", "32", "--k", "64", "--group", "32"], r"--paths: .* has an empty entry \(entry 2\)")),
    ("predict --paths selected,", "exit 2: error: --paths: 'selected,' has an empty entry (entry 2)",
     _error(["predict", "--n", "4096", "--k", "4096", "--paths", "selected,"], r"--paths: 'selected,' has an empty entry")),
    ("predict --group 0", "exit 2: error: argument --group: '0'; accepted: an integer from 1 to 2147483647 or -1",
     _error(["predict", "--n", "4096", "--k", "4096", "--group", "0"], r"--group: '0'; accepted: an integer from 1 to 2147483647 or -1")),
    ("report Llama-3.1-8B --prefill-m 99999999999", "exit 2: error: argument --prefill-m: '99999999999'; accepted: an integer from 1 to 1048576 (was a 1.8e12 us total)",
     _error(["report", "Llama-3.1-8B", "--prefill-m", "99999999999"], r"--prefill-m: '99999999999'; accepted: an integer from 1 to 1048576")),
    ("report Llama-3.1-8B --tp 10^100", "exit 2: error: argument --tp: ...; accepted: an integer from 1 to 1024",
     _error(["report", "Llama-3.1-8B", "--tp", HUGE], r"--tp: .*accepted: an integer from 1 to 1024")),
    ("trace --batch FILE | head -1", "ok: exit 0, nothing on stderr (no BrokenPipeError)", _closed_pipe),
]


@pytest.mark.parametrize("row", CATALOG, ids=[row[0] for row in CATALOG])
def test_cli_catalog(row):
    row[2]()
