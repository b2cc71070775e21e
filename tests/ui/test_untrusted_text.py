"""Names from a checkpoint are shown as the characters they are: never an image, a link or markup."""
from __future__ import annotations

import pytest


def _sources(at) -> list[str]:
    """The Markdown source of every element that renders Markdown (main area and sidebar)."""
    kinds = ("title", "header", "subheader", "markdown", "caption", "success", "info", "warning", "error")
    return [str(getattr(e, "value", "")) for kind in kinds for e in at.get(kind)]


@pytest.mark.parametrize("which", [0, 1], ids=["image", "javascript-link"])
def test_hostile_tensor_names_render_as_text(ui, tmp_path, monkeypatch, which):
    folder, *names = ui.hostile_checkpoint(tmp_path)
    name = names[which]
    monkeypatch.setenv("WORKBENCH_ALLOWED_ROOTS", str(tmp_path))
    at = ui.open_app("layer", state={"layer.source": "directory", "layer.dir": str(folder),
                                     "layer.name": name})
    assert not ui.errors(at)
    shown = ui.text(at)
    assert f"Loaded **hostile / {name}**" in shown  # the user reads the name as it is...
    raw = "\n".join(_sources(at))
    assert name in ui.unplain(raw)
    for source in _sources(at):  # ...and no element's Markdown holds it unescaped
        assert "![x](" not in source and "[link](" not in source and "](javascript" not in source
    # plot titles: plotly renders <a> and <b>, so the name is HTML-escaped there
    for chart in at.get("plotly_chart"):
        assert "<a " not in chart.proto.spec
    for page in ("trace", "alignment", "kernels"):
        at.switch_page(f"workbench/ui/pages/{page}.py").run()
        assert not at.exception
        for source in _sources(at):
            assert "![x](" not in source and "[link](" not in source, (page, source)


def test_plain_escapes_every_markdown_construct():
    from workbench.ui.plain import plain

    for text in ("![x](http://127.0.0.1:8600/x.png)", "[a](javascript:alert(1))", "<img src=x>",
                 "**bold** _it_ `code` :red[x] $x$ # h", "a|b", "http://127.0.0.1:8600/x.png"):
        escaped = plain(text)
        # every punctuation character is backslash-escaped: nothing is left to parse
        assert all(c.isalnum() or c.isspace() or c in "\\\u2060" or escaped[i - 1] == "\\"
                   for i, c in enumerate(escaped))
    assert plain("line\n# heading") == "line \\# heading"
    # bare URLs, www. and e-mail addresses become links after escapes are resolved: an invisible
    # word joiner breaks each one
    assert "http\\:\u2060\\/\\/" in plain("http://127.0.0.1:8600/x.png")
    assert "www\u2060\\." in plain("see www.example.com") and "\\@\u2060" in plain("a@b.com")
