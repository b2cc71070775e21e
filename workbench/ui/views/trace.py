"""Platform and trace: edit the platform and env, watch the scheme and the kernel loop decide."""
from __future__ import annotations

import json
import time

import streamlit as st

from workbench.ui import loaders, state, widgets
from workbench.ui.plain import plain
from workbench.ui.state import guarded
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


def _signature(trace) -> str:
    """What identifies a trace's loop for the stepper: its candidates and how each ended."""
    return repr([(s.kernel, s.outcome, s.reason) for s in trace.steps])


def _move(skey: str, n: int, where: str) -> None:
    """A stepper button: runs before the script, so the buttons are drawn for the new position."""
    ss = st.session_state
    ss[skey] = {"first": 1, "back": max(1, ss[skey] - 1), "next": min(n, ss[skey] + 1), "all": n,
                "play": n}[where]
    ss[f"{skey}.play"] = where == "play"


def step_controls(trace, key: str = "trace"):
    """First / Back / Next / All / Play over the candidates; returns (shown, playing, caption slot).

    A new trace (another platform, layer or env) opens with every candidate shown, so the
    kernel that is selected, or the last rejection, is always on screen.
    """
    ss = st.session_state
    n = len(trace.steps)
    skey = f"{key}.shown"
    signature = _signature(trace)
    if ss.get(f"{key}.trace") != signature or not 0 <= ss.get(skey, -1) <= n:
        ss[f"{key}.trace"], ss[skey] = signature, n
    shown = ss[skey]
    playing = ss.pop(f"{skey}.play", False)
    cols = st.columns([1, 1, 1, 1, 1, 3])
    move = guarded(_move)
    for col, label, where, off in ((cols[0], "First", "first", n == 0 or shown == 1),
                                   (cols[1], "Back", "back", shown <= 1),
                                   (cols[2], "Next", "next", shown >= n),
                                   (cols[3], "All", "all", shown >= n),
                                   (cols[4], "Play", "play", n == 0)):
        col.button(label, key=f"{key}.{where}", disabled=off, on_click=move, args=(skey, n, where))
    caption = cols[5].empty()
    caption.caption(f"showing {n if playing else shown} of {n} candidate(s) tried")
    return shown, playing, caption


def kernel_loop(trace, key: str = "trace") -> None:
    n = len(trace.steps)
    if trace.mp_config is not None:
        st.caption(f"MPLinearLayerConfig: `{trace.mp_config.to_json()}`")
    for w in trace.warnings:
        st.warning(plain(w.sentence()))
    shown, playing, caption = step_controls(trace, key)
    if playing:
        placeholder = st.empty()
        for i in range(1, n + 1):
            caption.caption(f"showing {i} of {n} candidate(s) tried")
            with placeholder.container():
                widgets.steps_view(trace, upto=i, key=f"{key}-play-{i}")
            time.sleep(PLAY_DELAY_S)
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


def compare_versions(trace, platform, ref, env) -> None:
    """This layer on this platform under another vLLM release: both outcomes side by side and
    every row the later release answers differently, with both releases' file:line."""
    from workbench.dispatch.version_diff import version_diff
    from workbench.dispatch.versions import available

    st.subheader("What changes when you upgrade vLLM")
    ss = st.session_state
    others = [v for v in available() if v != trace.vllm_version]
    if not others:
        st.caption("One vLLM release is modelled: nothing to compare.")
        return
    if not st.toggle("Compare with another vLLM release", key="pf.compare_versions"):
        return
    if ss.get("pf.compare_version") not in others:
        ss["pf.compare_version"] = others[0]
    st.selectbox("Compare with vLLM", others, key="pf.compare_version")
    spec = loaders.layer_spec(ref)
    other = loaders.trace(ref.key, spec, json.dumps(platform.to_json(), sort_keys=True),
                          json.dumps(env, sort_keys=True), int(ss["tp.size"]),
                          None if ss["tp.parallel"] == "auto" else ss["tp.parallel"],
                          ss["pf.compare_version"])
    key = tuple(int(x) for x in trace.vllm_version.split("."))
    okey = tuple(int(x) for x in other.vllm_version.split("."))
    old, new = (trace, other) if key < okey else (other, trace)
    left, right = st.columns(2)
    for col, t in ((left, old), (right, new)):
        with col:
            st.markdown(f"**vLLM {t.vllm_version}**")
            widgets.outcome_view(t)
    diff = version_diff(old, new, env)
    if not diff.changed:
        st.caption(f"No change: vLLM {new.vllm_version} answers this layer on this platform as "
                   f"{old.vllm_version} does.")
        return
    rows = [{"what": r.aspect if r.subject == r.aspect else f"{r.aspect}: {r.subject}",
             f"vLLM {old.vllm_version}": r.old or "-", f"vLLM {new.vllm_version}": r.new or "-",
             f"{old.vllm_version} source": r.old_source or "-",
             f"{new.vllm_version} source": r.new_source or "-"} for r in diff.rows]
    st.markdown(f"**{len(rows)} row(s) differ** (every row below is a difference)")
    st.dataframe(rows, hide_index=True, width="stretch")


def render() -> None:
    st.title("Platform and trace")
    try:
        ref, platform, env = _resolve()
        trace = widgets.compute_trace(ref, platform, env)
    except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
        widgets.show_error(exc)
        settings(expanded=True)
        return
    widgets.headline(trace, platform, ref)
    widgets.outcome_view(trace)
    from workbench.ui.views import report  # the cost of what runs, predicted (workbench.perf)

    report.cost_view(trace, ref)
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

    from workbench.ui.views import moe_trace  # the experts of MoE models, on this platform

    moe_trace.section(platform)

    st.subheader("Export")
    stem = f"trace-{platform.name.replace(' ', '_')}-{(ref.name or 'layer').split('.')[-1]}"
    widgets.trace_downloads(trace, stem, "trace-export")
    st.markdown(f"[Link to this view]({state.link('', state.view_query())})")

    with user_errors():
        compare(trace, platform, ref, env)
    with user_errors():
        compare_versions(trace, platform, ref, env)
