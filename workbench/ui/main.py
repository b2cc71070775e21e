"""The router: six pages, one shared sidebar, state set once per session.

`streamlit run app.py` calls `main()`. Pages are files under `workbench/ui/pages/` (so
`AppTest.switch_page` reaches each one); each calls its view in `workbench/ui/views/`.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import streamlit as st

from workbench.ui import state

PAGES_DIR = Path(__file__).resolve().parent / "pages"

# (file, title, url path, icon). The trace page is the landing page: with the bundled sample
# and this machine it already says which kernel vLLM runs and how that differs from the docs.
PAGES = (
    ("layer.py", "Layer", "layer", ":material/deployed_code:"),
    ("trace.py", "Platform and trace", "trace", ":material/route:"),
    ("kernels.py", "Kernels", "kernels", ":material/speed:"),
    ("alignment.py", "Alignment", "alignment", ":material/grid_on:"),
    ("docs.py", "Docs versus code", "docs", ":material/fact_check:"),
    ("tour.py", "Tour", "tour", ":material/school:"),
)
LANDING = "trace"
# Tests set this so a bug surfaces as an exception instead of a red box.
RAISE_ENV = "WORKBENCH_UI_RAISE"
_log = logging.getLogger(__name__)


def _sidebar() -> None:
    from workbench.ui import loaders
    from workbench.ui.widgets import platform_picker

    ss = st.session_state
    with st.sidebar:
        st.caption("W4A8 Dispatch Workbench: vLLM 0.33.0 rules")
        try:
            ref = loaders.current_ref(ss)
            st.markdown(f"**Layer:** `{ref.label}`")
        except Exception as exc:  # noqa: BLE001 - shown, never raised; see _user_error
            _user_error(exc)
        platform_picker("Platform", key_suffix="sidebar")
        tp = ss["tp.size"]
        env = state.env_mapping()
        st.caption(f"TP {tp} · env: " + (", ".join(f"{k}={v}" for k, v in env.items()) or "vLLM defaults"))
        for problem in ss.get("_query_problems", []):
            st.warning(problem)


def _user_error(exc: BaseException) -> None:
    from workbench.errors import USER_ERRORS

    if not isinstance(exc, USER_ERRORS):
        raise exc
    st.error(str(exc))


def main() -> None:
    st.set_page_config(page_title="W4A8 Dispatch Workbench", page_icon=":material/memory:",
                       layout="wide")
    state.init_state()
    pages = [st.Page(PAGES_DIR / f, title=t, url_path=u, icon=i, default=(u == LANDING))
             for f, t, u, i in PAGES]
    page = st.navigation(pages)
    if page.url_path == "tour":
        from workbench.ui.views import tour

        tour.prepare()
    _sidebar()
    try:
        page.run()
    except Exception as exc:  # noqa: BLE001 - a bug must not take the app down (control flow is BaseException)
        if os.environ.get(RAISE_ENV):
            raise
        _log.exception("unexpected error on page %s", page.title)
        st.error(f"Unexpected error on this page ({type(exc).__name__}: {exc}). The other pages keep "
                 "working; this is a workbench bug: the server log has the details.")
