"""The three notebooks: committed stripped, executed headless top to bottom, widgets wired.

Execution uses nbclient with a kernel spec that points at this interpreter, so a fresh venv
needs no `ipykernel install` step. `WORKBENCH_NOTEBOOK_SMALL=1` keeps each run short.
"""
from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = ("01_dispatch_trace.ipynb", "02_w4a8_vs_w4a16.ipynb", "03_alignment_and_tp.ipynb")
# The budget is 2 minutes per notebook on a 2-core machine, in small mode.
BUDGET_S = 120

# Text each executed notebook must show: conclusions computed by the notebook from the core.
EXPECTED_TEXT = {
    "01_dispatch_trace.ipynb": [
        "H200, humming installed (standard CUDA install): 2 candidates reject before HummingLinearKernel accepts",
        "H200, humming not installed: all 7 candidates reject: ValueError",
        "x86 with and without AMX: the same kernel, Dynamic4bitLinearKernel",
        "Arm, without the op: ValueError",
        "Intel XPU: XPUW4A8IntLinearKernel; activations INT8 per token (real W4A8)",
        "Failed to find a kernel that can implement the WNA16 linear layer. Reasons: ",
        "Only bfloat16 output type currently supportedgot c.out_type=torch.float16",
        "Reasons that mention activations: 0.",
    ],
    "02_w4a8_vs_w4a16.ipynb": [
        "**Measured here:** W4A8 ",  # "first beats ... at M = m" or "never beats ..."
        "slower than the W4A16 fallback",
        "quantizing activations to INT8 per token adds a relative error of",
        "W4A8 matches its own float64 math to",
        "H200 results: NVIDIA H200",  # benchmarks/results/h200_bench.json, committed
    ],
    "03_alignment_and_tp.ipynb": [
        "shards fail on every platform with ValueError: their K is not a whole number of 128-wide groups",
        "Without humming those shards go to MarlinLinearKernel",
        "Weight input_size_per_partition=14784 for layer 'model.layers.0.mlp.down_proj' is not divisible "
        "by group_size=128.",
        "Qwen2.5-72B TP2 down_proj (K 14784), W4A8 group -1: Dynamic4bitLinearKernel",
        "Padded outputs equal the unpadded ones: True",
    ],
}


def _load_strip_tool():
    spec = importlib.util.spec_from_file_location("strip_outputs", NB_DIR / "strip_outputs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load_widgets():
    sys.path.insert(0, str(NB_DIR))
    try:
        import _widgets
    finally:
        sys.path.remove(str(NB_DIR))
    return _widgets


# --------------------------------------------------------------------------- stripped in git


def test_the_three_notebooks_are_there():
    assert sorted(p.name for p in NB_DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", sorted(p.name for p in NB_DIR.glob("*.ipynb")))
def test_committed_notebook_is_stripped(name):
    nb = json.loads((NB_DIR / name).read_text(encoding="utf-8"))
    found = _load_strip_tool().unstripped(nb)
    assert not found, f"{name} holds outputs; run `python notebooks/strip_outputs.py`: {found}"
    # The check itself must see outputs, counts and widget state when they are there.
    dirty = json.loads(json.dumps(nb))
    code = next(c for c in dirty["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x"}]
    code["execution_count"] = 3
    dirty["metadata"]["widgets"] = {"state": {}}
    assert len(_load_strip_tool().unstripped(dirty)) == 3
    assert _load_strip_tool().unstripped(_load_strip_tool().strip(dirty)) == []


# --------------------------------------------------------------------------- execution


def _execute(name: str, tmp_path: Path, monkeypatch, *, static: bool) -> dict:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    # A kernel spec for this interpreter, found ahead of any other "python3" spec.
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "workbench test kernel", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("WORKBENCH_NOTEBOOK_SMALL", "1")
    if static:
        monkeypatch.setenv("WORKBENCH_NOTEBOOK_STATIC", "1")
    else:
        monkeypatch.delenv("WORKBENCH_NOTEBOOK_STATIC", raising=False)
    nb = nbformat.read(NB_DIR / name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=BUDGET_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(NB_DIR)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError with the failing cell's traceback
    elapsed = time.perf_counter() - start
    assert elapsed < BUDGET_S, f"{name} took {elapsed:.0f} s in small mode"
    return nb


def _texts(nb: dict) -> str:
    parts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                parts.append(out["text"])
            elif out["output_type"] in ("display_data", "execute_result"):
                data = out["data"]
                parts.append(data.get("text/markdown") or data.get("text/plain", ""))
    return "\n".join(parts)


# 01 runs with live widgets (a real kernel, as in Jupyter), 02 and 03 as a page viewer would
# show them (static output); both paths of the panel helper run inside a kernel.
LIVE = {"01_dispatch_trace.ipynb"}


@pytest.mark.parametrize("name", [n for n in NOTEBOOKS if (NB_DIR / n).exists()])
def test_notebook_runs_headless(name, tmp_path, monkeypatch):
    live = name in LIVE
    nb = _execute(name, tmp_path, monkeypatch, static=not live)
    errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors
    text = _texts(nb)
    if name.startswith("02"):  # what vLLM picks on this very machine, as the core says
        from workbench.checkpoints import trace_checkpoint_layer

        t = trace_checkpoint_layer(ROOT / "sample_models" / "ct-w4a8-int-g128",
                                   "model.layers.0.mlp.down_proj", "host")
        assert f"{t.scheme} -> {t.selected or t.error_type}" in text
    for expected in EXPECTED_TEXT.get(name, []):
        assert expected in text, f"{name}: expected {expected!r} in its outputs"
    views = "application/vnd.jupyter.widget-view+json" in json.dumps(nb["cells"])
    if live:
        # The panel drew controls, and its Output widget holds the default rendering.
        assert views and "Static output" not in text
        state = json.dumps(nb["metadata"].get("widgets", {}))
        assert "OutputModel" in state and "HummingLinearKernel" in state
    else:
        # Degraded: the defaults rendered as plain output, no widget a viewer could not draw.
        assert "Static output (no live kernel)" in text and not views


# --------------------------------------------------------------------------- widgets


def test_dispatch_panel_retraces_when_controls_change():
    pytest.importorskip("ipywidgets")
    nbw = _load_widgets()
    from workbench.dispatch import trace_mp

    c1 = {"weight_type": "int4", "act_type": "bfloat16", "group_size": 128, "zero_points": False,
          "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 4096]}

    def render(**values):
        t = trace_mp(c1, nbw.platform_from_values(**values), nbw.env_from_values(**values))
        return [t.selected or t.error_type]

    p = nbw.panel(nbw.dispatch_controls("sm90-h200"), render, display_now=False)
    p.widget()  # creates the Output and hooks the controls
    nbw.link_preset(p)
    assert p.refresh() == ["HummingLinearKernel"]
    assert len(p.output.outputs) == 1
    p.controls["packages"].value = ()  # uninstall humming from the simulated H200
    assert p.last == ["ValueError"]
    p.controls["preset"].value = "xpu"  # the preset brings its own packages and ops
    assert p.controls["torch_ops"].value == ("aten._dyn_quant_matmul_4bit", "_xpu_C.int4_gemm_w4a8")
    assert p.last == ["XPUW4A8IntLinearKernel"]
    p.controls["preset"].value = "arm-kleidiai"
    assert p.last == ["Dynamic4bitLinearKernel"]
    p.controls["torch_ops"].value = ()  # no KleidiAI op on this Arm torch
    assert p.last == ["ValueError"]
    p.controls["preset"].value = "x86-avx512"
    p.controls["disabled"].value = ("Dynamic4bitLinearKernel",)
    assert p.last == ["ValueError"]
    assert [o["data"]["text/markdown"] for o in p.output.outputs] == ["ValueError"]


def test_panel_shows_a_user_error_instead_of_raising():
    pytest.importorskip("ipywidgets")
    nbw = _load_widgets()

    def render(marlin_input_dtype, **_):
        from workbench.dispatch import parse_env

        from workbench.dispatch.versions import available

        # vLLM validates the choice lazily, on first read: so does the workbench's Env (the
        # first release's, which still reads the variable).
        return [parse_env({"VLLM_MARLIN_INPUT_DTYPE": "int4"}, available()[0]).marlin_input_dtype]

    p = nbw.panel(nbw.dispatch_controls("sm90-h200"), render, display_now=False)
    out = p.refresh()
    assert out[0].startswith("**EnvChoiceError:** Invalid value 'int4' for VLLM_MARLIN_INPUT_DTYPE")


def test_env_and_platform_from_controls():
    nbw = _load_widgets()
    assert nbw.env_from_values() == {}
    assert nbw.env_from_values(disabled=("A", "B"), linear_backend="marlin", cpu_int4_w4a8=False,
                               marlin_input_dtype="int8") == {
        "VLLM_DISABLED_KERNELS": "A,B", "linear_backend": "marlin", "VLLM_CPU_INT4_W4A8": "0",
        "VLLM_MARLIN_INPUT_DTYPE": "int8"}
    from workbench.platforms import PRESETS

    same = nbw.platform_from_values("sm90-h200", ("humming",), ("aten._dyn_quant_matmul_4bit",), False)
    assert same == PRESETS["sm90-h200"]
    edited = nbw.platform_from_values("x86-avx512", (), ("aten._dyn_quant_matmul_4bit",), True)
    assert edited.amx and edited.name == "x86-avx512*" and edited.cpu_arch == "x86"


def test_dispatch_controls_carry_the_vllm_version_into_the_trace():
    nbw = _load_widgets()
    from workbench.dispatch import trace_mp
    from workbench.dispatch.versions import DEFAULT_VERSION, VERSIONS

    c1 = {"weight_type": "int4", "act_type": "bfloat16", "group_size": 128, "zero_points": False,
          "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 4096]}

    def render(version, **values):
        t = trace_mp(c1, nbw.platform_from_values(**values), nbw.env_from_values(**values),
                     rules=version)
        return [t.vllm_version]

    p = nbw.panel(nbw.dispatch_controls("sm90-h200"), render, display_now=False)
    assert p.controls["version"].value == DEFAULT_VERSION
    if hasattr(p.controls["version"], "options"):  # ipywidgets: the versions with a rule set
        assert tuple(p.controls["version"].options) == VERSIONS
    assert p.refresh() == [DEFAULT_VERSION]
    p.controls["version"] = nbw._Value("0.1.0")  # no rule set: the panel says so, by name
    assert "no rule set for '0.1.0'" in p.refresh()[0]
