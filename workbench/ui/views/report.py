"""Model report: every linear layer of a model preset or of the loaded checkpoint on the platform
and TP size picked in the sidebar: scheme, kernel, what runs, predicted time at a decode and a
prefill M, totals; exportable as CSV and JSON. The work is the core's (`workbench.perf.report`).
"""
from __future__ import annotations

import json

import streamlit as st

from workbench.ui import loaders, state
from workbench.ui.plain import plain

_COLUMNS = ["layer", "count", "k", "n", "group_size", "kernel", "computes", "decode_us", "decode_low_us",
            "decode_high_us", "prefill_us", "prefill_low_us", "prefill_high_us", "basis",
            "native_decode_us", "native_prefill_us", "runtime", "error"]


@st.cache_data(show_spinner=False, max_entries=64)
def _report(source: str, platform: str, tp: int, decode_m: int, prefill_m: int) -> dict:
    from workbench.perf.report import model_report

    rep = model_report(source, platform, tp, decode_m=decode_m, prefill_m=prefill_m)
    return {"json": rep.to_json(), "csv": rep.to_csv()}


def _sources() -> list[str]:
    from workbench.models import MODELS

    out = list(MODELS)
    try:
        ref = loaders.current_ref(st.session_state)
        if ref.path is not None:
            out.insert(0, str(ref.path))
    except Exception:  # noqa: BLE001 - no loaded checkpoint: presets only (the Layer page says why)
        pass
    return out


def render() -> None:
    ss = st.session_state
    st.title("Model report")
    st.caption("Every linear layer, what vLLM 0.33.0 runs for it on the platform picked in the sidebar, "
               "and its predicted time per rank. Presets are quantized as llm-compressor's W4A8 preset.")
    sources = _sources()
    ss.setdefault("report.source", sources[0])
    if ss["report.source"] not in sources:
        ss["report.source"] = sources[0]
    state.bind(st.selectbox, "Model preset or checkpoint", "report.source", options=sources)
    c1, c2 = st.columns(2)
    ss.setdefault("report.decode_m", 1)
    ss.setdefault("report.prefill_m", 2048)
    state.bind(c1.number_input, "Decode M (tokens per call)", "report.decode_m", min_value=1, max_value=65536)
    state.bind(c2.number_input, "Prefill M", "report.prefill_m", min_value=1, max_value=65536)
    platform = ss["pf.preset"]
    tp = int(ss["tp.size"])
    with st.spinner("Predicting every layer..."):
        out = _report(ss["report.source"], platform, tp, int(ss["report.decode_m"]), int(ss["report.prefill_m"]))
    doc = out["json"]
    t = doc["totals"]
    st.markdown(plain(f"**{doc['source']}** on **{platform}**, TP {tp}: decode {t['decode_us']:.1f} us "
                      f"({t['decode_low_us']:.1f}-{t['decode_high_us']:.1f}), prefill {t['prefill_us']:.1f} us "
                      f"({t['prefill_low_us']:.1f}-{t['prefill_high_us']:.1f}) per forward; this project's "
                      f"native W4A8 {t['native_decode_us']:.1f} / {t['native_prefill_us']:.1f} us."))
    for note in doc["notes"]:
        st.caption(plain(note))
    rows = [{c: r.get(c) for c in _COLUMNS} for r in doc["layers"]]
    st.dataframe(rows, width="stretch", hide_index=True)
    name = str(doc["source"]).rstrip("/").split("/")[-1]
    d1, d2 = st.columns(2)
    d1.download_button("report.csv", out["csv"], file_name=f"{name}_{platform}_tp{tp}.csv", mime="text/csv",
                       key="report-csv", on_click="ignore")
    d2.download_button("report.json", json.dumps(doc, indent=1), file_name=f"{name}_{platform}_tp{tp}.json",
                       mime="application/json", key="report-json", on_click="ignore")
