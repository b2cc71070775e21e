"""Docs versus code page: the documented table beside the computed one, each disagreement traced."""
from __future__ import annotations

from workbench.dispatch.versions import DEFAULT_VERSION


def test_matrix_and_disagreements(ui):
    from workbench.dispatch.docs_matrix import compute_matrix

    expected = sum(c["disagrees"] for r in compute_matrix() for c in r["cells"])
    at = ui.open_app("docs")
    assert ui.plotly_count(at) == 1
    shown = ui.text(at)
    assert f"{expected} disagreement(s), each explained by its trace" in shown
    label = "llm-compressor INT8 (W4A8) on x86 CPU (x86-avx512): docs NO, code YES"
    assert label in shown
    # each disagreement carries its trace: here the CPU list's first candidate is selected
    assert "Docs say NO, but the code selects CompressedTensorsW4A8Int -> Dynamic4bitLinearKernel" in shown
    table = next(d.value for d in at.dataframe)
    row = table.set_index("implementation").loc["llm-compressor INT8 (W4A8)"]
    assert row["x86 CPU"] == "NO / YES ≠"
    # the only red boxes are vLLM's own outcomes inside disagreement traces (GPTQ on Volta)
    assert all(e.startswith(f"No kernel: vLLM {DEFAULT_VERSION} raises") for e in ui.errors(at))


def test_env_knobs_reach_the_matrix(ui):
    # With Dynamic4bit disabled, x86 W4A8 falls through to CPUWNA16, which rejects int4: docs agree.
    at = ui.open_app("docs", state={"env.VLLM_DISABLED_KERNELS": "Dynamic4bitLinearKernel"})
    assert "llm-compressor INT8 (W4A8) on x86 CPU" not in ui.text(at)
    table = next(d.value for d in at.dataframe)
    assert table.set_index("implementation").loc["llm-compressor INT8 (W4A8)", "x86 CPU"] == \
        "NO / NO, fails at selection"


def test_docs_columns_and_rows_come_from_the_core():
    # One mapping, in the core: every preset of a documented column maps back to that column.
    from workbench.dispatch.docs_matrix import HARDWARE_PRESET, hardware_column
    from workbench.platforms import get_preset

    for column, preset in HARDWARE_PRESET.items():
        assert hardware_column(get_preset(preset)) == column
    assert hardware_column(get_preset("sm86-a10")) == "Ampere"
    assert hardware_column(get_preset("sm100-b200")) is None  # the table has no Blackwell column
    assert hardware_column(get_preset("riscv")) is None


def test_a_selected_kernel_that_fails_says_where(ui):
    # Issue 24.8: AWQ / GPTQ on Arm read "code YES", though vLLM fails at their first forward.
    from workbench.dispatch.docs_matrix import compute_matrix

    cells = {(r["implementation"], c["hardware"]): c for r in compute_matrix() for c in r["cells"]}
    for row in ("AWQ", "GPTQ"):
        assert cells[row, "Arm CPU"]["selected"] == "CPUWNA16LinearKernel"
        assert cells[row, "Arm CPU"]["fails_at"] == "forward"  # the trace's runtime value
        assert cells[row, "x86 CPU"]["fails_at"] is None
    assert cells["GPTQ", "Volta"]["fails_at"] == "selection"
    at = ui.open_app("docs")
    table = next(d.value for d in at.dataframe).set_index("implementation")
    assert table.loc["AWQ", "Arm CPU"] == "NO / YES (W4A16), fails at first forward ≠"
    assert table.loc["GPTQ", "Volta"] == "YES / NO, fails at selection ≠"
    assert table.loc["AWQ", "x86 CPU"] == "YES / YES (W4A16)"
    assert "AWQ on Arm CPU (arm-kleidiai): docs NO, code YES (fails at first forward)" in ui.text(at)
    fig = next(__import__("json").loads(c.proto.spec) for c in at.get("plotly_chart"))
    assert any("fails at first forward" in cell for line in fig["data"][0]["text"] for cell in line)
