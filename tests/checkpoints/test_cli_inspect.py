"""`python -m workbench inspect`: the listing as text and JSON."""
from __future__ import annotations

import json
import subprocess
import sys

from workbench.__main__ import main


def test_inspect_json_lists_layers_with_resolved_scheme(tools, capsys):
    assert main(["inspect", str(tools.samples / "ct-w4a8-int-g128"), "--json", "--platform", "x86-avx512"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["format"] == "compressed-tensors" and out["platform"] == "x86-avx512"
    layers = {layer["name"]: layer for layer in out["layers"]}
    down = layers["model.layers.0.mlp.down_proj"]
    assert (down["in_features"], down["out_features"], down["group_size"]) == (1024, 256, 128)
    assert down["ct_format"] == "int-quantized" and down["input_args"]["strategy"] == "token"
    assert down["resolved"] == {"scheme": "CompressedTensorsW4A8Int", "kernel": "Dynamic4bitLinearKernel",
                                "error": None}
    assert len(layers) == 7


def test_inspect_text_at_tp2_shows_the_misalignment(tools, capsys):
    assert main(["inspect", str(tools.samples / "ct-w4a8-int-intermediate-1152"), "--tp", "2"]) == 0
    text = capsys.readouterr().out
    down = next(line for line in text.splitlines() if line.startswith("model.layers.0.mlp.down_proj"))
    assert "ValueError" in down and "576" in down


def test_inspect_without_scheme_column(tools, capsys):
    assert main(["inspect", str(tools.samples / "gptq-w4a16-g128"), "--no-scheme"]) == 0
    text = capsys.readouterr().out
    assert "gptq" in text.splitlines()[0] and "kernel" not in text.splitlines()[1]


def test_inspect_runs_as_a_module(tools):
    proc = subprocess.run([sys.executable, "-m", "workbench", "inspect", str(tools.samples / "nope")],
                          capture_output=True, text=True, cwd=tools.repo)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
