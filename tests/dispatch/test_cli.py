"""The `python -m workbench` dispatch commands: `main(argv)` with captured output (the
process-level behaviour, `-m`, stdin and pipes, is in tests/cli/)."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from types import SimpleNamespace

import pytest

from workbench.__main__ import main

C1 = {"weight_type": "int4", "act_type": "bfloat16", "group_size": 128, "zero_points": False,
      "out_type": None, "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 4096]}


def cli(*args: str) -> SimpleNamespace:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(args))
    return SimpleNamespace(returncode=rc, stdout=out.getvalue(), stderr=err.getvalue())


def test_trace_mp_json_keys_and_values():
    r = cli("trace", "--mp-config", json.dumps(C1), "--platform", "sm90-h200", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"scheme", "steps", "selected", "error", "reasons", "error_type"} <= set(out)
    assert out["selected"] == "HummingLinearKernel" and out["scheme"] is None
    assert [s["outcome"] for s in out["steps"]] == ["rejected", "rejected", "selected"]


def test_trace_env_and_platform_json_override():
    r = cli("trace", "--mp-config", json.dumps(C1), "--platform",
            '{"preset": "sm90-h200", "packages": []}', "--env", "VLLM_DISABLED_KERNELS=MacheteLinearKernel",
            "--json")
    out = json.loads(r.stdout)
    assert out["error_type"] == "ValueError"
    assert " MacheteLinearKernel disabled by environment variable" in out["reasons"]


def test_batch_preserves_order_and_reports_bad_lines(tmp_path):
    lines = [{"mp_config": C1, "platform": "x86-avx512"},
             {"scheme": {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
                         "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True},
                         "format": "int-quantized", "layer_name": "l", "in_features": 4096,
                         "out_features": 4096, "params_dtype": "bfloat16"}, "platform": "xpu"},
             {"mp_config": {**C1, "weight_type": "int99x"}, "platform": "xpu"},
             {"mp_config": C1, "platform": "arm-no-dyn-quant", "env": {}}]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    r = cli("trace", "--batch", str(path), "--json")
    outs = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(outs) == 4 and r.returncode == 2
    assert outs[0]["selected"] == "Dynamic4bitLinearKernel"
    assert (outs[1]["scheme"], outs[1]["selected"]) == ("CompressedTensorsW4A8Int", "XPUW4A8IntLinearKernel")
    assert outs[1]["kernel"]["candidates"] == ["XPUW4A8IntLinearKernel", "XPUwNa16LinearKernel"]
    assert "weight_type" in outs[2]["input_error"]
    assert outs[3]["error_type"] == "ValueError"


@pytest.mark.parametrize("args,field", [
    (["--mp-config", json.dumps({**C1, "weight_type": "int5q"})], "weight_type"),
    (["--mp-config", json.dumps({**C1, "group_size": -8})], "group_size"),
    (["--mp-config", json.dumps({**C1, "full_weight_shape": [4096, 4096, 2]})], "full_weight_shape"),
    (["--mp-config", json.dumps(C1), "--platform", "sm99-imaginary"], "platform"),
    (["--mp-config", "{not json"], "--mp-config"),
    (["--mp-config", json.dumps(C1), "--env", "NOEQUALS"], "--env"),
])
def test_bad_input_exits_nonzero_with_one_line_naming_the_field(args, field):
    r = cli("trace", *args, "--json")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in r.stderr


def test_platforms_and_matrix_json():
    plats = json.loads(cli("platforms", "--json").stdout)
    names = {p["name"] for p in plats}
    assert {"sm70-v100", "sm90-h200", "rocm-mi300x", "rocm-rdna3", "x86-avx2", "x86-avx512",
            "x86-spr-amx", "zen4-zentorch", "arm-kleidiai", "arm-no-dyn-quant", "riscv", "xpu"} <= names
    matrix = json.loads(cli("matrix", "--json").stdout)
    w4a8 = next(r for r in matrix["rows"] if r["implementation"] == "llm-compressor INT8 (W4A8)")
    x86 = next(c for c in w4a8["cells"] if c["hardware"] == "x86 CPU")
    assert x86["docs"] is False and x86["code"] is True and x86["disagrees"]
    assert x86["selected"] == "Dynamic4bitLinearKernel" and x86["fails_at"] is None
    # where vLLM fails (issue 24.8): AWQ is selected on Arm, and fails at its first forward
    awq = next(r for r in matrix["rows"] if r["implementation"] == "AWQ")
    assert next(c for c in awq["cells"] if c["hardware"] == "Arm CPU")["fails_at"] == "forward"
    table = cli("matrix").stdout
    assert "N/yF!" in next(line for line in table.splitlines() if line.startswith("AWQ "))
