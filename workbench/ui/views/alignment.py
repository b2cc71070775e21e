"""Alignment: every layer's tensor-parallel partition against every candidate kernel.

vLLM's loop stops at the first kernel that accepts. To show what every later candidate
would have said, the table re-runs the same loop with the accepted kernels added to
`VLLM_DISABLED_KERNELS`, until none is left: each verdict is still vLLM's own check.
"""
from __future__ import annotations

import json
from dataclasses import fields as dc_fields
from typing import Any

import streamlit as st

from workbench.ui import loaders, state, widgets


def _disabled(env: dict[str, str], extra: list[str]) -> dict[str, str]:
    user = env.get("VLLM_DISABLED_KERNELS", "")
    return {**env, "VLLM_DISABLED_KERNELS": ",".join(x for x in (user, *extra) if x)}


def kernel_verdicts(spec, platform, env: dict[str, str], tp_size: int, parallel: str | None) -> dict:
    """What vLLM picks for this partition and what every other candidate says about it."""
    from workbench.checkpoints import trace_layer
    from workbench.dispatch import trace_mp

    t = trace_layer(spec, platform, env, tp_size=tp_size, parallel=parallel)
    k_part, n_part = spec.partition_shape(tp_size, parallel)
    row: dict[str, Any] = {"layer": spec.name, "K": k_part, "N": n_part, "scheme": t.scheme,
                           "selected": t.selected, "error": t.error, "error_type": t.error_type,
                           "candidates": list(t.candidates), "verdicts": {}}
    row["label"] = f"{spec.name.split('.')[-1]}  [K {k_part}, N {n_part}]"
    if t.mp_config is None:
        return row
    verdicts = row["verdicts"]
    first, accepted, cur = True, [], t
    while True:
        for s in cur.steps:
            if s.kernel in verdicts:
                continue
            if s.outcome == "selected":
                verdicts[s.kernel] = ("selected" if first else "accepts", "")
            else:
                verdicts[s.kernel] = (s.outcome, s.reason or "")
        if cur.selected is None or len(accepted) > len(t.candidates):
            break
        accepted.append(cur.selected)
        first = False
        cur = trace_mp(t.mp_config, platform, _disabled(env, accepted))
    return row


def _spec_with_shape(spec, name: str, k: int, n: int):
    """The layer's quantization args on another shape (a LayerSpec: no tensors)."""
    from workbench.layer import LayerSpec

    base = {f.name: getattr(spec, f.name) for f in dc_fields(LayerSpec)}
    base.update(name=name, in_features=k, out_features=n)
    return LayerSpec(**base)


@st.cache_data(show_spinner=False, max_entries=64)
def _table(layer_key: str, _specs, platform_json: str, env_json: str, tp: int,
           parallel: str | None) -> list[dict]:
    from workbench.platforms import platform_from_json

    platform = platform_from_json(json.loads(platform_json))
    env = json.loads(env_json)
    rows = []
    for spec in _specs:
        try:
            rows.append(kernel_verdicts(spec, platform, env, tp, parallel))
        except Exception as exc:  # noqa: BLE001 - a shape TP cannot split: one row, not the page
            from workbench.errors import USER_ERRORS

            if not isinstance(exc, USER_ERRORS):
                raise
            rows.append({"layer": spec.name, "label": spec.name.split(".")[-1], "K": None, "N": None,
                         "scheme": None, "selected": None, "error": str(exc),
                         "error_type": type(exc).__name__, "candidates": [], "verdicts": {}})
    return rows


def _model_specs(spec, model_name: str) -> list:
    from workbench import models

    preset = models.get_model(model_name)
    return [_spec_with_shape(spec, name, k, n) for name, (k, n) in models.linear_shapes(preset).items()]


def layer_table(*, key: str = "align", tp: int | None = None) -> None:
    """The heatmap and table for the current checkpoint's layers (or a model preset's shapes)."""
    from workbench import plots

    ss = st.session_state
    ref = loaders.current_ref(ss)
    platform = widgets.current_platform()
    env = widgets.current_env()
    tp_size = ss["tp.size"] if tp is None else tp
    par = None if ss["tp.parallel"] == "auto" else ss["tp.parallel"]
    base = loaders.layer_spec(ref)
    model = ss.get("align.model") or ""
    if model:
        specs = _model_specs(base, model)
        what = f"{model} shapes with the args of {ref.label}"
    elif ref.path is not None:
        specs = loaders.open_dir(ref.path).layers
        what = f"every quantized layer of {ref.path.name}"
    else:
        specs = [base]
        what = ref.label
    rows = _table(f"{ref.key}|{model}", specs, json.dumps(platform.to_json(), sort_keys=True),
                  json.dumps(env, sort_keys=True), int(tp_size), par)
    kernels = list(dict.fromkeys(k for r in rows for k in r["candidates"]))
    st.markdown(f"**{what}** at TP {tp_size} on {platform.label()}")
    if kernels:
        st.plotly_chart(plots.alignment_figure([r for r in rows if r["verdicts"]] or rows, kernels),
                        key=f"{key}-heat")
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
    errors = [r for r in rows if r["error"] and not r["verdicts"]]
    for r in errors:
        st.error(f"{r['layer']}: vLLM raises {r['error_type']} before any kernel is tried: {r['error']}")


def render() -> None:
    st.title("Alignment")
    st.markdown("Tensor parallelism splits N (column-parallel) or K (row-parallel). A shard that is "
                "not a whole number of quant groups is refused by the scheme; a shard a kernel's tile "
                "rule does not divide is rejected by that kernel (or zero-padded, for Marlin).")
    c1, c2 = st.columns(2)
    with c1:
        state.bind(st.number_input, "tensor-parallel size", "tp.size", min_value=1, max_value=64, step=1)
    with c2:
        widgets.platform_picker("Platform", key_suffix="align")
    try:
        layer_table()
    except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
        widgets.show_error(exc)
