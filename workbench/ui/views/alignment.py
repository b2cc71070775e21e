"""Alignment: every layer's tensor-parallel partition against every candidate kernel.

vLLM's loop stops at the first kernel that accepts. To show what every later candidate
would have said, the table re-runs the same loop with the accepted kernels added to
`VLLM_DISABLED_KERNELS`, until none is left: each verdict is still vLLM's own check
(`workbench.alignment`, shared with notebook 03). This page only caches and draws.
"""
from __future__ import annotations

import json
from html import escape

import streamlit as st

from workbench import alignment
from workbench.ui import loaders, state, widgets
from workbench.ui.plain import plain


@st.cache_data(show_spinner=False, max_entries=64)
def _checkpoint_table(layer_key: str, _specs, platform_json: str, env_json: str, tp: int,
                      parallel: str | None, version: str) -> list[dict]:
    from workbench.platforms import platform_from_json

    return alignment.shard_rows(_specs, platform_from_json(json.loads(platform_json)),
                                json.loads(env_json), tp, parallel, version)


@st.cache_data(show_spinner=False, max_entries=64)
def _model_table(layer_key: str, _spec, model: str, platform_json: str, env_json: str,
                 tp: int, version: str) -> list[dict]:
    from workbench.platforms import platform_from_json

    return alignment.model_shard_rows(_spec, model, platform_from_json(json.loads(platform_json)),
                                      json.loads(env_json), tp, version)


def shard_table() -> tuple[list[dict], str]:
    """The rows for the current Shapes choice at the TP size, and what they are."""
    ss = st.session_state
    ref = loaders.current_ref(ss)
    platform = widgets.current_platform()
    env = widgets.current_env()
    tp_size = int(ss["tp.size"])
    par = None if ss["tp.parallel"] == "auto" else ss["tp.parallel"]
    version = ss["vllm.version"]
    base = loaders.layer_spec(ref)
    pj, ej = json.dumps(platform.to_json(), sort_keys=True), json.dumps(env, sort_keys=True)
    model = ss.get("align.model") or ""
    if model:
        return (_model_table(ref.key, base, model, pj, ej, tp_size, version),
                f"{model} per-rank shapes with the args of {ref.label}")
    if ref.path is not None:
        return (_checkpoint_table(ref.key, loaders.open_dir(ref.path).layers, pj, ej, tp_size, par, version),
                f"every quantized layer of {ref.label.split(' / ')[0]}")
    return _checkpoint_table(ref.key, [base], pj, ej, tp_size, par, version), ref.label


def layer_table(*, key: str = "align") -> list[dict]:
    """The heatmap and table: the checkpoint's layers, or a model preset's shapes, at the TP size."""
    from workbench import plots

    ss = st.session_state
    rows, what = shard_table()
    platform = widgets.current_platform()
    kernels = list(dict.fromkeys(k for r in rows for k in r["candidates"]))
    st.markdown(f"**{plain(what)}** at TP {ss['tp.size']} on {plain(platform.label())}")
    if kernels:
        # Every layer keeps its row: one the scheme refuses reads "refused" in every column.
        st.plotly_chart(plots.alignment_figure(rows, kernels), key=f"{key}-heat")
    table = []
    for r in rows:
        line = {"layer": r["layer"], "K/TP": r["K"], "N/TP": r["N"], "scheme": r["scheme"],
                "vLLM picks": r["selected"] or (f"{r['error_type']}" if r["error"] else None)}
        for k in kernels:
            outcome, reason = r["verdicts"].get(k, ("", ""))
            line[k.removesuffix("LinearKernel")] = {"selected": "SELECTED", "accepts": "accepts"}.get(
                outcome, f"{outcome}: {reason}" if reason else outcome)
        table.append(line)
    st.dataframe(table, hide_index=True, width="stretch")
    for r in rows:
        if r["error"] and all(v[0] == "refused" for v in r["verdicts"].values()):
            st.caption(plain(f"{r['layer']}: vLLM raises {r['error_type']} before any kernel is "
                             f"tried: {r['error']}"))
    return rows


# --------------------------------------------------------------------------- measured TP shards

def _us(v) -> str:
    return "" if v is None else f"{v:.1f}"


def _group_name(g: int) -> str:
    return "channel" if g == -1 else f"g{g}"


def _eff(v) -> str:
    return "" if v is None else f"{v:.2f}"


def measured_tp(rows: list[dict]) -> None:
    """The committed per-shard timings at the TP size, beside the table's verdict for the same shard."""
    from workbench.tp_measured import (all_reduce_floor_us, beside_verdicts, load_tp_shards, load_validation,
                                       nvlink, with_predictions)

    ss = st.session_state
    tp = int(ss["tp.size"])
    meas = load_tp_shards()
    prov = meas.provenance
    full = {t.layer: (t.k, t.n) for t in meas.timings if t.tp == 1}
    models = sorted({t.model for t in meas.timings})
    picked = ss.get("align.model") or ""
    from workbench.models import partitions

    shapes_of = {p.layer: (p.k, p.n) for p in partitions(picked, 1)} if picked else {}
    if not full or any(shapes_of.get(layer) != kn for layer, kn in full.items()):
        # another model's timings are not this one's: said, never shown as if they were
        st.info(plain(f"Measured TP shards exist for {', '.join(models)}'s MLP shapes only; "
                      + (f"{picked}'s differ, so none is shown." if picked else
                         "the shapes picked above are the loaded layer's, which were not measured.")
                      + " Pick a model of those shapes under Shapes (Qwen2.5-72B) to see them beside the table."))
        return
    shapes = "; ".join(f"{layer} K {k} x N {n}" for layer, (k, n) in sorted(full.items()))
    st.markdown(plain(f"Each TP rank's GEMM of the {', '.join(models)} MLP ({shapes} unsharded; "
                      "gate_up_proj split along N, down_proj along K, as vLLM shards them), timed "
                      f"alone on one {prov.get('device', '?')} on {prov.get('date_utc', '?')} by "
                      f"{prov.get('script', '?')} at commit {prov.get('commit', '?')} "
                      f"({meas.source}). Timing: {prov.get('timing', 'not recorded')}."))
    link = nvlink(prov.get("platform") or "sm90-h200")
    gbs = float(link["nvlink_gbs_bidirectional"])
    st.info("The collective is not measured: only one GPU was lent, so down_proj's all-reduce is "
            "not in these times (it comes on top at TP > 1). The performance model has no "
            "collective term either. The all-reduce floor column is a floor for that all-reduce, roofline only, "
            f"not measured: 2 (TP - 1) / TP of the M x N bf16 output sent per rank at half of NVLink's "
            f"{gbs:.0f} GB/s (both directions); NCCL's latency comes on top, so it has no upper edge.")
    st.caption(plain(f"NVLink figure: {link['source']}"))
    if tp not in meas.tp_sizes:
        st.info(f"Measured at TP {', '.join(map(str, meas.tp_sizes))} only: pick one of those to "
                "see its shards.")
        return
    group = loaders.layer_spec(loaders.current_ref(ss)).group_size
    check = load_validation()
    measured_on = prov.get("platform") or ""
    here = widgets.current_platform().name
    if here != measured_on:  # another platform's verdicts beside H200 times would mislead
        rows = []
        st.caption(plain(f"The vLLM picks column is filled when the page's platform is {measured_on}, "
                         f"the one these times were measured on; it is {here} now."))
    table = [{"layer": r["layer"], "K/TP": r["K"], "N/TP": r["N"],
              "group": _group_name(r["group_size"]), "M": r["m"],
              "W4A8 native µs": _us(r.get("w4a8_native_us")),
              "W4A8 model µs": _us(r.get("w4a8_native_predicted_us")),
              "W4A16 µs": _us(r.get("w4a16_fallback_us")),
              "W4A16 model µs": _us(r.get("w4a16_fallback_predicted_us")),
              "W4A8 efficiency": _eff(r.get("w4a8_native_efficiency")),
              "W4A16 efficiency": _eff(r.get("w4a16_fallback_efficiency")),
              "all-reduce floor µs (roofline only)": _us(all_reduce_floor_us(r["m"], r["N"], tp, gbs))
              if tp > 1 and full[r["layer"]][1] == r["N"] else "",  # row-parallel: K split, output summed
              "vLLM picks (table above)": r["vllm_picks"] or (
                  "" if r["group_size"] == group else f"(the table is traced at {_group_name(group)})")}
             for r in with_predictions(beside_verdicts(rows, meas, tp, group), check)]
    st.dataframe(table, hide_index=True, width="stretch")
    a, held = check["all"], check["shape_not_calibrated"]
    st.caption(f"Model µs: the performance model's prediction of the shard's GEMM (sm90-h200 at the "
               f"shard's N and K; benchmarks/validate_tp.py). Over all {a['n']} measured points: median "
               f"|predicted/measured - 1| {a['median_abs_err']:.3f}, p90 {a['p90_abs_err']:.3f}, band "
               f"covers {100 * a['band_coverage']:.0f}%; at the {held['n']} points of shapes it was not "
               f"calibrated on: {held['median_abs_err']:.3f}, {held['p90_abs_err']:.3f}, "
               f"{100 * held['band_coverage']:.0f}%.")
    st.caption("Shard efficiency = unsharded time / (TP x shard time), the same path, group and M at "
               "TP 1: 1.0 is ideal scaling; below it the smaller shard no longer fills the GPU. "
               "\"vLLM picks\" is the table's verdict for a shard of the same K, N and group.")
    for f in meas.not_run_at(tp):
        st.caption(plain(f"Not measured: {f.get('path', '?')} K {f['k']} x N {f['n']}, "
                         f"group {f.get('group_size')}: {f.get('error', '')}"))


# --------------------------------------------------------------------------- alignment sweep

def _sweep_base(rows: list[dict]) -> dict | None:
    """The shard the sweep starts from: a layer of the table (at its TP shape), picked by the user."""
    ss = st.session_state
    shaped = [r for r in rows if r["K"] and r["N"]]
    if not shaped:
        return None
    names = [r["layer"] for r in shaped]
    if ss.get("align.sweep_layer") not in names:
        current = ss["layer.name"].split(".")[-1]
        ss["align.sweep_layer"] = next((n for n in names if n.split(".")[-1] == current), names[0])
    state.bind(st.selectbox, "Shard to sweep", "align.sweep_layer", options=names,
               format_func=lambda n: next(r["label"] for r in shaped if r["layer"] == n))
    return next(r for r in shaped if r["layer"] == ss["align.sweep_layer"])


def alignment_sweep(rows: list[dict], *, key: str = "align") -> None:
    """K or N offsets around a shard: what vLLM picks, the padding each rule costs, whose rule."""
    from workbench import plots
    from workbench.checkpoints import trace_layer
    from workbench.errors import USER_ERRORS, InvalidInputError

    ss = st.session_state
    ref = loaders.current_ref(ss)
    spec = loaders.layer_spec(ref)
    platform = widgets.current_platform()
    env = widgets.current_env()
    c1, c2, c3 = st.columns([2, 1, 2])
    with c1:
        shard = _sweep_base(rows)
    with c2:
        state.bind(st.radio, "Offset dimension", "align.dim", options=["N", "K"], horizontal=True)
    with c3:
        state.bind(st.text_input, "Offsets", "align.offsets")
    if shard is None:
        st.info("No layer of the table has a shard shape at this TP size: nothing to sweep.")
        return
    try:
        offsets = sorted({int(x) for x in ss["align.offsets"].split(",") if x.strip()})
    except ValueError:
        raise InvalidInputError(f"offsets: {ss['align.offsets']!r}; accepted: integers separated by "
                                "commas, e.g. 0,8,16,64") from None
    dim = ss["align.dim"]
    base_k, base_n = shard["K"], shard["N"]
    base, other = (base_k, base_n) if dim == "K" else (base_n, base_k)
    g = spec.group_size
    where = f"{shard['layer'].split('.')[-1]} at TP {ss['tp.size']} (K {base_k}, N {base_n})"
    rules = state.rule_set()  # the sidebar's: its tile rules, its traces
    pad = alignment.padding_rows(dim, base, other, offsets, g, rules)
    verdicts = []
    for off, k, n in alignment.offset_shapes(dim, base, other, offsets):
        try:  # the shard's own shape, so TP 1 here: the split is already made
            t = trace_layer(alignment.spec_with_shape(spec, shard["layer"], k, n), platform, env,
                            version=rules)
            picks = t.selected or f"{t.error_type}"
        except USER_ERRORS as exc:
            picks = f"{type(exc).__name__}: {exc}"
        verdicts.append({"offset": off, "K": k, "N": n, "vLLM picks": picks,
                         "rules broken (whose rule)": "; ".join(alignment.rules_broken(k, n, g, rules)) or "none"})
    st.plotly_chart(plots.padding_cost_figure(
        pad, series="rule", title=escape(f"Zero-padding cost of {dim} = {base} + offset: {where}, "
                                         f"group {g}"),
        xaxis_title=f"offset added to {dim}"), key=f"{key}-pad")
    st.dataframe(verdicts, hide_index=True, width="stretch")
    st.caption(f"vLLM's choice for each shape on {plain(platform.label())}; Marlin pads internally "
               "(and logs a warning), the other kernels reject a shape their rule does not divide. "
               "Each broken rule names the kernel or op whose check it is.")
    _measured(shard, offsets, dim, g, key)


def _measured(shard: dict, offsets: list[int], dim: str, g: int, key: str) -> None:
    """Time per output column on this machine across N offsets, with the p20-p80 spread."""
    from workbench import plots

    ss = st.session_state
    if dim != "N":
        return
    base_n, base_k = shard["N"], shard["K"]
    if shard.get("error"):
        # Offered only for a shard vLLM loads: the table above already refuses this one, and
        # its weights cannot be built (a K that is no whole number of groups).
        st.caption(plain(f"Measure on this machine: not offered for {' '.join(shard['label'].split())}: vLLM refuses "
                         f"this shard ({shard['error_type']}: {shard['error'].split('. ')[0]}). Pick a "
                         "shard that loads, or another TP size."))
        return
    if st.button("Measure on this machine", key=f"{key}.measure"):
        from workbench.sweeps import sweep_alignment

        bar = st.progress(0.0)
        recs = sweep_alignment([base_n + o for o in offsets if base_n + o > 0], k=base_k, group_size=g,
                               ms=(16,), repeats=5,
                               progress=lambda d, t, msg: bar.progress(d / t, text=msg))
        bar.empty()
        ss["align.measured"] = {"shard": [base_k, base_n], "records": [r.to_dict() for r in recs]}
    measured = ss.get("align.measured")
    if not measured or measured.get("shard") != [base_k, base_n]:
        return
    from workbench.bench import BenchRecord, result_record

    timed = [result_record(BenchRecord(**r)) for r in measured["records"] if r["median_ms"]]
    pts = [{"offset": r.n - base_n, "cost": r.median_us / r.n, "p20_cost": r.p20_us / r.n,
            "p80_cost": r.p80_us / r.n, "path": r.path} for r in timed]
    st.plotly_chart(plots.padding_cost_figure(
        pts, series="path", title=f"Measured on this machine (M = 16, K {base_k}): time per output "
                                  "column, p20-p80 bars", xaxis_title="offset added to N",
        yaxis_title="µs per output column"), key=f"{key}-measured")


def render() -> None:
    st.title("Alignment")
    st.markdown("Tensor parallelism splits N (column-parallel) or K (row-parallel). A shard that is "
                "not a whole number of quant groups is refused by the scheme; a shard a kernel's tile "
                "rule does not divide is rejected by that kernel (or zero-padded, for Marlin).")
    from workbench.models import MODELS

    c1, c2, c3 = st.columns(3)
    with c1:
        state.bind(st.selectbox, "Shapes", "align.model", options=["", *MODELS],
                   format_func=lambda m: m or "the current checkpoint's layers")
    with c2:
        state.bind(st.number_input, "tensor-parallel size", "tp.size", min_value=1, max_value=64, step=1)
    with c3:
        widgets.platform_picker("Platform", key_suffix="align")
    rows: list[dict] = []
    try:
        rows = layer_table()
    except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
        widgets.show_error(exc)
    st.subheader("Measured TP shards")
    try:
        measured_tp(rows)
    except Exception as exc:  # noqa: BLE001
        widgets.show_error(exc)
    st.subheader("Alignment sweep")
    try:
        alignment_sweep(rows)
    except Exception as exc:  # noqa: BLE001
        widgets.show_error(exc)
