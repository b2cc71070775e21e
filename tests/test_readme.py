"""README gives exactly two set-up commands, and CI runs the test one verbatim."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_readme_has_exactly_two_setup_commands():
    commands = setup_commands()
    assert len(commands) == 2
    app, tests = commands
    assert "streamlit run app.py" in app and "pytest" in tests
    for command in commands:
        assert "\n" not in command  # one line a newcomer can paste
        assert "torch==2.13.0" in command  # never an unpinned torch


def test_ci_runs_the_readme_test_command_verbatim():
    test_command = setup_commands()[1]
    install_and_run = test_command.split(". .venv/bin/activate && ", 1)[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert install_and_run in ci.splitlines()


def test_readme_lists_the_apps_pages_and_says_what_a_newcomer_needs():
    # Issue 24.10: seven pages with Model report; the set-up command blocks; concrete examples
    # for the placeholders (a real sample and layer); where TP is set.
    from workbench.ui.main import PAGES

    text = (ROOT / "README.md").read_text()
    app = text.split("## The app", 1)[1].split("\n## ", 1)[0]
    assert f"{['One', 'Two', 'Three', 'Four', 'Five', 'Six', 'Seven'][len(PAGES) - 1]} pages" in app
    for _, title, _, _ in PAGES:
        assert f"**{title}**" in app or f"**{title.split(' and ')[0]}" in app, title
    assert "does not return" in text.split("## Set up", 1)[1].split("```bash", 1)[0]
    sample, layer = re.search(r"--checkpoint (sample_models/[\w-]+) \\\n\s+--layer ([\w.]+)", text).groups()
    from workbench.checkpoints import open_checkpoint

    assert layer in open_checkpoint(ROOT / sample).layer_names()
    assert "TP (tensor-parallel size) is `--tp`" in text and "**Alignment** page" in text


def _row(text: str, marker: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith("|") and marker in ln)
    return [c.strip().strip("*") for c in line.strip("|").split("|")][1:]


def test_readme_validation_table_shows_the_committed_figures():
    # The table's figures are the committed validation file's, not typed apart from it.
    import json

    text = (ROOT / "README.md").read_text()
    doc = json.loads((ROOT / "benchmarks" / "results" / "perf_validation.json").read_text())
    h200 = doc["h200_leave_one_shape_out"]["all"]
    assert _row(text, "H200, leave one of 6 shapes out") == [
        str(h200["n"]), f"{h200['median_abs_err']:.3f}", f"{h200['p90_abs_err']:.3f}",
        f"{round(100 * h200['band_coverage'])}%"]
    pub = doc["published"]
    for marker, got in (("every costed point", pub), ("weight streamed from DRAM", pub["without_l2_resident"]),
                        ("weight re-read from the L2", pub["l2_resident"])):
        n, med, p90, band = _row(text, marker)
        assert n == str(got["n"]), marker
        assert float(med) == round(got["median_abs_err"], 3 if got["median_abs_err"] < 1 else 2), marker
        assert float(p90) == round(got["p90_abs_err"], 2), marker
        assert band == f"{round(100 * got['band_coverage'])}%", marker
    bounds = pub["roofline_bounds"]
    assert _row(text, "roofline-only parts, checked as bounds")[-1] == (
        f"{bounds['measured_at_or_above']} of {bounds['n']}")
