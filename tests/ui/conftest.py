"""AppTest helpers: the real app (app.py and its router), one page at a time.

Tests pin the platform to a preset so they do not depend on the machine running them.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

# A bug in a page raises (AppTest records it) instead of becoming a red box.
os.environ["WORKBENCH_UI_RAISE"] = "1"

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app.py"
TIMEOUT = 120  # the first run of a process imports torch and the checkpoint readers


def open_app(page: str | None = None, *, state: dict | None = None, query: dict | None = None) -> AppTest:
    """Run the app (landing page), then switch to `page` ("layer", "trace", ...)."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["pf.preset"] = "x86-avx512"
    for key, value in (state or {}).items():
        at.session_state[key] = value
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    if page is not None:
        at.switch_page(f"workbench/ui/pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


def unplain(source: str) -> str:
    """Markdown source as the user reads it: `workbench.ui.plain` escapes punctuation."""
    return _ESCAPED.sub(r"\1", source).replace("\u2060", "")  # the joiner that stops autolinks


def _walk(node):
    children = getattr(node, "children", None)
    if children is not None:
        label = getattr(node, "label", None)
        if isinstance(label, str):
            yield label
        for child in children.values():
            yield from _walk(child)
        return
    kind = getattr(node, "type", "")
    if kind == "metric":
        yield f"{node.label}: {node.value}"
    elif kind in ("title", "header", "subheader", "markdown", "caption", "success", "info",
                  "warning", "error", "code", "text", "alert", "exception"):
        yield str(node.value)


def text(at: AppTest, *, main_only: bool = True) -> str:
    """Every visible string of the page in document order (markdown, alerts, code, metrics...)."""
    return unplain("\n".join(_walk(at.main if main_only else at._tree)))


def errors(at: AppTest, *, main_only: bool = True) -> list[str]:
    """The `st.error` messages of the page (the sidebar repeats a layer error: excluded)."""
    return [unplain(str(e.value)) for e in (at.main if main_only else at).error]


def plotly_count(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


# ----------------------------------------------------------------- a checkpoint with hostile names

IMAGE = "![x](http://127.0.0.1:8600/x.png)"
LINK = "[link](javascript:alert(1))"
SAMPLE = ROOT / "sample_models" / "ct-w4a8-int-g128"


def hostile_checkpoint(folder: Path) -> tuple[Path, str, str]:
    """A copy of the W4A8 sample with down_proj and up_proj renamed; returns (dir, name1, name2)."""
    from safetensors.torch import load_file, save_file

    out = folder / "hostile"
    out.mkdir()
    shutil.copy(SAMPLE / "config.json", out / "config.json")
    renames = {"model.layers.0.mlp.down_proj": f"model.layers.0.mlp.{IMAGE}",
               "model.layers.0.mlp.up_proj": f"model.layers.0.mlp.{LINK}"}
    tensors = {}
    for key, value in load_file(SAMPLE / "model.safetensors").items():
        for old, new in renames.items():
            if key.startswith(old + "."):
                key = new + key[len(old):]
        tensors[key] = value
    save_file(tensors, out / "model.safetensors")
    return out, renames["model.layers.0.mlp.down_proj"], renames["model.layers.0.mlp.up_proj"]


class UI:
    """The helpers above, handed to tests as the `ui` fixture (importlib mode has no conftest import)."""

    open_app = staticmethod(open_app)
    text = staticmethod(text)
    errors = staticmethod(errors)
    unplain = staticmethod(unplain)
    hostile_checkpoint = staticmethod(hostile_checkpoint)
    IMAGE, LINK = IMAGE, LINK
    plotly_count = staticmethod(plotly_count)
    ROOT = ROOT


@pytest.fixture
def ui() -> type[UI]:
    return UI
