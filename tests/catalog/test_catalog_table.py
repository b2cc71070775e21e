"""The bad-input catalog, read as one table.

Each `tests/catalog/test_<surface>_catalog.py` holds `SURFACE` and `CATALOG`, a list of rows
`(input, expected, run)`: what the user gave, the named error or correct result it must give,
and the callable that checks it (the module's own parametrized test runs every row). This module
gathers the rows into `CATALOG.md` so a reviewer reads one table, and fails when the Markdown is
stale. Regenerate it with `python tests/catalog/test_catalog_table.py`.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TABLE = HERE / "CATALOG.md"
MIN_ROWS = 60


def _modules():
    for path in sorted(HERE.glob("test_*_catalog.py")):
        spec = importlib.util.spec_from_file_location(f"_catalog_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render() -> str:
    lines = ["# Bad-input catalog", "",
             "Generated from `tests/catalog/test_*_catalog.py` by `test_catalog_table.py`; "
             "every row is a test.", "",
             "| # | surface | input | expected |", "| --- | --- | --- | --- |"]
    n = 0
    for module in _modules():
        for row in module.CATALOG:
            n += 1
            lines.append(f"| {n} | {module.SURFACE} | {_cell(row[0])} | {_cell(row[1])} |")
    return "\n".join(lines) + "\n"


def test_catalog_is_large_enough_and_current():
    rows = sum(len(m.CATALOG) for m in _modules())
    assert rows >= MIN_ROWS, f"the catalog holds {rows} rows, at least {MIN_ROWS} are wanted"
    assert TABLE.exists() and TABLE.read_text() == render(), (
        "tests/catalog/CATALOG.md is stale: run python tests/catalog/test_catalog_table.py")


def test_every_row_names_its_input_and_expectation():
    for module in _modules():
        for row in module.CATALOG:
            assert len(row) == 3 and row[0] and row[1] and callable(row[2]), (module.SURFACE, row[:2])


if __name__ == "__main__":
    TABLE.write_text(render())
    sys.exit(0)
