"""Kernels: run W4A8 native, the W4A16 fallback and what vLLM would run here, on this machine.

Every number comes from `workbench.bench` (round-robin timing, errors against the float64
references), run in the session's measuring child process (`workbench.contained`): a kernel
that crashes, hangs or runs out of memory ends that child, the page says what failed, and the
server goes on. A sweep runs one M at a time and keeps each M's records in the session as
it goes, so Stop (which interrupts the run) and a failure keep what was measured.
"""
from __future__ import annotations

import json
from html import escape
from typing import TYPE_CHECKING

import streamlit as st

from workbench.ui import loaders, runs, state, widgets
from workbench.ui.plain import plain

if TYPE_CHECKING:
    from w4a8_kernels.registry import KernelPath

# Untimed calls before each point: the first calls of a path pay for allocation and packing.
WARMUP = 2


def _load() -> float | None:
    import os

    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _noise(meta: dict):
    from workbench.noise import timing_noise

    return timing_noise(st.session_state.get("kern.records", []),
                        [meta["provenance"].get("loadavg_1m"), meta.get("load_end")])


def _noise_text(noise) -> str:
    spread = (f"p80/p20 up to {noise.worst_spread:.2f}x ({noise.worst_path} at M = {noise.worst_m})"
              if noise.worst_spread else "no spread recorded")
    load = f"load {noise.load:.1f}" if noise.load is not None else "load unknown"
    others = ("" if noise.others_cores is None else
              f", other processes kept {noise.others_cores:.1f} of them busy")
    return f"{spread}; {load} on {noise.cores} cores{others}"


def noise_view(meta: dict) -> None:
    """The run's noise indicator, and a warning past the limits (`workbench.noise`)."""
    from workbench.noise import SPREAD_LIMIT

    noise = _noise(meta)
    st.caption(f"Noise: {_noise_text(noise)}.")
    why = ([f"a p80/p20 band above {SPREAD_LIMIT}x"] if noise.spread_high else []) + (
        [f"other processes took the cores {noise.threads} thread(s) needed"] if noise.crowded else []) + (
        [f"a load above the {noise.cores} cores"] if noise.load is not None and noise.load > noise.cores
        else [])
    if why:
        st.warning(f"These timings are noisy ({' and '.join(why)}): medians can move between runs. "
                   "Raise Repeats, or re-run when the machine is quiet; the ratios between paths are "
                   "still timed round-robin in one process.")


@st.cache_resource(show_spinner=False)
def _host_cpu():
    from workbench.platforms import detect_host

    return detect_host(cpu=True)


def engine_plan(ref):
    """vLLM's choice for this layer on this machine, and the paths that model it here."""
    from workbench.execution import plan_from_trace

    host = loaders.host_platform()
    if host.is_cuda():  # the GPU by default; this machine's CPU one choice away
        where = st.radio("Run on", ("GPU", "CPU"), key="kern.device", horizontal=True,
                         help="GPU: what vLLM runs on this GPU and this project's Triton "
                         "stand-ins; CPU: this machine's CPU engines (platform host-cpu)")
        if where == "CPU":
            host = _host_cpu()
    env = widgets.current_env()
    t = widgets.compute_trace(ref, host, env, tp_size=1, parallel="auto")
    return t, plan_from_trace(t, cuda=host.is_cuda()), host


def plan_view(t, plan, host) -> None:
    if t.selected and plan.runs_engine and plan.gpu:
        from workbench.execution import STAND_IN_LABEL

        st.markdown(f"On **{host.label()}** vLLM {t.vllm_version} selects **`{t.selected}`**; it "
                    f"computes **{plan.computes.upper()}**. Here it runs as vLLM runs it: **`{plan.path}`** "
                    f"(what vLLM runs): {plan.note.rstrip('.')}. W4A8 native (`{plan.native}`) is "
                    f"compared with the W4A16 vLLM runs here (`{plan.fallback}`); `triton_w4a8` and "
                    f"`triton_w4a16` are {STAND_IN_LABEL}s.")
    elif t.selected:
        st.markdown(f"On **{host.label()}** vLLM {t.vllm_version} selects **`{t.selected}`**; it "
                    f"computes **{plan.computes.upper()}**. Here that is modelled by path **`{plan.path}`** "
                    f"({plan.fidelity}): {plan.note.rstrip('.')}.")
    else:
        st.markdown(f"On **{host.label()}** vLLM {t.vllm_version} finds no kernel for this layer "
                    f"({t.error_type}); the comparison runs the W4A8 native and W4A16 fallback paths only.")
    if plan.path and not plan.available:
        st.warning(f"`{plan.path}` cannot run on this machine: {plan.why}")
    elif plan.why:
        st.caption(f"`{plan.path}`: {plan.why}")
    if not host.is_cuda():
        engines = _engine_verdicts()
        refused = [v for v, s in engines.items() if not s.startswith("admitted")]
        with st.expander(f"Native engines on this CPU: {len(engines) - len(refused)} of "
                         f"{len(engines)} admitted", expanded=any("self-test" in engines[v] for v in refused)):
            st.caption("Each C engine is built here by this machine's compiler and admitted only "
                       "after its self-test passed in a child process (a crash there names the "
                       "engine unavailable; the next engine serves).")
            st.dataframe([{"engine": v, "standing": s} for v, s in engines.items()], hide_index=True,
                         width="stretch")


@st.cache_resource(show_spinner="Self-testing this CPU's native engines (once per build)...")
def _engine_verdicts() -> dict[str, str]:
    from workbench.bench import engine_verdicts

    return engine_verdicts()


def _path_label(name: str) -> str:
    from workbench.execution import path_role

    role = path_role(name)
    return f"{name} ({role})" if role else name


def _path_options(layer) -> dict[str, str]:
    from workbench.bench import int4_weight_of
    from workbench.execution import execution_path, execution_path_names

    w = int4_weight_of(layer)
    out = {}
    for name in execution_path_names():
        p = execution_path(name)
        ok, why = p.availability(w)
        out[name] = p.summary + ("" if ok else f" (unavailable: {why})")
    return out


def _kernel_paths(names: list[str]) -> list[KernelPath]:
    """The picked paths, from their names: the page reads what each one is (which compile at
    their first call); the sweep is handed their names, which its records carry."""
    from workbench.execution import execution_path

    return [execution_path(name) for name in names]


def _compile_first(worker, source: dict, paths: list[KernelPath], timeout_s: float) -> None:
    """Each path that compiles CUDA kernels at its first call makes that call before the sweep
    times anything, under a status line that says how long it took or why it cannot run.

    The call runs in the session's measuring child, once per child and layer: the compiled
    kernels stay there for the timed runs after it and for later reruns. The trade-off of a
    child (the server survives a crashing kernel): a new session, or the child started after
    a failure, compiles again, and says so here with its time."""
    from w4a8_kernels.errors import KernelError
    from workbench.errors import MeasurementDiedError

    for path in paths:
        if not path.jit or not path.probe()[0]:
            continue
        with st.status(f"Compiling `{path.name}`'s CUDA kernels (first call only)...") as box:
            try:
                took = worker.first_call(source, path.name, timeout_s=timeout_s)
                box.update(label=f"`{path.name}` ready ({took:.1f} s the first time)", state="complete")
            except KernelError as exc:  # the bench records why it cannot run
                box.update(label=f"`{path.name}` cannot run: {exc}", state="error")
            except MeasurementDiedError:
                box.update(label=f"`{path.name}` failed on its first call", state="error")
                raise


FAILURE_KEY = "kern.failure"


def _failure_view(ref) -> None:
    """A measurement that died (`workbench.contained`), said once: the next run clears it."""
    failed = st.session_state.pop(FAILURE_KEY, None)
    if failed and failed["layer_key"] == ref.key:
        st.error(plain(failed["message"]))


def _run(ref, paths: list[KernelPath], ms: list[int], reps: int, key: str) -> None:
    from workbench.errors import MeasurementDiedError

    ss = st.session_state
    try:
        _sweep(ref, paths, ms, reps, key)
    except MeasurementDiedError as exc:
        meta = ss.get("kern.meta")
        if meta and meta.get("layer_key") == ref.key and meta.get("status") == "running":
            meta["status"] = ("failed" + (f" at M = {exc.m}" if exc.m is not None else "") + f" ({exc.how}); "
                              f"measured up to M = {meta.get('done_m', 'none')}")
        ss[FAILURE_KEY] = {"layer_key": ref.key, "message": str(exc)}
        st.rerun()  # the page from what was measured, the failure said once above it


def _sweep(ref, paths: list[KernelPath], ms: list[int], reps: int, key: str) -> None:
    from workbench.bench import host_provenance
    from workbench.contained import timeout_from_env
    from workbench.noise import cpu_sample, load_check

    worker, source, timeout_s = widgets.measurement_worker(), loaders.layer_source(ref), timeout_from_env()
    names = [path.name for path in paths]
    ss = st.session_state
    ss["kern.records"] = []
    # The watch's body also runs once now, inline: with no sweep marked running yet, it passes.
    ss["kern.meta"] = None
    _stop_watch()
    ss["kern.meta"] = {"layer_key": ref.key, "label": ref.label, "paths": names, "ms": ms,
                       "status": "running", "provenance": host_provenance()}
    _compile_first(worker, source, paths, timeout_s)
    # the child measures: its CPU time is the sweep's own, never other processes' load
    helper = (worker.ensure_started(),)
    start = cpu_sample(helper)
    bar = st.progress(0.0, text="starting")
    # The figures so far are redrawn after each M: the header's Stop (which ends the script
    # with no rerun) then leaves them on the page, and the records stay in the session.
    live = st.empty()
    for i, m in enumerate(ms):
        def progress(done: int, total: int, msg: str, i: int = i) -> None:  # done of this M's total
            bar.progress(min(1.0, (i + done / total) / len(ms)), text=msg)

        recs = worker.bench(source, names, [m], repeats=reps, warmup=WARMUP, max_call_s=5.0,
                            error_rows=64, progress=progress, timeout_s=timeout_s)
        ss["kern.records"] = ss["kern.records"] + recs
        ss["kern.meta"]["done_m"] = m
        ss["kern.meta"]["load_end"] = _load()
        prov = ss["kern.meta"]["provenance"]  # the sweep so far, flagged where it was loaded
        prov["load_check"] = load_check(start, cpu_sample(helper), prov["threads"]).to_dict()
        with live.container():
            st.caption(f"Measured so far: M up to {m}.")
            figures(runs.record_rows(ss["kern.records"]), [], ss["kern.meta"], f"{key}-live-{m}",
                    export=False)
    ss["kern.meta"]["status"] = "done"
    live.empty()
    bar.empty()
    st.rerun()  # the page from the records, without the watch below (it ends with this run)


# How often the watch looks, in seconds, while a sweep runs.
STOP_WATCH_S = 1.5


@st.fragment(run_every=STOP_WATCH_S)
def _stop_watch() -> None:
    """Notices Streamlit's own Stop (the toolbar's), which ends the script with no rerun.

    That Stop leaves the sweep's last progress line on the page, as if it still ran. The
    browser keeps re-running this fragment on a timer; Streamlit runs it only between script
    runs, so a sweep still marked running here was stopped: it is marked so, and the whole
    page is redrawn (the stale line goes, the "stopped" message shows). A sweep that ends
    normally reruns the page itself, which no longer draws this watch.
    """
    meta = st.session_state.get("kern.meta")
    if meta and meta.get("status") == "running":
        meta["status"] = f"stopped after M = {meta.get('done_m', 'none')}"
        st.rerun(scope="app")


def _controls(layer, ref, plan, key: str, default_m: str | None) -> None:
    ss = st.session_state
    options = _path_options(layer)
    if "kern.paths" not in ss or ss.get("kern.paths.layer") != ref.key:
        ss["kern.paths"] = [p for p in plan.paths_to_compare() if p in options]
        ss["kern.paths.layer"] = ref.key
    if default_m and ss["kern.m_list"] == state.DEFAULTS["kern.m_list"]:
        ss["kern.m_list"] = default_m
    c1, c2, c3 = st.columns([3, 2, 1])
    with c1:
        state.bind(st.multiselect, "Paths", "kern.paths", options=list(options),
                   format_func=_path_label,
                   help="\n".join(f"- `{k}`: {v}" for k, v in options.items()))
    with c2:
        state.bind(st.text_input, "Token counts M", "kern.m_list")
    with c3:
        state.bind(st.number_input, "Repeats", "kern.reps", min_value=1, max_value=50, step=1)
    b1, b2, _ = st.columns([1, 1, 6])
    run = b1.button("Run", key=f"{key}.run", type="primary")
    # Any click interrupts a running script; this one just says so.
    stop = b2.button("Stop", key=f"{key}.stop")
    meta = ss.get("kern.meta")
    if stop and meta and meta.get("status") == "running":
        meta["status"] = f"stopped after M = {meta.get('done_m', 'none')}"
    elif meta and meta.get("status") == "running" and not run:
        meta["status"] = f"stopped after M = {meta.get('done_m', 'none')}"
    if run:
        from workbench.errors import InvalidInputError

        ms = state.parse_ms(ss["kern.m_list"])
        if not ss["kern.paths"]:
            raise InvalidInputError("paths: pick at least one kernel path to run")
        _run(ref, _kernel_paths(ss["kern.paths"]), ms, int(ss["kern.reps"]), key)


def _local_rows(ref) -> tuple[list[dict], dict | None]:
    ss = st.session_state
    meta = ss.get("kern.meta")
    if not meta or meta.get("layer_key") != ref.key:
        return [], meta
    return runs.record_rows(ss.get("kern.records", [])), meta


def _saved_rows(shape: tuple[int, int] | None, key: str) -> list[dict]:
    """Rows of the saved results the user picked, on one (N, K) shape."""
    ss = st.session_state
    files = runs.saved_files()
    names = [f.name for f in files]
    if not files:
        st.caption(f"No saved results in {runs.RESULTS_DIR} (the committed H200 results land there).")
    else:
        if "kern.saved" not in ss:
            ss["kern.saved"] = [n for n in names if n.startswith("h200") and n.endswith(".json")][:1]
        state.bind(st.multiselect, "Saved results to plot beside local ones", "kern.saved", options=names)
    uploaded = st.file_uploader("...or a results file (JSON or CSV from `python -m workbench bench` or "
                                "benchmarks/gpu_bench.py)", type=["json", "csv"], key=f"{key}.upload")
    sources = [(n, (runs.RESULTS_DIR / n).read_bytes()) for n in ss.get("kern.saved", []) if n in names]
    if uploaded is not None:
        sources.insert(0, (uploaded.name, uploaded.getvalue()))
    rows: list[dict] = []
    upload_rows: list[dict] = []
    for name, data in sources:
        try:
            prov, r = runs.read_saved(name, data)
        except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
            widgets.show_error(exc)
            continue
        if uploaded is not None and name == uploaded.name and not upload_rows:
            upload_rows = r
        rows += r
        desc = prov.get("gpu") or prov.get("device") or prov.get("cuda") or prov.get("cpu")
        if desc:
            st.caption(plain(f"{name}: {desc}" + (f", commit {prov['commit']}" if prov.get("commit") else "")))
    if not rows:
        return []
    # An uploaded file's shapes come first, and a new upload is shown at once: at its shape
    # closest to the local layer (it was plotted only once its shape, last in the list, was picked).
    mine = runs.shapes_of(upload_rows)
    shapes = mine + [sh for sh in runs.shapes_of(rows) if sh not in mine]
    labels = [f"N {n} x K {k}" for n, k in shapes]
    pool = range(len(mine)) if mine else range(len(shapes))
    default = pool[0]
    if shape is not None:  # the shape closest to the local layer
        default = min(pool, key=lambda i: abs(shapes[i][0] * shapes[i][1] - shape[0] * shape[1]))
    new_upload = uploaded is not None and mine and ss.get(f"{key}.upload_id") != uploaded.file_id
    if new_upload:
        ss[f"{key}.upload_id"] = uploaded.file_id
    if new_upload or ss.get("kern.saved_shape") not in labels:
        ss["kern.saved_shape"] = labels[default]
    state.bind(st.selectbox, "Saved shape", "kern.saved_shape", options=labels)
    n, k = shapes[labels.index(ss["kern.saved_shape"])]
    return [r for r in rows if (r["n"], r["k"]) == (n, k)]


def unreliable_points(meta: dict | None) -> dict[tuple[str, int], str]:
    """(path, M) -> why this machine's record there is not to be trusted (workbench.noise)."""
    from workbench.noise import record_unreliable

    out = {}
    for r in st.session_state.get("kern.records", []) if meta else []:
        why = record_unreliable(r)
        if why and r.get("median_ms") is not None:
            out[(r["path"], r["m"])] = why
    return out


def _speedups(local: list[dict], saved: list[dict], meta: dict | None) -> tuple[list[dict], dict]:
    """Speedup points and each series' measured crossover. A point either of whose records is
    unreliable (spread or load) is flagged and never makes a crossover; a run the noise
    check calls noisy as a whole makes none at all (its crossover is None, and said so)."""
    pts: list[dict] = []
    cross: dict[str, int | None] = {}
    paths = {r["series"] for r in local}
    fallback = "w4a16_fallback" if "w4a16_fallback" in paths else None
    if fallback:
        bad = unreliable_points(meta)
        noisy = bool(meta) and _noise(meta).noisy
        for p in sorted({r["series"] for r in local if r["computes"] == "w4a8"}):
            series = f"{p} over {fallback} [this machine, {_shapes(local)}]"
            s = runs.speedup_rows(local, p, fallback, series)
            for q in s:
                why = bad.get((p, q["m"])) or bad.get((fallback, q["m"]))
                if why:
                    q["unreliable"] = why
            pts += s
            trusted = [q for q in s if not q.get("unreliable")]
            cross[series] = None if noisy else runs.crossover_of(trusted) if trusted else None
            if noisy or len(trusted) < len(s):
                st.session_state.setdefault("kern.untrusted", {})[series] = (
                    "the run is noisy as a whole" if noisy else
                    f"{len(s) - len(trusted)} of {len(s)} points unreliable")
    saved_paths = {r["series"] for r in saved}
    for fast in sorted(p for p in saved_paths if ": w4a8 g" in p):
        slow = fast.replace(": w4a8 g", ": w4a16 g")
        if slow in saved_paths:
            series = f"{fast} over {slow.split(': ')[1]} [{_shapes(saved)}]"
            s = runs.speedup_rows(saved, fast, slow, series)
            pts += s
            cross[series] = runs.crossover_of(s)
    return pts, cross


def _export(fig, name: str, key: str) -> None:
    from workbench import plots

    c1, c2 = st.columns([1, 1])
    c1.download_button(f"{name}.html", plots.figure_html(fig, offline=False), file_name=f"{name}.html",
                       mime="text/html", key=f"{key}-{name}-html", on_click="ignore")
    if c2.button(f"Render {name}.png", key=f"{key}-{name}-png-render"):
        try:
            png = plots.figure_png(fig)
        except Exception as exc:  # noqa: BLE001 - kaleido needs a local Chrome: say so, keep going
            st.error(plain(f"PNG export of {name}: kaleido could not render it ({type(exc).__name__}: "
                           f"{exc}); it needs kaleido and a Chrome or Chromium on this machine. The HTML "
                           "export works."))
        else:
            st.download_button(f"{name}.png", png, file_name=f"{name}.png", mime="image/png",
                               key=f"{key}-{name}-png", on_click="ignore")


def _shapes(rows: list[dict]) -> str:
    return ", ".join(f"N {n} x K {k}" for n, k in sorted({(r["n"], r["k"]) for r in rows}))


def figures(local: list[dict], saved: list[dict], meta: dict | None, key: str, *,
            export: bool = True, layer=None) -> None:
    """Latency (this machine and saved results apart), speedup and error; each title gives its shape."""
    from workbench import plots

    note = f"; {_noise_text(_noise(meta))}" if local and meta else ""
    for rows, where, name in ((local, "this machine", "latency"), (saved, "saved results", "latency_saved")):
        if rows:
            lat = plots.latency_figure(rows, series="series", title=escape(f"Latency, {where}: {_shapes(rows)} "
                                                          f"(bars p20-p80{note if rows is local else ''})"))
            st.plotly_chart(lat, key=f"{key}-{name}")
            if export:
                _export(lat, name, key)
    pts, cross = _speedups(local, saved, meta)
    if pts:
        rules = state.rule_set()  # the sidebar's: INC's token switch is that release's
        sp = plots.speedup_figure(pts, crossovers=cross, rules=rules, title=escape(
            "W4A8 speedup over the W4A16 fallback: " + "; ".join(
                f"{w} {_shapes(r)}" for w, r in (("this machine", local), ("saved", saved)) if r)))
        st.plotly_chart(sp, key=f"{key}-speedup")
        untrusted = st.session_state.pop("kern.untrusted", {})

        def said(s, m):
            if s in untrusted and not m:
                return f"none drawn ({untrusted[s]}: an unreliable timing never makes a crossover)"
            return ("M = " + str(m) if m else "never in the measured range") + (
                f" (from the reliable points only; {untrusted[s]})" if s in untrusted else "")

        st.caption(plain("Measured crossover: " + "; ".join(f"{s}: {said(s, m)}" for s, m in cross.items())
            + f". vLLM {rules.version}'s INC XPU path switches W4A8 on at {rules.MIN_TOKENS_FOR_INT8} "
            "tokens per call."))
        if export:
            _export(sp, "speedup", key)
    err_rows = [r for r in local if r.get("sqnr_db") is not None]
    if err_rows:
        ef = plots.error_figure(err_rows, title=f"Error against tokens (M), this machine: {_shapes(err_rows)}",
                                yaxis_title="SQNR (dB) against " + ("x @ W_float^T" if layer is None or layer.source_weight
                                                                    is not None else "x @ dequant(W4)^T"))
        st.plotly_chart(ef, key=f"{key}-error")
        if export:
            _export(ef, "error", key)


def error_reference(layer) -> str:
    """What a path's rel_error and SQNR are measured against, for the faces: the float layer
    where its weight is known, else the int4 weight's own dequantized product."""
    known = layer.source_weight is not None
    return ("x @ W_float^T, the float layer" if known else
            "x @ dequant(W4)^T: a checkpoint holds no float weight, so the int4 weight's own error is not in it")


def split_section(layer, ref, key: str) -> None:
    """The error split in two, each part named by its reference (workbench.error_split)."""
    from workbench import plots
    from workbench.error_split import split_of_layer

    ss = st.session_state
    real = ref.source == "trained"
    c1, c2 = st.columns(2)
    m = c1.number_input("Tokens M for the split", min_value=1, max_value=4096, value=64, key=f"{key}.split_m")
    kinds = ["synthetic", "real"] if real else ["synthetic"]
    kind = c2.radio("Activations", kinds, horizontal=True, key=f"{key}.split_kind",
                    format_func=lambda k: {"synthetic": "synthetic (seeded normal, bf16)",
                                           "real": "real (MiniLM's own inputs on the packaged sentences)"}[k])
    if st.button("Split the error", key=f"{key}.split_run"):
        ss["kern.split"] = {"layer_key": ref.key, "split": split_of_layer(layer, int(m), kind).to_json()}
    got = ss.get("kern.split")
    if not got or got["layer_key"] != ref.key:
        return
    doc = got["split"]
    st.caption(plain(f"{doc['inputs']}; N {doc['n']} x K {doc['k']}, group {doc['group_size']}, "
                     f"M = {doc['m']}. Exact float64 math, no kernel: a kernel's own error is kernel_rel_error."))
    st.dataframe([{"part": p["part"], "measured": p["measured"], "against (reference)": p["reference"],
                   "rel_error": p["rel_error"], "SQNR dB": p["sqnr_db"],
                   "median token": p["median_token_rel_error"], "worst token": p["worst_token_rel_error"],
                   "why not known": p["why"] or None} for p in doc["parts"]],
                 hide_index=True, width="stretch", key=f"{key}-split-table")
    per_tok = {f"{p['part']} (against {p['reference'].split(' (')[0]})": p["per_token"]
               for p in doc["parts"] if p["per_token"]}
    if per_tok:
        fig = plots.per_token_error_figure(per_tok, title=escape(f"Error per token, split: M = {doc['m']}"))
        st.plotly_chart(fig, key=f"{key}-split-per-token")


def per_token(layer, ref, key: str) -> None:
    from workbench import plots

    ss = st.session_state
    meta = ss.get("kern.meta") or {}
    paths = meta.get("paths") or ss["kern.paths"]
    real = ref.source == "trained"
    c1, c2 = st.columns(2)
    with c1:
        m = st.number_input("M for per-token error", min_value=1, max_value=4096, value=64,
                            key=f"{key}.pt_m")
    with c2:
        st.markdown("Activations: **real MiniLM inputs on real sentences**" if real else
                    "Activations: seeded normal, bf16 (as the sweep uses)")
    if st.button("Compute per-token error", key=f"{key}.pt_run"):
        from workbench.contained import timeout_from_env

        # the paths run in the session's measuring child, as the sweep's do
        got = widgets.measurement_worker().per_token(loaders.layer_source(ref), paths, int(m),
                                                     "real" if real else "synthetic", timeout_s=timeout_from_env())
        ss["kern.per_token"] = {"layer_key": ref.key, **got}
    pt = ss.get("kern.per_token")
    if pt and pt["layer_key"] == ref.key:
        fig = plots.per_token_error_figure(pt["errors"], title=escape(
            f"Per-token error at M = {pt['m']}, N {layer.out_features} x K {layer.in_features} "
            f"(against {error_reference(layer=layer)})"))
        st.plotly_chart(fig, key=f"{key}-per-token")
        for p, why in pt["skipped"].items():
            st.caption(plain(f"{p} not run: {why}"))
        _export(fig, "per_token_error", key)


def comparison(*, key: str = "kern", default_m: str | None = None, auto_run: bool = False) -> None:
    """Plan, run controls and the figures, for the current layer (the Kernels page and the Tour)."""
    ss = st.session_state
    ref = loaders.current_ref(ss)
    layer = loaders.load_layer(ref)
    t, plan, host = engine_plan(ref)
    plan_view(t, plan, host)
    _controls(layer, ref, plan, key, default_m)
    _failure_view(ref)
    local, meta = _local_rows(ref)
    if auto_run and not local and not (meta and meta.get("layer_key") == ref.key):
        _run(ref, _kernel_paths(ss["kern.paths"]), state.parse_ms(ss["kern.m_list"]),
             int(ss["kern.reps"]), key)
        local, meta = _local_rows(ref)
    if meta and meta.get("layer_key") == ref.key:
        st.caption(f"Results for {plain(meta['label'])}: M = {meta['ms']}, {meta['status']}; measured on "
                   f"{meta['provenance'].get('cpu')}, {meta['provenance'].get('threads')} threads, "
                   f"load {meta['provenance'].get('loadavg_1m') or 0:.1f} at the start.")
        noise_view(meta)
    elif meta:
        st.info(f"The last results are for {plain(meta['label'])}; press Run for this layer.")
    if local:
        figures(local, [], meta, key, export=False, layer=layer)
        table = [{k: r[k] for k in ("path", "m", "median_us", "sqnr_db", "rel_error", "kernel_rel_error")}
                 for r in local]
        st.dataframe(table, hide_index=True, width="stretch")


def speedup_story(*, key: str = "inc") -> None:
    """Saved (H200) and local speedup curves with the crossover and INC's 512 marked."""
    from workbench import plots

    ss = st.session_state
    ref = loaders.current_ref(ss)
    local, meta = _local_rows(ref)
    saved = _saved_rows(None, key)
    pts, cross = _speedups(local, saved, meta)
    if not pts:
        st.info("No speedup curve yet: run a sweep on the Kernels page, or pick saved results above.")
        fig = plots.speedup_figure([], crossovers={}, rules=state.rule_set())
    else:
        fig = plots.speedup_figure(pts, crossovers=cross, rules=state.rule_set())
    st.plotly_chart(fig, key=f"{key}-speedup")
    for s, m in cross.items():
        st.markdown(f"- **{plain(s)}**: W4A8 wins from **M = {m}**" if m else
                    f"- **{plain(s)}**: W4A8 never wins in the measured range")


def render() -> None:
    st.title("Kernels")
    ss = st.session_state
    try:
        ref = loaders.current_ref(ss)
        layer = loaders.load_layer(ref)
        t, plan, host = engine_plan(ref)
    except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
        widgets.show_error(exc)
        return
    st.markdown(f"Layer **{plain(ref.label)}**: K {layer.in_features}, N {layer.out_features}, "
                f"group {layer.group_size}. Paths run on this machine. " + plain(
                    f"rel_error and SQNR are against {error_reference(layer=layer)}; kernel_rel_error against "
                    "the exact float64 math of what the path computes (kernels.reference)."))
    plan_view(t, plan, host)
    try:
        _controls(layer, ref, plan, "kern", None)
    except Exception as exc:  # noqa: BLE001
        widgets.show_error(exc)
    _failure_view(ref)
    local, meta = _local_rows(ref)
    if meta and meta.get("layer_key") == ref.key:
        prov = meta["provenance"]
        st.caption(f"Results: M = {meta['ms']}, {meta['status']}; {prov.get('cpu')}, "
                   f"{prov.get('threads')} threads, torch {prov.get('torch')}, load "
                   f"{prov.get('loadavg_1m') or 0:.1f} at the start. Ratios between paths are "
                   "what to read: they are timed round-robin in the same process.")
        noise_view(meta)
    elif meta:
        st.info(f"The last results are for {plain(meta['label'])}; press Run for this layer.")
    st.subheader("Saved results")
    saved = _saved_rows((layer.out_features, layer.in_features), "kern")
    from workbench.ui.views import report  # predicted curves for the trace page's platform

    with widgets.user_errors():
        report.predicted_section(layer.out_features, layer.in_features, layer.group_size,
                                 local if ss["pf.preset"] == "host" else [])
    if local or saved:
        st.subheader("Figures")
        figures(local, saved, meta, "kern", layer=layer)
    st.subheader("Error, split: int4 weight and int8 activations")
    try:
        split_section(layer, ref, "kern")
    except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
        widgets.show_error(exc)
    if local:
        st.subheader("Per-token error")
        try:
            per_token(layer, ref, "kern")
        except Exception as exc:  # noqa: BLE001
            widgets.show_error(exc)
        st.subheader("Data")
        from workbench.noise import record_unreliable

        st.dataframe([{**r, "unreliable": record_unreliable(r)} for r in ss["kern.records"]], hide_index=True,
                     width="stretch", key="kern-data",
                     column_order=["path", "m", "median_ms", "p20_ms", "p80_ms", "unreliable", "sqnr_db",
                                   "rel_error", "kernel_rel_error", "detail", "why"])
        st.download_button("Records as CSV", runs.records_csv(ss["kern.records"]),
                           file_name="kernels.csv", mime="text/csv", key="kern-csv", on_click="ignore")
        st.download_button("Records as JSON", json.dumps({"provenance": meta["provenance"],
                                                          "records": ss["kern.records"]}, indent=1),
                           file_name="kernels.json", mime="application/json", key="kern-json",
                           on_click="ignore")
