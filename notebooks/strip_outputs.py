"""Strip outputs, execution counts and widget state from notebooks before committing.

    python notebooks/strip_outputs.py            # strip every notebooks/*.ipynb in place
    python notebooks/strip_outputs.py --check    # exit 1 and name the notebooks that hold outputs

Outputs hold numbers measured on one machine and megabytes of plotly JSON; the repository keeps
the cells only, so a reader's run shows their own machine. `tests/test_notebooks.py` fails
when a committed notebook is not stripped.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Metadata that execution or a widget frontend writes; none of it belongs in git.
VOLATILE_CELL_METADATA = ("execution", "collapsed", "scrolled", "ExecuteTime")
VOLATILE_NOTEBOOK_METADATA = ("widgets",)


def unstripped(nb: dict) -> list[str]:
    """What in a notebook's JSON is not stripped, one line per finding (empty: clean)."""
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "code":
            if cell.get("outputs"):
                found.append(f"cell {i}: {len(cell['outputs'])} output(s)")
            if cell.get("execution_count") is not None:
                found.append(f"cell {i}: execution_count {cell['execution_count']}")
        keys = [k for k in VOLATILE_CELL_METADATA if k in cell.get("metadata", {})]
        if keys:
            found.append(f"cell {i}: metadata {keys}")
    keys = [k for k in VOLATILE_NOTEBOOK_METADATA if k in nb.get("metadata", {})]
    if keys:
        found.append(f"notebook metadata {keys}")
    return found


def strip(nb: dict) -> dict:
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        for k in VOLATILE_CELL_METADATA:
            cell.get("metadata", {}).pop(k, None)
    for k in VOLATILE_NOTEBOOK_METADATA:
        nb.get("metadata", {}).pop(k, None)
    return nb


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path, help="notebooks (default: notebooks/*.ipynb)")
    ap.add_argument("--check", action="store_true", help="report only; exit 1 if any is unstripped")
    args = ap.parse_args(argv)
    paths = args.paths or sorted(HERE.glob("*.ipynb"))
    dirty = 0
    for path in paths:
        nb = json.loads(path.read_text(encoding="utf-8"))
        found = unstripped(nb)
        if not found:
            continue
        dirty += 1
        if args.check:
            print(f"{path}: " + "; ".join(found))
        else:
            # nbformat's own layout (indent 1, trailing newline) keeps diffs small.
            path.write_text(json.dumps(strip(nb), indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"stripped {path}")
    return 1 if args.check and dirty else 0


if __name__ == "__main__":
    sys.exit(main())
