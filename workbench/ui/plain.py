"""Untrusted text shown as plain text: tensor names, config values, file names, messages built from them.

Streamlit renders Markdown in `st.markdown`, `st.error`, `st.success`, `st.subheader`, captions
and widget labels: a tensor named `![x](http://host/x.png)` would make the browser fetch that
URL, and `[text](javascript:...)` would forge a link. CommonMark lets a backslash escape any
ASCII punctuation, which turns every construct (images, links, autolinks, emphasis, HTML,
Streamlit's `:color[...]` directives, `$` maths) back into the characters typed; a word joiner
(invisible) stops bare URLs from becoming links. An escaped string must not be put inside
backticks: a code span shows the backslashes.
"""
from __future__ import annotations

import re
import string

from workbench.text import printable

__all__ = ["plain"]

_ESCAPES = {ord(c): "\\" + c for c in string.punctuation}
# A line break inside a message would start a new Markdown block (a heading, a list, a table):
# messages are one paragraph.
_BREAKS = {ord("\n"): " ", ord("\r"): " ", ord("\t"): " "}


# GFM's autolink literals (`http://...`, `www.x`, `a@b.c`) are found in the text after escapes
# are resolved, so no escape stops them: an invisible word joiner breaks each trigger instead.
_JOINER = "\u2060"
_WWW = re.compile(r"(?i)\b(www)(?=\.)")


def plain(value: object) -> str:
    """`value` as Markdown source that renders exactly its characters, on one line."""
    # Control and bidi characters first (the face-wide rule); line breaks stay spaces here.
    text = printable(str(value).translate(_BREAKS))
    text = _WWW.sub(r"\1" + _JOINER, text.replace("://", ":" + _JOINER + "//").replace("@", "@" + _JOINER))
    return text.translate(_ESCAPES)

