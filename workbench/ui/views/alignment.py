"""Alignment: every layer's tensor-parallel partition against every candidate kernel.

vLLM's loop stops at the first kernel that accepts. To show what every later candidate
would have said, the table re-runs the same loop with the accepted kernels added to
`VLLM_DISABLED_KERNELS`, until none is left: each verdict is still vLLM's own check.
"""
from __future__ import annotations

import json
from dataclasses import fields as dc_fields

import streamlit as st

from workbench.alignment import kernel_verdicts, padding_rows
from workbench.ui import loaders, state, widgets
from workbench.ui.plain import plain


def _row(name: str, k: int | None, n: int | None, t, platform, env) -> dict:
    return {"layer": name, "label": f"{name.split('.')[-1]}  [K {k}, N {n}]", "K": k, "N": n,
            "scheme": t.scheme, "selected": t.selected, "error": t.error, "error_type": t.error_type,
            "candidates": list(t.candidates), "verdicts": kernel_verdicts(t, platform, env)}


def _error_row(name: str, exc: BaseException) -> dict:
    from workbench.errors import USER_ERRORS

    if not isinstance(exc, USER_ERRORS):
        raise exc
    return {"layer": name, "label": name.split(".")[-1], "K": None, "N": None, "scheme": None,
            "selected": None, "error": str(exc), "error_type": type(exc).__name__, "candidates": [],
            "verdicts": {}}


def _spec_with_shape(spec, name: str, k: int, n: int):
    """The layer's quantization args on another shape (a LayerSpec: no tensors)."""
    from workbench.layer import LayerSpec

    base = {f.name: getattr(spec, f.name) for f in dc_fields(LayerSpec)}
    base.update(name=name, in_features=k, out_features=n)
    return LayerSpec(**base)


@st.cache_data(show_spinner=False, max_entries=64)
def _checkpoint_table(layer_key: str, _specs, platform_json: str, env_json: str, tp: int,
                      parallel: str | None) -> list[dict]:
    from workbench.checkpoints import trace_layer
    from workbench.platforms import platform_from_json

    platform = platform_from_json(json.loads(platform_json))
    env = json.loads(env_json)
    rows = []
    for spec in _specs:
        try:
            t = trace_layer(spec, platform, env, tp_size=tp, parallel=parallel)
            k, n = spec.partition_shape(tp, parallel)
            rows.append(_row(spec.name, k, n, t, platform, env))
        except Exception as exc:  # noqa: BLE001 - a shard TP cannot split: one row, not the page
            rows.append(_error_row(spec.name, exc))
    return rows


@st.cache_data(show_spinner=False, max_entries=64)
def _model_table(layer_key: str, _spec, model: str, platform_json: str, env_json: str,
                 tp: int) -> list[dict]:
    """A model preset's per-rank shapes (as vLLM shards them) with the current layer's args."""
    from workbench.dispatch import trace_scheme
    from workbench.models import partitions
    from workbench.platforms import platform_from_json

    platform = platform_from_json(json.loads(platform_json))
    env = json.loads(env_json)
    full = {p.layer: p for p in partitions(model, 1)}
    rows = []
    for p in partitions(model, tp):
        try:
            spec = _spec_with_shape(_spec, f"{model}.{p.layer}", full[p.layer].k, full[p.layer].n)
            scheme = spec.scheme_input(1)
            scheme["input_size_per_partition"], scheme["output_size_per_partition"] = p.k, p.n
            rows.append(_row(spec.name, p.k, p.n, trace_scheme(scheme, platform, env), platform, env))
        except Exception as exc:  # noqa: BLE001
            rows.append(_error_row(f"{model}.{p.layer}", exc))
    return rows


def layer_table(*, key: str = "align") -> None:
    """The heatmap and table: the checkpoint's layers, or a model preset's shapes, at the TP size."""
    from workbench import plots

    ss = st.session_state
    ref = loaders.current_ref(ss)
    platform = widgets.current_platform()
    env = widgets.current_env()
    tp_size = int(ss["tp.size"])
    par = None if ss["tp.parallel"] == "auto" else ss["tp.parallel"]
    base = loaders.layer_spec(ref)
    pj, ej = json.dumps(platform.to_json(), sort_keys=True), json.dumps(env, sort_keys=True)
    model = ss.get("align.model") or ""
    if model:
        rows = _model_table(ref.key, base, model, pj, ej, tp_size)
        what = f"{model} per-rank shapes with the args of {ref.label}"
    elif ref.path is not None:
        rows = _checkpoint_table(ref.key, loaders.open_dir(ref.path).layers, pj, ej, tp_size, par)
        what = f"every quantized layer of {ref.path.name}"
    else:
        rows = _checkpoint_table(ref.key, [base], pj, ej, tp_size, par)
        what = ref.label
    kernels = list(dict.fromkeys(k for r in rows for k in r["candidates"]))
    st.markdown(f"**{plain(what)}** at TP {tp_size} on {plain(platform.label())}")
    with_verdicts = [r for r in rows if r["verdicts"]]
    if kernels and with_verdicts:
        st.plotly_chart(plots.alignment_figure(with_verdicts, kernels), key=f"{key}-heat")
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
        if r["error"] and not r["verdicts"]:
            st.error(plain(f"{r['layer']}: vLLM raises {r['error_type']} before any kernel is tried: "
                           f"{r['error']}"))


# --------------------------------------------------------------------------- alignment sweep

def alignment_sweep(*, key: str = "align") -> None:
    """K or N offsets around the layer's shard: what vLLM picks, the padding each rule costs."""
    from workbench import plots
    from workbench.checkpoints import trace_layer
    from workbench.models import broken_rules

    ss = st.session_state
    ref = loaders.current_ref(ss)
    spec = loaders.layer_spec(ref)
    platform = widgets.current_platform()
    env = widgets.current_env()
    c1, c2 = st.columns(2)
    with c1:
        state.bind(st.radio, "Offset dimension", "align.dim", options=["N", "K"], horizontal=True)
    with c2:
        state.bind(st.text_input, "Offsets", "align.offsets")
    try:
        offsets = sorted({int(x) for x in ss["align.offsets"].split(",") if x.strip()})
    except ValueError:
        from workbench.errors import InvalidInputError

        raise InvalidInputError(f"offsets: {ss['align.offsets']!r}; accepted: integers separated by "
                                "commas, e.g. 0,8,16,64") from None
    dim = ss["align.dim"]
    base_k, base_n = spec.in_features, spec.out_features
    base, other = (base_k, base_n) if dim == "K" else (base_n, base_k)
    g = spec.group_size
    rows = padding_rows(dim, base, other, offsets, g)
    verdicts = []
    for off in offsets:
        size = base + off
        k, n = (size, other) if dim == "K" else (other, size)
        if k <= 0 or n <= 0:
            continue
        try:
            t = trace_layer(_spec_with_shape(spec, spec.name, k, n), platform, env)
            picks = t.selected or f"{t.error_type}"
        except Exception as exc:  # noqa: BLE001
            widgets.show_error(exc)
            continue
        verdicts.append({"offset": off, "K": k, "N": n, "vLLM picks": picks,
                         "rules broken": "; ".join(broken_rules(k, n, g)) or "none"})
    st.plotly_chart(plots.padding_cost_figure(rows, series="rule",
                    title=f"Zero-padding cost of {dim} = {base} + offset (other dim {other}, group {g})",
                    xaxis_title=f"offset added to {dim}"), key=f"{key}-pad")
    st.dataframe(verdicts, hide_index=True, width="stretch")
    st.caption(f"vLLM's choice for each shape on {platform.label()}; Marlin pads internally "
               "(and logs a warning), the other kernels reject a shape their rule does not divide.")
    if dim == "N" and st.button("Measure on this machine", key=f"{key}.measure"):
        from workbench.sweeps import sweep_alignment

        bar = st.progress(0.0)
        recs = sweep_alignment([base + o for o in offsets if base + o > 0], k=base_k, group_size=g,
                               ms=(16,), repeats=3,
                               progress=lambda d, t, msg: bar.progress(d / t, text=msg))
        bar.empty()
        ss["align.measured"] = [r.to_dict() for r in recs]
    measured = ss.get("align.measured")
    if measured:
        pts = [{"offset": r["n"] - base, "cost": r["median_ms"] * 1e3 / r["n"], "path": r["path"]}
               for r in measured if r["median_ms"]]
        st.plotly_chart(plots.padding_cost_figure(pts, series="path", title="Measured on this machine "
                        "(M = 16): time per output column", xaxis_title="offset added to N",
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
    try:
        layer_table()
    except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
        widgets.show_error(exc)
    st.subheader("Alignment sweep")
    try:
        alignment_sweep()
    except Exception as exc:  # noqa: BLE001
        widgets.show_error(exc)
