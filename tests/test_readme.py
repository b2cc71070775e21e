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
