"""Untrusted names printed by every face: no control character reaches a terminal, no cell a formula."""
from __future__ import annotations

import csv
import io

from workbench.results import rows_csv
from workbench.text import csv_cell, printable

HOSTILE = ["a\x1b]0;owned\x07b", "x\x1b[2Jy", "row\nforged | row", "\u202eevil", "c1\x85\x9b", "z\u2028z"]


def test_printable_leaves_no_control_character():
    for name in HOSTILE:
        out = printable(name)
        assert out.isprintable() and "\n" not in out, out
    assert printable("a\x1b]0;t\x07") == "a\\x1b]0;t\\x07"
    assert printable("l\nm") == "l\\nm" and printable("l\nm", keep_newlines=True) == "l\nm"
    assert printable("\u202ex") == "\\u202ex"
    assert printable("model.layers.0.q_proj") == "model.layers.0.q_proj"
    assert printable(r"re:.*\.q_proj") == r"re:.*\.q_proj"  # patterns read as typed


def test_csv_cells_never_start_a_formula():
    for text in ("=HYPERLINK(\"http://x\",\"y\")", "+1", "-1+2", "@SUM(A1)", "\tx", "\rx"):
        assert csv_cell(text).startswith("'"), text
    assert csv_cell(-1.5) == -1.5 and csv_cell(None) is None and csv_cell("q_proj") == "q_proj"
    text = rows_csv([{"layer": "=HYPERLINK(\"http://x\")", "k": 4096}, {"layer": "a\x1b[2J", "k": -1}])
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[0]["layer"].startswith("'=") and rows[1]["layer"] == "a\\x1b[2J" and rows[1]["k"] == "-1"
    assert "\x1b" not in text
