"""Untrusted text shown as plain text: tensor names, config values, file names, messages built from them.

Streamlit renders Markdown in `st.markdown`, `st.error`, `st.success`, `st.subheader`, captions
and widget labels: a tensor named `![x](http://host/x.png)` would make the browser fetch that
URL, and `[text](javascript:...)` would forge a link. CommonMark lets a backslash escape any
ASCII punctuation, which turns every construct (images, links, autolinks, emphasis, HTML,
Streamlit's `:color[...]` directives, `$` maths) back into the characters typed. An escaped
string must not be put inside backticks: a code span shows the backslashes.
"""
from __future__ import annotations

import string

__all__ = ["plain"]

_ESCAPES = {ord(c): "\\" + c for c in string.punctuation}
# A line break inside a message would start a new Markdown block (a heading, a list, a table):
# messages are one paragraph.
_BREAKS = {ord("\n"): " ", ord("\r"): " ", ord("\t"): " "}


def plain(value: object) -> str:
    """`value` as Markdown source that renders exactly its characters, on one line."""
    return str(value).translate(_BREAKS).translate(_ESCAPES)

