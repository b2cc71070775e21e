"""The trace page's MoE section: which fused-MoE kernel vLLM runs for a model's experts, why,
and what the routed per-expert GEMMs cost (workbench.dispatch.moe, workbench.perf.moe_cost)."""
from __future__ import annotations

import streamlit as st

from workbench.ui import widgets
from workbench.ui.plain import plain

_MODEL_KEY, _SCHEME_KEY = "moe.model", "moe.scheme"


@st.cache_data(show_spinner=False, max_entries=256)
def _trace(model: str, scheme: str, platform_json: str, backend: str, version: str) -> dict:
    from workbench.dispatch.moe import trace_moe
    from workbench.moe_models import moe_layer
    from workbench.platforms import resolve_platform
    import json
    t = trace_moe(moe_layer(model, scheme), resolve_platform(json.loads(platform_json)), backend,
                  version)
    return t.to_json()


def section(platform) -> None:
    """One MoE layer of the chosen preset on the page's platform, step by step."""
    import json
    from workbench.dispatch.moe import MOE_BACKENDS, MOE_VERSIONS
    from workbench.moe_models import MOE_MODELS, SCHEMES
    from workbench.perf.moe_cost import LOADS

    st.subheader("MoE layers (fused experts)")
    version = st.session_state.get("vllm.version")  # the sidebar's release, as every trace
    if version not in MOE_VERSIONS:
        st.caption(plain(f"No MoE rules for vLLM {version}: its experts are not traced."))
        return
    c1, c2, c3 = st.columns(3)
    model = c1.selectbox("MoE model", list(MOE_MODELS), key=_MODEL_KEY)
    scheme = c2.selectbox("Experts' scheme", list(SCHEMES), key=_SCHEME_KEY)
    backend = c3.selectbox("--moe-backend", list(MOE_BACKENDS), key="moe.backend")
    try:
        t = _trace(model, scheme, json.dumps(platform.to_json(), sort_keys=True), backend, version)
    except Exception as exc:  # noqa: BLE001 - named errors shown once, the page goes on
        widgets.show_error(exc)
        return
    m = MOE_MODELS[model]
    st.caption(plain(f"{model}: {m.experts} experts, top-{m.top_k}, hidden {m.hidden}, expert "
                     f"intermediate {m.expert_intermediate}, {m.moe_layers} MoE layers; "
                     f"{m.source}"))
    if t["experts"]:
        st.success(plain(f"vLLM {version} runs {t['experts']} (backend {t['backend']}, method "
                         f"{t['method']})" + (f": {t['runs']}" if t["runs"] else "")))
    else:
        # a warning, not an error: the page's own layer is fine; this is the MoE layer's answer
        st.warning(plain(f"vLLM {version} refuses this MoE layer: {t['error_type']} at "
                         f"{t['stage']}"))
        st.code(t["error"] or "", language=None)
    rows = [{"#": i, "predicate": p["name"], "matched": "yes" if p["matched"] else "no",
             "detail": p["detail"]} for i, p in enumerate(t["predicates"], 1)]
    if rows:
        st.markdown("get_moe_method, in vLLM's order:")
        st.markdown(widgets.md_table(rows))
    steps = []
    for b in t["backends"]:
        if b["skipped"] is not None:
            steps.append({"backend": b["backend"], "experts class": "-", "outcome": "skipped",
                          "reason": b["skipped"]})
        steps += [{"backend": b["backend"], "experts class": p["kernel"],
                   "outcome": p["outcome"], "reason": p["reason"] or ""} for p in b["probes"]]
    if steps:
        st.markdown(f"{t['oracle']}, backends {', '.join(t['candidates'])}:")
        st.markdown(widgets.md_table(steps))
    if t["experts"]:
        from workbench.perf.moe_cost import moe_model_report
        c5, c6 = st.columns(2)
        tokens = c5.number_input("Tokens per step", 1, 16384, 16, key="moe.tokens")
        load = c6.selectbox("Expert load", list(LOADS), key="moe.load")
        try:
            r = moe_model_report(model, platform.name, scheme, int(tokens), load, 1, version)
        except Exception as exc:  # noqa: BLE001 - a platform the cost model has no part for
            widgets.show_error(exc)
            return
        if r["total_us"] is not None:
            lo, hi = r["total_band_us"]
            st.markdown(plain(f"Predicted: {r['per_layer']['us']:.0f} us per MoE layer, "
                              f"{r['total_us'] / 1000:.2f} ms for {r['moe_layers']} layers "
                              f"(band {lo / 1000:.2f}-{hi / 1000:.2f} ms, basis {r['basis']}); "
                              f"tokens per expert {list(r['per_layer']['loads'])[:16]}"
                              + ("..." if m.experts > 16 else "")))
            for note in r["per_layer"]["notes"]:
                st.caption(plain(note))
    with st.expander("vLLM source lines of the rules applied"):
        for s in t["sources"]:
            st.markdown(f"- `{plain(s)}`")
