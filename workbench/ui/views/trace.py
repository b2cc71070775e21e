"""Platform and trace: edit the platform and env, watch the scheme and the kernel loop decide."""
from __future__ import annotations

import time

import streamlit as st

from workbench.ui import loaders, state, widgets
from workbench.ui.plain import plain
from workbench.ui.widgets import user_errors

PLAY_DELAY_S = 0.6


def _resolve():
    """(layer ref, platform, env) from the state; a named error is shown and stops the view."""
    ss = st.session_state
    ref = loaders.current_ref(ss)
    platform = widgets.current_platform()
    env = widgets.current_env()
    return ref, platform, env


def settings(expanded: bool = False) -> None:
    ss = st.session_state
    env = state.env_mapping()
    summary = (f"Platform {loaders.preset_label(ss['pf.preset'])}"
               + (" (edited)" if state.platform_edits() else "")
               + f" · env: {', '.join(f'{k}={v}' for k, v in env.items()) or 'vLLM defaults'}"
               + f" · TP {ss['tp.size']}")
    st.caption(plain(summary))
    # A stable label: Streamlit keeps an expander open across reruns only if it stays the same.
    with st.expander("Platform, vLLM env knobs and TP: edit every field", expanded=expanded):
        widgets.platform_picker("Platform preset", key_suffix="trace")
        widgets.platform_editor()
        st.divider()
        widgets.env_editor()
        st.divider()
        widgets.tp_picker()


def step_controls(n: int, key: str = "trace") -> int:
    """Step through the candidates: how many are shown (n: all). Play animates them."""
    ss = st.session_state
    skey = f"{key}.shown"
    if skey not in ss or not 0 <= ss[skey] <= n:
        ss[skey] = n
    cols = st.columns([1, 1, 1, 1, 1, 3])
    if cols[0].button("First", key=f"{key}.first", disabled=n == 0):
        ss[skey] = 1
    if cols[1].button("Back", key=f"{key}.back", disabled=ss[skey] <= 1):
        ss[skey] = max(1, ss[skey] - 1)
    if cols[2].button("Next", key=f"{key}.next", disabled=ss[skey] >= n):
        ss[skey] = min(n, ss[skey] + 1)
    if cols[3].button("All", key=f"{key}.all", disabled=ss[skey] >= n):
        ss[skey] = n
    play = cols[4].button("Play", key=f"{key}.play", disabled=n == 0)
    cols[5].caption(f"showing {ss[skey]} of {n} candidate(s) tried")
    if play:
        ss[skey] = -1  # the caller animates
    return ss[skey]


def kernel_loop(trace, key: str = "trace") -> None:
    n = len(trace.steps)
    if trace.mp_config is not None:
        st.caption(f"MPLinearLayerConfig: `{trace.mp_config.to_json()}`")
    shown = step_controls(n, key)
    if shown == -1:
        placeholder = st.empty()
        for i in range(1, n + 1):
            with placeholder.container():
                widgets.steps_view(trace, upto=i, key=f"{key}-play-{i}")
            time.sleep(PLAY_DELAY_S)
        st.session_state[f"{key}.shown"] = n
        return
    widgets.steps_view(trace, upto=shown, key=key)
    if shown < n:
        st.caption(f"{n - shown} more candidate(s): press Next")


def compare(trace, platform, ref, env) -> None:
    st.subheader("Two platforms side by side")
    ss = st.session_state
    names = loaders.preset_names()
    if ss["pf.compare"] not in names:
        ss["pf.compare"] = "sm90-h200"
    state.bind(st.selectbox, "Compare with", "pf.compare", options=names,
               format_func=loaders.preset_label)
    other = loaders.preset_platform(ss["pf.compare"])
    other_trace = widgets.compute_trace(ref, other, env)
    left, right = st.columns(2)
    with left:
        st.markdown(f"**{plain(platform.label())}**")
        widgets.outcome_view(trace)
        widgets.steps_view(trace, key="cmp-left")
    with right:
        st.markdown(f"**{plain(other.label())}**")
        widgets.outcome_view(other_trace)
        widgets.steps_view(other_trace, key="cmp-right")
    diff = widgets.platform_diff(platform, other)
    steps = widgets.step_diff(trace, other_trace)
    st.markdown("**Where the platforms differ**")
    if diff:
        st.markdown(widgets.md_table(diff))
    else:
        st.caption("Same platform fields.")
    st.markdown("**Where the kernel loop differs**")
    if steps:
        st.markdown(widgets.md_table(steps))
    else:
        st.caption("Every candidate ends the same way on both.")


def render() -> None:
    st.title("Platform and trace")
    try:
        ref, platform, env = _resolve()
        trace = widgets.compute_trace(ref, platform, env)
    except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
        widgets.show_error(exc)
        settings(expanded=True)
        return
    widgets.headline(trace, platform, ref.label)
    widgets.outcome_view(trace)
    settings()
    for note in widgets.ambiguity_notes(trace, env):
        st.warning(f"Where vLLM is ambiguous: {note}")

    st.subheader("Scheme resolution")
    widgets.scheme_view(trace)
    st.subheader("Kernel selection, candidate by candidate")
    if trace.steps:
        kernel_loop(trace)
    else:
        st.caption("No kernel loop ran: the layer was refused before kernel selection.")
    if trace.notes:
        with st.expander("vLLM log lines and notes"):
            for n in trace.notes:
                st.markdown(f"- {plain(n)}")

    st.subheader("Export")
    stem = f"trace-{platform.name.replace(' ', '_')}-{(ref.name or 'layer').split('.')[-1]}"
    widgets.trace_downloads(trace, stem, "trace-export")
    st.markdown(f"[Link to this view]({state.link('', state.view_query())})")

    with user_errors():
        compare(trace, platform, ref, env)
