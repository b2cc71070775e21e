"""The router: seven pages, one shared sidebar, state set once per session.

`streamlit run app.py` calls `main()`. Pages are files under `workbench/ui/pages/` (so
`AppTest.switch_page` reaches each one); each calls its view in `workbench/ui/views/`.
"""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import streamlit as st

from workbench.ui import state
from workbench.ui.plain import plain

PAGES_DIR = Path(__file__).resolve().parent / "pages"

# (file, title, url path, icon). The trace page is the landing page: with the bundled sample
# and this machine it already says which kernel vLLM runs and how that differs from the docs.
PAGES = (
    ("layer.py", "Layer", "layer", ":material/deployed_code:"),
    ("trace.py", "Platform and trace", "trace", ":material/route:"),
    ("kernels.py", "Kernels", "kernels", ":material/speed:"),
    ("alignment.py", "Alignment", "alignment", ":material/grid_on:"),
    ("report.py", "Model report", "report", ":material/summarize:"),
    ("docs.py", "Docs versus code", "docs", ":material/fact_check:"),
    ("tour.py", "Tour", "tour", ":material/school:"),
)
LANDING = "trace"
# Tests set this so a bug surfaces as an exception instead of a red box.
RAISE_ENV = "WORKBENCH_UI_RAISE"
_log = logging.getLogger(__name__)


def _sidebar(page: str) -> None:
    from workbench.errors import USER_ERRORS
    from workbench.ui import loaders
    from workbench.dispatch.versions import available
    from workbench.ui.widgets import platform_picker

    ss = st.session_state
    with st.sidebar:
        st.caption("W4A8 Dispatch Workbench")
        state.bind(st.selectbox, "vLLM version", "vllm.version", options=list(available()),
                   help="The vLLM release whose rules every trace follows (the versions with a "
                        "rule set in workbench/dispatch/versions.py).")
        try:
            ref = loaders.current_ref(ss)
            st.markdown(f"**Layer:** {plain(ref.label)}")
        except USER_ERRORS:
            # The page that needs the layer says why; an error is shown once, there.
            st.markdown("**Layer:** not loaded (the Layer page says why)")
        if ss.get("_tour_returned") not in (None, page):
            ss.pop("_tour_returned")
        if ss.get("_tour_returned") == page:
            st.info("Back from the Tour: your own layer, platform and settings are as you left them.")
        platform_picker("Platform", key_suffix="sidebar", compact=True)
        edits = state.platform_edits()
        if edits:  # the platform is not the preset: never shown as if it were
            st.caption(plain("edited: " + ", ".join(f"{f}={v}" for f, v in edits.items())))
        tp = ss["tp.size"]
        env = state.env_mapping()
        st.caption(plain(f"TP {tp} · env: " + (", ".join(f"{k}={v}" for k, v in env.items())
                                                or "vLLM defaults")))
        # A refused link parameter is said on the page the link opened, until the user moves on.
        if ss.setdefault("_query_page", page) != page:
            ss["_query_problems"] = []
        for problem in ss.get("_query_problems", []):
            st.warning(plain(problem))


@contextmanager
def boundary(where: str) -> Iterator[None]:
    """The page's error boundary: a named error is shown once, a bug as one red box, never a traceback."""
    from workbench.errors import USER_ERRORS

    try:
        yield
    except USER_ERRORS as exc:
        st.error(plain(exc))
    except Exception as exc:  # noqa: BLE001 - a bug must not take the app down (control flow is BaseException)
        if os.environ.get(RAISE_ENV):
            raise
        _log.exception("unexpected error %s", where)
        st.error(plain(f"Unexpected error {where} ({type(exc).__name__}: {exc}). The other pages "
                       "keep working; this is a workbench bug: the server log has the details."))


def _raise_callback_error() -> None:
    """Re-raise, inside the boundary, what a widget callback raised before this run."""
    exc = st.session_state.pop(state.CALLBACK_ERROR, None)
    if exc is not None:
        raise exc


def main() -> None:
    st.set_page_config(page_title="W4A8 Dispatch Workbench", page_icon=":material/memory:",
                       layout="wide")
    pages = [st.Page(PAGES_DIR / f, title=t, url_path=u, icon=i, default=(u == LANDING))
             for f, t, u, i in PAGES]
    page = st.navigation(pages)
    with boundary("while starting the session"):
        from workbench.ui.views import tour

        state.init_state(tour_steps=len(tour.STEPS))
        if page.url_path == "tour":
            tour.prepare()
        elif state.restore_after_tour():
            st.session_state["_tour_returned"] = page.url_path
    if not state.ready():
        return
    with boundary("in the sidebar"):
        _sidebar(page.url_path)
    with boundary("in a control of this page"):
        _raise_callback_error()
    with boundary("on this page"):
        page.run()
