"""Model report page: the summary line reads as prose (bold where meant, µs as on the other pages)."""
from __future__ import annotations

import re


def test_the_summary_is_markdown_not_literal_asterisks(ui):
    # Issue 24.3: the whole line was escaped, so the reader saw `**Llama-3.1-8B**` and "us".
    at = ui.open_app("report", state={"report.source": "Llama-3.1-8B"})
    assert not at.exception and not ui.errors(at)
    line = next(m.value for m in at.markdown if " per forward" in m.value)
    assert line.startswith("**Llama\\-3\\.1\\-8B** on **x86\\-avx512**, TP 1\\: decode ")
    # escaped punctuation aside, no asterisk is shown as typed
    assert "\\*" not in line
    shown = ui.unplain(line)
    unit = r"[\d.]+ (?:µs|ms|s)"  # scaled to a unit that reads (issue 34.11)
    assert re.search(rf"decode {unit} \({unit} to {unit}\), prefill {unit}", shown), shown
    assert not re.search(r"\d us\b", shown), shown


def test_this_machine_is_not_calibrated_unasked(ui, tmp_path, monkeypatch):
    # The page costed every layer on this machine, so opening it started a calibration that
    # ran past two minutes on a loaded machine; like the Kernels page it now offers one.
    from workbench.perf import cpu

    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path))
    cpu.host_calibration.cache_clear()
    at = ui.open_app("report", state={"pf.preset": "host", "report.source": "Llama-3.1-8B"})
    assert not at.exception and not ui.errors(at)
    assert "This machine is not calibrated yet" in ui.text(at)
    assert [b.label for b in at.button] == ["Calibrate this machine"]
    assert not list(tmp_path.rglob("host-*.json"))  # nothing was measured
    assert not any(" per forward" in m.value for m in at.markdown)


def test_the_comparison_names_a_winner_per_platform_and_phase(ui):
    # Issue 34.1: the page had one scheme's total; the question is W4A8 against W4A16.
    at = ui.open_app("report", state={"report.source": "Llama-3.1-8B", "pf.preset": "sm90-h200",
                                      "report.platforms": ["sm90-h200", "x86-spr-amx"]})
    assert not at.exception and not ui.errors(at)
    text = ui.text(at)
    assert "W4A8 against W4A16, side by side" in text
    for where in ("on sm90-h200 at decode", "on sm90-h200 at prefill", "on x86-spr-amx at decode"):
        assert where in text
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["report.csv", "report.json", "comparison.csv", "comparison.json"]
    # totals in a unit that reads, never a nine-digit µs figure
    assert not re.search(r"\d{7,}(\.\d)? µs", text), text


def test_each_layer_says_what_changes_under_the_other_release(ui, monkeypatch):
    from workbench.dispatch.versions import available

    old, new = available()[0], available()[-1]
    col = f"vs vLLM {old}"
    # the W4A8 Llama preset loads on the same kernels under both releases on every preset
    at = ui.open_app("report", state={"report.source": "Llama-3.1-8B", "pf.preset": "sm80-a100",
                                      "vllm.version": new, "report.upgrade": True})
    assert not at.exception and not ui.errors(at)
    assert (at.dataframe[0].value[col] == "no change").all()
    # where a layer's kernel or activation differs, older -> newer whichever is shown
    from workbench.ui.views import report

    older = {"json": {"layers": [{"layer": "qkv_proj", "kernel": "MarlinLinearKernel", "computes": "w4a8"},
                                 {"layer": "o_proj", "kernel": "HummingLinearKernel", "computes": "w4a16"}]}}
    monkeypatch.setattr(report, "_report", lambda *a: older)
    monkeypatch.setattr("workbench.dispatch.versions.available", lambda: (old, new))
    rows = [{"layer": "qkv_proj", "kernel": "HummingLinearKernel", "computes": "w4a16"},
            {"layer": "o_proj", "kernel": "HummingLinearKernel", "computes": "w4a16"}]
    report._flag_upgrade(rows, "Llama-3.1-8B", "sm80-a100", 1, 1, 2048, new)
    assert rows[0][col] == "kernel: MarlinLinearKernel -> HummingLinearKernel; computes: w4a8 -> w4a16"
    assert rows[1][col] == "no change"


def test_a_calibration_that_crashes_is_named_and_the_page_goes_on(ui, tmp_path, monkeypatch):
    # Issue 34.7: "Calibrate this machine" on an AMX host took the server down. It runs in the
    # session's child process; a real abort there (planted) is said, nothing is cached, and the
    # button works again (a fresh child).
    from workbench.contained import PLANT_ENV
    from workbench.perf import cpu

    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(PLANT_ENV, "abort:calibration")
    cpu.host_calibration.cache_clear()
    at = ui.open_app("report", state={"pf.preset": "host", "report.source": "Llama-3.1-8B"})
    for attempt in (1, 2):
        at.button(key="pred-calibrate").click().run(timeout=300)
        assert not at.exception
        assert ui.errors(at) == [
            "This machine's calibration crashed with SIGABRT (in a child process: nothing else ended). Start "
            "the app with W4A8_KERNELS_MAX_ISA=avx512 (or avx2) to keep the native engines off their widest "
            "instructions, and calibrate again."]
        assert at.session_state["measure.worker"].starts == attempt
        assert [b.label for b in at.button] == ["Calibrate this machine"]
        assert not list(tmp_path.rglob("host-*.json"))
