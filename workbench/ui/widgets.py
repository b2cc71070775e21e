"""Widgets shared by the pages: platform and env editors, the layer and trace views, errors.

Each editor reads and writes the flat state keys of `workbench.ui.state` through `bind`,
so the same choice shows wherever it is drawn.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator

import streamlit as st

from workbench.ui import loaders, state
from workbench.ui.plain import plain
from workbench.ui.state import bind, guarded


# --------------------------------------------------------------------------- errors


@contextmanager
def user_errors() -> Iterator[None]:
    """Show a named (user-fixable) error as `st.error` and keep the page going."""
    from workbench.errors import USER_ERRORS

    try:
        yield
    except USER_ERRORS as exc:
        st.error(plain(exc))


def show_error(exc: BaseException) -> None:
    from workbench.errors import USER_ERRORS

    if not isinstance(exc, USER_ERRORS):
        raise exc
    st.error(plain(exc))


# --------------------------------------------------------------------------- measurements

WORKER_KEY = "measure.worker"


def measurement_worker():
    """This session's measuring child process (`workbench.contained.Worker`): kernels run
    there, so a crash, a hang or an out-of-memory ends it and not the server every session
    shares. One per session, kept between runs (its JIT-compiled kernels with it); a failure
    ends it and the next run starts another. It goes when the session's state does."""
    w = st.session_state.get(WORKER_KEY)
    if w is None:
        from workbench.contained import Worker
        from workbench.perf.cpu import host_threads

        # the server's thread count: a calibration's cache key and a sweep's records are its
        w = st.session_state[WORKER_KEY] = Worker(threads=host_threads())
    return w


# --------------------------------------------------------------------------- platform and env


def _on_preset() -> None:
    state.set_preset(st.session_state["pf.preset"])


def platform_picker(label: str = "Platform preset", *, key_suffix: str = "", compact: bool = False) -> str:
    """The preset selectbox; picking one resets every editable field to that preset.

    `compact` (the sidebar): the box shows the preset's name and a caption below it its
    description in full, which a narrow box would cut off.
    """
    names = loaders.preset_names()
    ss = st.session_state
    if ss["pf.preset"] not in names:
        ss["pf.preset"] = "host"
    key = "pf.preset"
    # Two pickers (sidebar and trace page) show the same state: give each its own shadow key.
    wkey = f"w:{key}:{key_suffix}"
    ss[wkey] = ss[key]

    def _changed() -> None:
        ss[key] = ss[wkey]
        _on_preset()

    st.selectbox(label, names, key=wkey, on_change=guarded(_changed),
                 format_func=(lambda n: "this machine" if n == "host" else n) if compact
                 else loaders.preset_label)
    if compact:
        st.caption(plain(loaders.preset_label(ss[key])))
    return ss[key]


def current_platform():
    """The edited platform (raises a named error if a field is invalid)."""
    ss = st.session_state
    fields = {f: ss[f"pf.{f}"] for f in state.PLATFORM_FIELDS}
    return loaders.build_platform(ss["pf.preset"], fields)


def platform_editor() -> None:
    """Every field of the platform, editable; changes mark the platform '(edited)'."""
    from workbench.platforms import (CAPABILITY_RANGE, CPU_ARCHES, DEVICES, KNOWN_PACKAGES,
                                     KNOWN_TORCH_OPS)

    ss = st.session_state
    c1, c2, c3, c4 = st.columns(4)
    with c1:
        bind(st.selectbox, "device", "pf.device", options=list(DEVICES))
    with c2:
        bind(st.number_input, "capability (major*10+minor; empty: none)", "pf.capability",
             min_value=CAPABILITY_RANGE[0], max_value=CAPABILITY_RANGE[1], step=1,
             help="None on CPU and XPU: vLLM then skips every min-capability check.")
    with c3:
        arches = [None, *CPU_ARCHES]
        if ss["pf.cpu_arch"] not in arches:
            ss["pf.cpu_arch"] = None
        bind(st.selectbox, "cpu_arch", "pf.cpu_arch", options=arches,
             format_func=lambda a: "none" if a is None else a)
    with c4:
        # gfx is None or a string; the text box shows None as empty.
        ss["w:pf.gfx"] = ss["pf.gfx"] or ""
        st.text_input("gfx (ROCm arch)", key="w:pf.gfx", placeholder="e.g. gfx942",
                      on_change=guarded(lambda: ss.__setitem__("pf.gfx", ss["w:pf.gfx"].strip() or None)))
    flags = st.columns(6)
    for col, f in zip(flags, ("zen", "amx", "avx2", "avx512", "avx512_bf16", "avx512_vnni")):
        with col:
            bind(st.checkbox, f, f"pf.{f}")
    c1, c2 = st.columns(2)
    with c1:
        extra = [p for p in ss["pf.packages"] if p not in KNOWN_PACKAGES]
        bind(st.multiselect, "installed packages", "pf.packages",
             options=[*KNOWN_PACKAGES, *extra],
             help="humming and conch come with vLLM's CUDA / ROCm requirements; zentorch makes "
                  "vLLM pick its Zen CPU platform.")
    with c2:
        extra = [o for o in ss["pf.torch_ops"] if o not in KNOWN_TORCH_OPS]
        bind(st.multiselect, "torch ops present", "pf.torch_ops",
             options=[*KNOWN_TORCH_OPS, *extra])
    edits = state.platform_edits()
    if edits:
        st.caption(plain("Edited from the preset: " + ", ".join(f"{k}={v}" for k, v in edits.items())))
        if st.button("Reset to preset", key="pf.reset"):
            state.set_preset(ss["pf.preset"])
            st.rerun()


def env_editor(*, columns: int = 3) -> None:
    """vLLM's dispatch knobs, as the env variables and kernel config name them, with the
    values the sidebar's rule set accepts."""
    accepted = state.rule_set().ENV
    cols = st.columns(columns)
    with cols[0]:
        bind(st.text_input, "VLLM_DISABLED_KERNELS", "env.VLLM_DISABLED_KERNELS",
             placeholder="e.g. MacheteLinearKernel,HummingLinearKernel",
             help="Split on commas and not stripped, exactly as vLLM does: 'A, B' disables A only.")
        bind(st.selectbox, "linear_backend (--linear-backend)", "env.linear_backend",
             options=list(accepted.linear_backends))
    with cols[1 % columns]:
        bind(st.selectbox, "VLLM_CPU_INT4_W4A8", "env.VLLM_CPU_INT4_W4A8", options=["1", "0"])
        bind(st.selectbox, "VLLM_XPU_INC_WNA16_BACKEND", "env.VLLM_XPU_INC_WNA16_BACKEND",
             options=["", *accepted.xpu_inc_backends], format_func=lambda v: v or "(unset: auto)")
    with cols[2 % columns]:
        if "VLLM_MARLIN_INPUT_DTYPE" in accepted.known_keys:  # a release that still reads it
            bind(st.selectbox, "VLLM_MARLIN_INPUT_DTYPE", "env.VLLM_MARLIN_INPUT_DTYPE",
                 options=["", *accepted.marlin_input_dtypes], format_func=lambda v: v or "(unset)")
        bind(st.selectbox, "VLLM_BATCH_INVARIANT", "env.VLLM_BATCH_INVARIANT", options=["0", "1"])
    bind(st.text_input, "linear_backend_per_quant (JSON)", "env.linear_backend_per_quant",
         placeholder='{"mixed_precision": "marlin"}')


def current_env() -> dict[str, str]:
    """The env mapping, validated by the core with the sidebar's rule set (raises its named
    error)."""
    from workbench.dispatch.env import parse_env

    env = state.env_mapping()
    parse_env(env, state.rule_set().ENV)
    return env


def tp_picker() -> None:
    c1, c2 = st.columns(2)
    with c1:
        bind(st.number_input, "tensor-parallel size", "tp.size", min_value=1, max_value=64, step=1)
    with c2:
        bind(st.selectbox, "parallel (how TP splits this layer)", "tp.parallel",
             options=["auto", "column", "row"],
             format_func=lambda v: {"auto": "auto (from the layer name)", "column": "column (splits N)",
                                    "row": "row (splits K)"}[v])


# --------------------------------------------------------------------------- traces


def compute_trace(ref, platform, env: dict[str, str], tp_size: int | None = None,
                  parallel: str | None = None):
    """The cached trace of `ref` on `platform` (tp and parallel default to the state)."""
    ss = st.session_state
    tp = ss["tp.size"] if tp_size is None else tp_size
    par = ss["tp.parallel"] if parallel is None else parallel
    spec = loaders.layer_spec(ref)
    return loaders.trace(ref.key, spec, json.dumps(platform.to_json(), sort_keys=True),
                         json.dumps(env, sort_keys=True), int(tp), None if par == "auto" else par,
                         ss["vllm.version"])


OUTCOME_MARK = {"selected": ":green[**selected**]", "rejected": ":red[rejected]",
                "disabled": ":orange[disabled by env]", "capability": ":orange[capability too low]",
                "crashed": ":red[**crashed**]"}


def scheme_view(trace) -> None:
    """The scheme predicates in vLLM's order, the match highlighted, then the gates."""
    if not trace.predicates:
        if trace.scheme:
            st.markdown(f"Quantization method: {plain(trace.scheme)}")
        return
    # A markdown table, not a dataframe: the landing page then needs no pandas (cold start).
    lines = ["| # | predicate (vLLM's order) | matched | gives | detail |", "|---|---|---|---|---|"]
    for i, p in enumerate(trace.predicates, 1):
        cells = [str(i), f"`{p.name}`", "**yes**" if p.matched else "no",
                 f"`{p.result}`" if p.result else "", plain(p.detail)]
        if p.matched:
            cells = [f":green[{c}]" if c else c for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    st.markdown("\n".join(lines))
    if trace.scheme:
        st.markdown(f"**Scheme:** `{trace.scheme}`")
    for gate in trace.gates:
        st.markdown(f"- {plain(gate)}")


def md_table(rows: list[dict[str, Any]]) -> str:
    """A list of same-keyed dicts as a markdown table."""
    if not rows:
        return ""
    keys = list(rows[0])
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    out += ["| " + " | ".join(plain(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(out)


def steps_view(trace, *, upto: int | None = None, key: str = "steps") -> None:
    """The candidates one by one: kernel, outcome, vLLM's reason; the chosen kernel highlighted."""
    steps = trace.steps if upto is None else trace.steps[:upto]
    if trace.candidates:
        st.caption("Candidates in vLLM's order here: " + " → ".join(trace.candidates))
    for i, s in enumerate(steps, 1):
        with st.container(border=True, key=f"{key}-step-{i}"):
            mark = OUTCOME_MARK.get(s.outcome, s.outcome)
            st.markdown(f"**{i}. `{s.kernel}`** · {mark}")
            if s.reason:
                st.code(s.reason, language=None, wrap_lines=True)
            elif s.outcome == "selected":
                st.markdown(":green[can_implement returned (True, None)]")


def outcome_view(trace, platform=None) -> None:
    """The chosen kernel and what it computes, or vLLM's exact error."""
    if trace.selected:
        st.success(f"vLLM {trace.vllm_version} selects **{trace.selected}**" + (f" for `{trace.scheme}`" if trace.scheme else ""))
        if trace.runtime:
            st.info(f"What runs: {trace.runtime}")
    elif trace.error:
        st.error(f"No kernel: vLLM {trace.vllm_version} raises **{trace.error_type}** with this "
                 "exact message:")
        st.code(trace.error, language=None, wrap_lines=True)
    elif trace.notes:
        st.info(plain(" ".join(trace.notes)))


def ambiguity_notes(trace, env: dict[str, str]) -> list[str]:
    """Where vLLM itself is ambiguous or surprising for this trace: the notes of the rule set
    that made it (what a release does is the release's to say)."""
    return [] if trace.rules is None else trace.rules.ambiguity_notes(trace, env)


def headline(trace, platform, ref) -> None:
    """One line that tells the story: what the docs say for this scheme here, what the code picks."""
    from workbench.dispatch.docs_matrix import docs_row, docs_says, hardware_column

    rules = trace.rules or state.rule_set()  # the docs of the release that made the trace
    row, col = docs_row(loaders.layer_spec(ref)), hardware_column(platform, rules)
    if row is None:
        docs = "vLLM's docs table has no row for this layer's scheme. "
    elif col is None:
        docs = f"vLLM's docs table has no column for this platform ({row} row). "
    else:
        says = "YES" if docs_says(row, col, rules) else "NO"
        docs = f"vLLM's docs say **{col}** runs {row}: **{says}**. "
    if trace.selected:
        code = f"The code picks **`{trace.selected}`**"
    else:
        code = f"The code finds no kernel (**{trace.error_type}**)"
    st.markdown(f"#### {docs}{code} for {plain(ref.label)} on {plain(platform.label())}.")


def trace_downloads(trace, stem: str, key: str) -> None:
    c1, c2 = st.columns(2)
    with c1:
        st.download_button("Export trace JSON", json.dumps(trace.to_json(), indent=2),
                           file_name=f"{stem}.json", mime="application/json", key=f"{key}-json",
                           on_click="ignore")
    with c2:
        st.download_button("Export trace Markdown", trace.to_markdown(f"Dispatch trace: {stem}"),
                           file_name=f"{stem}.md", mime="text/markdown", key=f"{key}-md",
                           on_click="ignore")


def platform_diff(a, b) -> list[dict[str, Any]]:
    """The fields where two platforms differ."""
    ja, jb = a.to_json(), b.to_json()
    return [{"field": f, "left": str(ja[f]), "right": str(jb[f])}
            for f in state.PLATFORM_FIELDS if ja[f] != jb[f]]


def step_diff(ta, tb) -> list[dict[str, Any]]:
    """Candidate by candidate, where two traces differ."""
    a = {s.kernel: s for s in ta.steps}
    b = {s.kernel: s for s in tb.steps}
    order = list(dict.fromkeys([*ta.candidates, *tb.candidates, *a, *b]))
    rows = []
    for k in order:
        sa, sb = a.get(k), b.get(k)
        oa = sa.outcome if sa else ("not a candidate" if k not in ta.candidates else "not reached")
        ob = sb.outcome if sb else ("not a candidate" if k not in tb.candidates else "not reached")
        ra, rb = (sa.reason or "") if sa else "", (sb.reason or "") if sb else ""
        if (oa, ra) != (ob, rb):
            rows.append({"kernel": k, "left": f"{oa}: {ra}".rstrip(": "), "right": f"{ob}: {rb}".rstrip(": ")})
    return rows
