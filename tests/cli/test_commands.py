"""What each command prints, as a user runs it: batch format and example, closed pipes,
platform rows, inspect at TP > 1, bench's error references and size guard."""
from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from workbench.__main__ import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "trace_batch.jsonl"
SAMPLES = REPO / "sample_models"


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def subprocess_cli(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *argv], capture_output=True, text=True,
                          input=stdin, timeout=120, cwd=REPO)


# --------------------------------------------------------------------------- trace --batch

def test_example_batch_file_traces_every_line_in_order_with_its_id():
    lines = [json.loads(x) for x in EXAMPLE.read_text().splitlines() if x.strip()]
    rc, out, err = run_cli("trace", "--batch", str(EXAMPLE))
    outs = [json.loads(x) for x in out.splitlines()]
    assert rc == 0 and err == ""
    assert [o["id"] for o in outs] == [c["id"] for c in lines]
    assert not any("input_error" in o for o in outs)
    assert outs[0]["selected"] == "HummingLinearKernel"
    assert outs[1]["selected"] == "Dynamic4bitLinearKernel"


def test_batch_format_is_documented_where_the_user_looks():
    p = subprocess_cli("trace", "--help")
    rc, out = p.returncode, p.stdout
    readme = (REPO / "README.md").read_text()
    assert rc == 0
    for key in ('"mp_config"', '"scheme"', '"inc"', '"platform"', '"env"', '"id"', "input_error",
                "examples/trace_batch.jsonl"):
        assert key in out, key
        assert key in readme, key
    # every key the example uses is one the parser documents and accepts
    from workbench.cli.trace import CASE_KINDS, CASE_OPTIONAL
    used = {k for line in EXAMPLE.read_text().splitlines() if line.strip() for k in json.loads(line)}
    assert used <= set(CASE_KINDS) | set(CASE_OPTIONAL)


def test_a_bad_batch_line_is_its_own_input_error_and_the_batch_goes_on():
    good = EXAMPLE.read_text().splitlines()[0]
    text = "\n".join(["5", "[" * 3000 + "]" * 3000, good, '{"scheme": "str"}',
                      '{"mp_config": {}, "platfrom": "xpu"}', "x" * 10, good]) + "\n"
    p = subprocess_cli("trace", "--batch", "-", stdin=text)
    outs = [json.loads(x) for x in p.stdout.splitlines()]
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.count("error:") == 1 and "line 1, 2, 4, 5, 6" in p.stderr
    assert [o.get("line") for o in outs] == [1, 2, None, 4, 5, 6, None]
    assert "got a number" in outs[0]["input_error"] and "nested" in outs[1]["input_error"]
    assert "case.scheme: expected a JSON object" in outs[3]["input_error"]
    assert "platfrom" in outs[4]["input_error"]  # a misspelt key is refused, not ignored
    assert outs[2]["selected"] == outs[6]["selected"] == "HummingLinearKernel"


def test_batch_lines_take_the_command_platform_unless_they_name_one(tmp_path):
    case = {"mp_config": json.loads(EXAMPLE.read_text().splitlines()[2])["mp_config"]}
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps(case) + "\n" + json.dumps({**case, "platform": "sm90-h200"}) + "\n")
    rc, out, _ = run_cli("trace", "--batch", str(path), "--platform", "arm-kleidiai")
    first, second = (json.loads(x) for x in out.splitlines())
    from workbench.dispatch import trace_mp
    assert rc == 0 and first["selected"] == "Dynamic4bitLinearKernel"
    assert second["selected"] == trace_mp(case["mp_config"], "sm90-h200").selected != first["selected"]


def test_closed_stdout_ends_the_command_quietly(tmp_path):
    big = tmp_path / "big.jsonl"
    big.write_text(EXAMPLE.read_text() * 60)  # far more output than a pipe buffers
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "trace", "--batch", str(big)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == ""


# --------------------------------------------------------------------------- trace, other sources

def test_inc_without_group_size_fails_to_load_as_vllm_does():
    # INCConfig.from_config: get_from_keys(config, ["group_size"]) has no default (inc/inc.py:279)
    rc, out, _ = run_cli("trace", "--inc", '{"bits": 4}', "--platform", "xpu", "--json")
    t = json.loads(out)
    assert rc == 0 and t["selected"] is None and t["error_type"] == "ValueError"
    assert t["error"] == "Cannot find any of ['group_size'] in the model's quantization config."


def test_checkpoint_layer_is_sharded_the_way_vllm_builds_it():
    down = "model.layers.0.mlp.down_proj"  # row-parallel: TP 2 splits K = 1152 into 576
    rc, out, _ = run_cli("trace", "--checkpoint", str(SAMPLES / "ct-w4a8-int-intermediate-1152"),
                         "--layer", down, "--tp", "2", "--json")
    assert rc == 0 and "input_size_per_partition=576" in json.loads(out)["error"]


# --------------------------------------------------------------------------- platforms, inspect

def test_platform_rows_name_the_chip_and_list_isa_flags_and_torch_ops():
    rc, out, _ = run_cli("platforms", "--host")
    rows = {line.split()[0]: line for line in out.splitlines() if not line.startswith(" ")}
    details = dict(zip([line.split()[0] for line in out.splitlines() if not line.startswith(" ")],
                       [line for line in out.splitlines() if line.startswith(" ")]))
    assert rc == 0 and "sm94" not in out and "sm110" not in out
    assert rows["rocm-mi300x"].split()[2] == "gfx942" and rows["sm90-h200"].split()[2] == "sm90"
    assert "isa: avx2 avx512 avx512_vnni avx512_bf16 amx;" in details["x86-spr-amx"]
    assert "_rocm_C.gptq_gemm_rdna3" in details["rocm-rdna3"]
    from workbench.platforms import detect_host
    host = detect_host()
    for op in host.torch_ops:
        assert op in details["host"]
    assert ("avx2" in details["host"]) == host.avx2


def test_inspect_at_tp2_shows_shard_sizes_and_keeps_rows_narrow():
    rc, out, _ = run_cli("inspect", str(SAMPLES / "ct-w4a8-int-intermediate-1152"), "--tp", "2")
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("layer"))
    down = next(line for line in lines if line.startswith("model.layers.0.mlp.down_proj"))
    gate = next(line for line in lines if line.startswith("model.layers.0.mlp.gate_proj"))
    assert rc == 0 and "K/TP2" in header and "N/TP2" in header
    assert down.split()[1:4] == ["row", "576", "256"] and gate.split()[1:4] == ["column", "256", "576"]
    assert max(len(line) for line in lines) <= 200
    assert down.endswith("ValueError [1]")
    note = out[out.index("[1] ValueError"):]
    assert "Consider reducing tensor_parallel_size." in " ".join(note.split())
    rc, out, _ = run_cli("inspect", str(SAMPLES / "ct-w4a8-int-intermediate-1152"), "--tp", "2", "--json")
    layer = next(x for x in json.loads(out)["layers"] if x["name"] == "model.layers.0.mlp.down_proj")
    assert layer["shard"] == {"parallel": "row", "in_features": 576, "out_features": 256}
    assert layer["resolved"]["error"].endswith("Consider reducing tensor_parallel_size.")


@pytest.mark.parametrize("argv,gist", [
    (["--platform", "nope"], "unknown preset 'nope'"),
    (["--tp", "0"], "accepted: an integer from 1 to 1024"),
])
def test_inspect_bad_platform_or_tp_is_one_error_not_one_per_row(argv, gist):
    rc, out, err = run_cli("inspect", str(SAMPLES / "ct-w4a8-int-g128"), *argv)
    assert rc == 2 and out == "" and err.count("\n") == 1 and gist in err


# --------------------------------------------------------------------------- bench

def test_bench_names_the_reference_of_each_error():
    argv = ["bench", "--m", "2", "--n", "32", "--k", "64", "--group", "32", "--repeats", "1",
            "--paths", "w4a16_fallback"]
    rc, out, _ = run_cli(*argv, "--json")
    rec = json.loads(out)
    assert rc == 0 and set(rec["error_references"]) == {"rel_error", "kernel_rel_error"}
    assert "unquantized" in rec["error_references"]["rel_error"]
    assert "reference of the quantized layer" in rec["error_references"]["kernel_rel_error"]
    assert rec["kernel_rel_error"] < rec["rel_error"]  # the kernel is far closer to its reference
    rc, out, _ = run_cli(*argv)
    assert "err vs W" in out and "err vs ref" in out and "unquantized weights" in out
    # every timing table says how far to trust it: the widest band and the load on the cores
    assert re.search(r"noise: widest p80/p20 [\d.]+x \(w4a16_fallback at M = 2\); load [\d.]+ on "
                     r"\d+ core", out)


def test_bench_default_paths_follow_the_platform_chosen():
    from workbench.execution import default_bench_paths
    from workbench.platforms import detect_host

    argv = ["bench", "--m", "1", "--n", "32", "--k", "64", "--group", "32", "--repeats", "1", "--json"]
    rc, out, _ = run_cli(*argv, "--platform", "host-cpu")
    assert rc == 0 and [json.loads(x)["path"] for x in out.splitlines()] == ["w4a8_native",
                                                                             "w4a16_fallback"]
    rc, out, _ = run_cli(*argv)  # host: this machine's GPU where it has one
    assert rc == 0
    assert [json.loads(x)["path"] for x in out.splitlines()] == default_bench_paths(detect_host())
    rc, _, err = run_cli(*argv, "--platform", "sm90-h200")
    assert rc != 0 and "host-cpu" in err


def test_predict_host_cpu_is_this_cpu():
    rc, out, err = run_cli("predict", "--platform", "host-cpu", "--n", "256", "--k", "256",
                           "--m", "1", "--paths", "bf16_dense")
    assert rc == 0, err
    assert "bf16_dense" in out


def test_bench_size_guard_states_the_need_and_the_limit():
    rc, out, err = run_cli("bench", "--m", "1048576", "--n", "262144", "--k", "262144")  # TiB
    assert rc == 2 and out == ""
    assert re.search(r"needs about [\d.]+ GiB; the limit here is [\d.]+ GiB", err)


@pytest.mark.parametrize("n,k,m,paths,measured", [
    # peak RSS above the idle interpreter (GNU time %M), torch 2.13 CPU
    (8192, 4096, 1, 2, 1.084e9), (8192, 4096, 1, 6, 1.432e9),
    (1024, 2048, 16384, 2, 0.420e9), (1024, 2048, 16384, 6, 0.831e9),
    (1024, 1024, 32768, 2, 0.624e9),
])
def test_bench_working_memory_estimate_is_not_below_a_measured_peak(n, k, m, paths, measured):
    from workbench.memory import bench_bytes
    assert measured <= bench_bytes(n, k, m, paths) <= 1.6 * measured
