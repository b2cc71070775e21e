"""Model report: every linear layer of a model preset or of the loaded checkpoint on the platform
and TP size picked in the sidebar: scheme, kernel, what runs, predicted time at a decode and a
prefill M, totals; exportable as CSV and JSON. The work is the core's (`workbench.perf.report`).
"""
from __future__ import annotations

import json
from html import escape

import streamlit as st

from workbench.errors import USER_ERRORS
from workbench.ui import loaders, state, widgets
from workbench.ui.plain import plain

_COLUMNS = ["layer", "count", "k", "n", "group_size", "kernel", "computes", "decode_us", "decode_low_us",
            "decode_high_us", "prefill_us", "prefill_low_us", "prefill_high_us", "basis",
            "native_decode_us", "native_prefill_us", "runtime", "error"]


@st.cache_data(show_spinner=False, max_entries=64)
def _report(source: str, platform: str, tp: int, decode_m: int, prefill_m: int, version: str) -> dict:
    from workbench.perf.report import model_report

    rep = model_report(source, platform, tp, decode_m=decode_m, prefill_m=prefill_m, version=version)
    return {"json": rep.to_json(), "csv": rep.to_csv()}


@st.cache_data(show_spinner=False, max_entries=32)
def _comparison(source: str, schemes: tuple, platforms: tuple, tp: int, decode_m: int, prefill_m: int,
                version: str) -> dict:
    from workbench.perf.compare import model_comparison

    cmp = model_comparison(source, schemes, platforms, tp, decode_m=decode_m, prefill_m=prefill_m, version=version)
    return {"json": cmp.to_json(), "csv": cmp.to_csv(), "rows": cmp.rows()}


def _sources() -> tuple[list[str], dict[str, str]]:
    """(the report's sources, their labels): the loaded checkpoint first, named as the user
    knows it (an upload by the files chosen, never by its temporary folder), then presets."""
    from workbench.models import MODELS

    out = list(MODELS)
    labels = {m: m for m in MODELS}
    try:
        ref = loaders.current_ref(st.session_state)
        if ref.path is not None:
            out.insert(0, str(ref.path))
            labels[str(ref.path)] = f"loaded checkpoint: {ref.label.rsplit(' / ', 1)[0]}"
    except USER_ERRORS:  # no loaded checkpoint: presets only (the Layer page says why)
        pass
    return out, labels


def render() -> None:
    ss = st.session_state
    st.title("Model report")
    version = ss["vllm.version"]  # the sidebar's rule set, as every trace uses
    st.caption(f"Every linear layer, what vLLM {version} runs for it on the platform picked in the sidebar, "
               "and its predicted time per rank. Presets are quantized as llm-compressor's W4A8 preset.")
    sources, labels = _sources()
    ss.setdefault("report.source", sources[0])
    if ss["report.source"] not in sources:
        ss["report.source"] = sources[0]
    state.bind(st.selectbox, "Model preset or checkpoint", "report.source", options=sources,
               format_func=lambda s: labels.get(s, s))
    c1, c2 = st.columns(2)
    ss.setdefault("report.decode_m", 1)
    ss.setdefault("report.prefill_m", 2048)
    state.bind(c1.number_input, "Decode M (tokens per call)", "report.decode_m", min_value=1, max_value=65536)
    state.bind(c2.number_input, "Prefill M", "report.prefill_m", min_value=1, max_value=65536)
    platform = ss["pf.preset"]
    tp = int(ss["tp.size"])
    if not _host_ready(platform):  # costing on this machine needs its calibration, never started unasked
        return
    with st.spinner("Predicting every layer..."):
        out = _report(ss["report.source"], platform, tp, int(ss["report.decode_m"]), int(ss["report.prefill_m"]),
                      version)
    doc = out["json"]
    t = doc["totals"]
    shown = labels.get(ss["report.source"], ss["report.source"])
    # Bold is Markdown of ours, around text escaped as plain (a path or name is the user's).
    head = f"**{plain(shown)}** on **{plain(platform)}**, "
    if t is None:  # a layer vLLM refuses: the model does not load, so it has no time
        st.error(head + plain(
            f"TP {tp} does not load: vLLM refuses {len(doc['refused'])} of {len(doc['layers'])} "
            "layers, so there is no total.") + "\n\n" + "\n\n".join(
            "- " + plain(f"{r['layer']}: {' '.join(str(r['error']).split())[:300]}")
            for r in doc["refused"]))
    else:
        from workbench.perf.wording import scaled

        bound = any(r["basis"] == "roofline" for r in doc["layers"])
        lead = "at least " if bound else ""
        band = (lambda lo, hi: "" if bound else f" ({scaled(lo)} to {scaled(hi)})")
        st.markdown(head + plain(
            f"TP {tp}: decode {lead}{scaled(t['decode_us'])}"
            f"{band(t['decode_low_us'], t['decode_high_us'])}, prefill {lead}{scaled(t['prefill_us'])}"
            f"{band(t['prefill_low_us'], t['prefill_high_us'])} per forward"
            f"{' (roofline bounds in the sum)' if bound else ''}; this project's "
            f"native W4A8 {scaled(t['native_decode_us'])} / {scaled(t['native_prefill_us'])}."))
    for note in doc["notes"]:
        st.caption(plain(note))
    rows = [{c: r.get(c) for c in _COLUMNS} for r in doc["layers"]]
    if st.toggle("Flag the layers another vLLM release runs differently", key="report.upgrade"):
        _flag_upgrade(rows, ss["report.source"], platform, tp, int(ss["report.decode_m"]),
                      int(ss["report.prefill_m"]), version)
    st.dataframe(rows, width="stretch", hide_index=True)
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in shown.split(": ")[-1]) or "model"
    d1, d2 = st.columns(2)
    d1.download_button("report.csv", out["csv"], file_name=f"{name}_{platform}_tp{tp}.csv", mime="text/csv",
                       key="report-csv", on_click="ignore")
    # an upload is named as the user knows it, never by the server's temporary folder
    d2.download_button("report.json", json.dumps({**doc, "source": shown}, indent=1),
                       file_name=f"{name}_{platform}_tp{tp}.json",
                       mime="application/json", key="report-json", on_click="ignore")
    _compare_section(ss["report.source"], shown, tp, version)


def _flag_upgrade(rows: list[dict], source: str, platform: str, tp: int, decode_m: int, prefill_m: int,
                  version: str) -> None:
    """A column per other modelled release: where a layer's kernel or activation differs under
    it (older -> newer), or "no change"."""
    from workbench.dispatch.versions import available

    def key(v: str) -> tuple:
        return tuple(int(x) for x in v.split("."))

    for other in (v for v in available() if v != version):
        theirs = {r["layer"]: r for r in _report(source, platform, tp, decode_m, prefill_m, other)["json"]["layers"]}
        old_first = key(other) < key(version)
        for row in rows:
            o = theirs.get(row["layer"], {})
            changed = []
            for f in ("kernel", "computes"):
                a, b = (o.get(f), row.get(f)) if old_first else (row.get(f), o.get(f))
                if a != b:
                    changed.append(f"{f}: {a or 'refused'} -> {b or 'refused'}")
            row[f"vs vLLM {other}"] = "; ".join(changed) or "no change"


_COMPARE_COLUMNS = ["layer", "count", "k", "n", "group_size", "scheme", "platform", "kernel", "activation",
                    "fails", "decode_us", "decode_low_us", "decode_high_us", "prefill_us", "prefill_low_us",
                    "prefill_high_us", "basis", "error"]


def _compare_section(source: str, shown: str, tp: int, version: str) -> None:
    """The decision: the model under two schemes on the platforms picked, side by side."""
    from workbench.models import MODELS
    from workbench.perf.compare import default_schemes
    from workbench.perf.report import CHECKPOINT
    from workbench.perf.selected import SCHEMES
    from workbench.perf.wording import scaled

    ss = st.session_state
    st.subheader("W4A8 against W4A16, side by side")
    st.caption("The same model saved under each scheme (a checkpoint as saved against its twins: the same "
               "weights, the scheme's activations), on each platform: what vLLM runs per layer, totals only "
               "where every layer loads, and which wins by how much. A ratio's band pairs one side's low "
               "with the other's high.")
    options = list(SCHEMES) if source in MODELS else [CHECKPOINT, *SCHEMES]
    ss.setdefault("report.schemes", list(default_schemes(source)))
    if not ss["report.schemes"] or any(x not in options for x in ss["report.schemes"]):
        ss["report.schemes"] = list(default_schemes(source))
    presets = [p for p in loaders.preset_names() if p != "host"]
    ss.setdefault("report.platforms", [p for p in dict.fromkeys([ss["pf.preset"], "sm90-h200", "x86-spr-amx"])
                                       if p in presets][:2])
    c1, c2 = st.columns(2)
    state.bind(c1.multiselect, "Schemes", "report.schemes", options=options)
    state.bind(c2.multiselect, "Platforms", "report.platforms", options=presets)
    schemes, platforms = tuple(ss["report.schemes"]), tuple(ss["report.platforms"])
    if len(schemes) < 2 or not platforms:
        st.info("Pick two schemes and at least one platform to compare.")
        return
    with st.spinner("Tracing and costing every layer under each scheme..."):
        out = _comparison(source, schemes, platforms, tp, int(ss["report.decode_m"]), int(ss["report.prefill_m"]),
                          version)
    doc = out["json"]
    st.markdown("\n".join("- " + plain(v["sentence"]) for v in doc["verdicts"]))
    totals = []
    for t in doc["totals"]:
        lead = "at least " if t["bound"] else ""
        row = {"scheme": t["scheme"], "platform": t["platform"], "loads": t["loads"]}
        for ph in ("decode", "prefill"):
            row[ph] = (f"{lead}{scaled(t[f'{ph}_us'])}" if t["loads"] else "no total: "
                       + ", ".join(t["refused_layers"]) + " refused")
            row[f"{ph} band"] = ("-" if not t["loads"] or t["bound"] else
                                 f"{scaled(t[f'{ph}_low_us'])} to {scaled(t[f'{ph}_high_us'])}")
        totals.append(row)
    st.dataframe(totals, width="stretch", hide_index=True, key="report-compare-totals")
    st.dataframe([{c: r.get(c) for c in _COMPARE_COLUMNS} for r in out["rows"]], width="stretch",
                 hide_index=True, key="report-compare-layers")
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in shown.split(": ")[-1]) or "model"
    d1, d2 = st.columns(2)
    d1.download_button("comparison.csv", out["csv"], file_name=f"{name}_compare_tp{tp}.csv", mime="text/csv",
                       key="compare-csv", on_click="ignore")
    d2.download_button("comparison.json", json.dumps({**doc, "source": shown}, indent=1),
                       file_name=f"{name}_compare_tp{tp}.json",
                       mime="application/json", key="compare-json", on_click="ignore")


# --------------------------------------------------------------------------- predicted costs elsewhere


def _modelled_group(g: int, k: int) -> int:
    """The layer's group size where it is one of the usual sizes and divides K, else per-channel
    (-1): the cost shown is then the per-channel one."""
    return g if g in (-1, 32, 64, 128, 256) and (g == -1 or k % g == 0) else -1


@st.cache_data(show_spinner=False, max_entries=128)
def _curves(platform: str, n: int, k: int, g: int) -> list:
    from workbench.perf.predict import predict, sweep_ms

    gg = _modelled_group(g, k)
    return [predict(platform, path, m, n, k, gg)
            for path in ("w4a8_native", "w4a16_fallback", "bf16_dense") for m in sweep_ms(1, 8192)]


# A calibration times several shapes and paths, up to three times over: its limit is this
# many times one run's.
CALIBRATION_TIMEOUT_FACTOR = 3


def _host_ready(platform: str, *, quiet: bool = False) -> bool:
    """The app never starts this machine's calibration unasked (it times kernels for seconds)."""
    from workbench.perf.cpu import cached_host_calibration, host_calibration

    if platform != "host" or cached_host_calibration() is not None:
        for text in st.session_state.pop("pred.calibration_warnings", None) or []:
            st.warning(plain(text))
        return True
    if quiet:
        return False
    st.info("This machine is not calibrated yet: the calibration times its kernels at a few shapes "
            "(seconds; cached). Or pick a preset in the sidebar for its predicted curves.")
    if st.button("Calibrate this machine", key="pred-calibrate"):
        from workbench.contained import timeout_from_env

        # It times kernels: in the session's measuring child (`workbench.contained`), which
        # caches it on disk; a crash, a hang or an out-of-memory there is said here, once.
        with st.spinner("Calibrating this machine..."), widgets.user_errors():
            said = widgets.measurement_worker().calibrate(timeout_s=CALIBRATION_TIMEOUT_FACTOR * timeout_from_env())
            host_calibration.cache_clear()  # the child's, read from the cache from now on
            # under load, noisy or refused: said once, on the next run of the page
            st.session_state["pred.calibration_warnings"] = said
            st.rerun()
    return False


def predicted_section(n: int, k: int, g: int, measured: list[dict] | None = None, *, key: str = "pred") -> None:
    """The Kernels page's predicted curves for the platform picked on the trace page: this
    project's paths, and what vLLM runs for the layer saved as W4A8 and as W4A16."""
    from workbench import plots
    from workbench.perf.predict import predicted_crossover, sweep_ms
    from workbench.perf.selected import what_vllm_runs

    platform = st.session_state["pf.preset"]
    version = st.session_state["vllm.version"]
    st.subheader(f"Predicted on {platform}")
    if not _host_ready(platform):
        return
    preds = _curves(platform, n, k, g)
    fast = [p for p in preds if p.path == "w4a8_native"]
    slow = [p for p in preds if p.path == "w4a16_fallback"]
    cross = predicted_crossover(fast, slow)
    vllm = what_vllm_runs(platform, sweep_ms(1, 8192), n, k, _modelled_group(g, k), version=version)
    shown = preds + list(vllm.predictions)
    top = max(p.m for p in preds)
    # The crossover drawn is the one a vLLM user gets where both checkpoints are costed.
    drawn = vllm.crossover if vllm.crossover and vllm.crossover[0] else cross
    # A plotly title is HTML, not Markdown: `escape`, not `plain` (its backslashes would show).
    # The legend names the roofline only where one is drawn (not on a calibrated host).
    fig = plots.prediction_figure(shown, measured or [], crossover=drawn, title=escape(
        f"Predicted latency, {platform}: N {n} x K {k}, g {g} (dashed: predicted, band shaded"
        + ("; dotted: roofline)" if plots.has_roofline(shown) else ")")))
    st.plotly_chart(fig, key=f"{key}-predicted")
    bases = sorted({f"{p.path}: {p.basis}" for p in shown if p.m == 1})

    from workbench.perf.wording import lead_text

    def when(c):
        if not c[0]:
            return f"never stays ahead in 1-{top}"
        if c[1] == 1 and c[2] is None:  # the band spans the whole range: the crossover is not known
            return f"stays ahead from M = {c[0]}, but that crossover's band spans all of 1 to beyond {top}: undetermined"
        return f"stays ahead from M = {c[0]} ({plots.crossover_band(c[1], c[2], top)})"

    runs = f"W4A8 runs {vllm.w4a8[0].kernel}; W4A16 runs {vllm.w4a16[0].kernel}"
    theirs = (f"the W4A8 checkpoint {when(vllm.crossover)}; "
              + lead_text(vllm.w4a8, vllm.w4a16, "the W4A8 checkpoint", "the W4A16 one") if vllm.crossover else
              "no crossover: a side is only bounded (roofline) or cannot run here")
    st.caption(plain(f"Basis: {'; '.join(bases)}. What vLLM {version} runs: {runs}; {theirs}. "
                     f"This project's W4A8 native against its W4A16 fallback: {when(cross)}; "
                     + lead_text(fast, slow, "W4A8 native", "the W4A16 fallback") + "."))


def cost_line(trace, n: int, k: int, g: int, m: int) -> str:
    """The trace page's sentence: what the chosen kernel costs at M against the native W4A8."""
    from workbench.perf.predict import cost_of_runtime, predict

    platform = st.session_state["pf.preset"]
    if platform == "host" and not _host_ready(platform, quiet=True):
        return ("Cost: this machine is not calibrated yet (python -m workbench predict --platform host "
                "calibrates it in seconds); pick a preset for its predicted cost.")
    gg = _modelled_group(g, k)
    sel = cost_of_runtime(platform, trace.runtime_detail, m, n, k, gg, selected=trace.selected, error=trace.error)
    nat = predict(platform, "w4a8_native", m, n, k, gg)
    from workbench.perf.wording import band_text, ratio_text, time_text

    def cost(p) -> str:  # a roofline figure is a bound: no band, no ratio
        band = band_text(p.low_us, p.high_us, p.basis)
        return time_text(p.predicted_us, p.basis) + ("" if band == "-" else f" ({band}, {p.basis})")

    if sel.predicted_us is None:
        return (f"Cost at M = {m}: the chosen kernel does not run here; this project's native W4A8 would take "
                f"{cost(nat)}.")
    ratio = ratio_text(sel.predicted_us, sel.basis, nat.predicted_us, nat.basis, "the native time")
    return (f"Cost at M = {m} on {platform}: {trace.selected} {cost(sel)}; native W4A8 {cost(nat)}"
            + (f": {ratio}." if ratio else ": no ratio (a roofline bound is not a time)."))


def cost_view(trace, ref) -> None:
    """The trace page's cost line at the user's M (per-rank shape of the traced layer)."""
    ss = st.session_state
    ss.setdefault("trace.cost_m", 16)
    spec = loaders.layer_spec(ref)
    k, n = spec.in_features, spec.out_features
    if trace.mp_config is not None:
        k, n = trace.mp_config.partition_weight_shape
    c1, c2 = st.columns([1, 4])
    state.bind(c1.number_input, "M for the cost", "trace.cost_m", min_value=1, max_value=65536)
    try:
        c2.markdown(plain(cost_line(trace, n, k, spec.group_size, int(ss["trace.cost_m"]))))
    except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
        widgets.show_error(exc)
