"""The user's choices: one flat `st.session_state` key per setting, set once, shared by every page.

Widgets never own these keys. Streamlit drops a widget's state when the page that draws
it is not shown, so each widget gets a shadow key (`w:<key>`) seeded from the canonical
key on every run and copied back by its `on_change` callback (`bind`). That is what lets
a platform edited on the trace page still be the platform of the Kernels page.

Query parameters (`?platform=sm90-h200&env=...`) are applied once per session, before any
page draws, so a link reproduces a view (the Tour's step links, the trace page's link).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import streamlit as st

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_ROOT = REPO_ROOT / "sample_models"
DEFAULT_SAMPLE = "ct-w4a8-int-g128"
DEFAULT_LAYER = "model.layers.0.mlp.down_proj"

SOURCES = {
    "sample": "Bundled sample",
    "directory": "Local checkpoint directory",
    "upload": "Upload (safetensors)",
    "synthetic": "Synthetic layer",
    "trained": "Real trained layer",
}

# The platform fields the trace page edits (Platform's own field names).
PLATFORM_FIELDS = ("device", "capability", "cpu_arch", "gfx", "zen", "amx", "packages",
                   "torch_ops", "avx2", "avx512", "avx512_bf16", "avx512_vnni", "vendor")

# vLLM's defaults: a knob left at its default is not exported, so a trace's env shows
# only what the user changed.
ENV_DEFAULTS = {
    "VLLM_DISABLED_KERNELS": "",
    "linear_backend": "auto",
    "linear_backend_per_quant": "",
    "VLLM_CPU_INT4_W4A8": "1",
    "VLLM_XPU_INC_WNA16_BACKEND": "",  # unset: vLLM's "auto"
    "VLLM_MARLIN_INPUT_DTYPE": "",  # unset
    "VLLM_BATCH_INVARIANT": "0",
}

DEFAULTS: dict[str, Any] = {
    "layer.source": "sample",
    "layer.sample": DEFAULT_SAMPLE,
    "layer.name": DEFAULT_LAYER,
    "layer.dir": "",
    "layer.upload_dir": "",
    "syn.out_features": 256,
    "syn.in_features": 1024,
    "syn.group_size": 128,
    "syn.symmetric": True,
    "syn.scheme": "W4A8",
    "syn.distribution": "normal",
    "syn.outlier_channels": 8,
    "syn.params_dtype": "bfloat16",
    "syn.seed": 0,
    "trained.name": "encoder.layer.0.intermediate.dense",
    "trained.scheme": "W4A8",
    "trained.group_size": 128,
    "trained.symmetric": True,
    "trained.params_dtype": "bfloat16",
    "pf.preset": "host",
    "pf.compare": "sm90-h200",
    "tp.size": 1,
    "tp.parallel": "auto",
    "kern.m_list": "1,4,16,64,256",
    "kern.reps": 3,
    "align.model": "",
    "align.dim": "N",
    "align.offsets": "0,8,16,32,64,96",
    "tour.step": 0,
    **{f"env.{k}": v for k, v in ENV_DEFAULTS.items()},
}

# Query parameter -> state key, for the keys a link may carry.
QUERY_KEYS = {
    "source": "layer.source", "sample": "layer.sample", "layer": "layer.name",
    "platform": "pf.preset", "compare": "pf.compare", "tp": "tp.size", "parallel": "tp.parallel",
    "step": "tour.step", "model": "align.model", "m": "kern.m_list",
}


def init_state() -> None:
    """Set every default once per session (never overwrite a choice), then apply a link."""
    ss = st.session_state
    for key, value in DEFAULTS.items():
        if key not in ss:
            ss[key] = value
    if "pf.fields" not in ss:
        from workbench.ui.loaders import preset_fields

        ss["pf.fields.base"] = preset_fields(ss["pf.preset"])
        for f, v in ss["pf.fields.base"].items():
            ss.setdefault(f"pf.{f}", v)
        ss["pf.fields"] = True
    if not ss.get("_query_applied"):
        ss["_query_applied"] = True
        apply_query(dict(st.query_params))


def apply_query(params: dict[str, str]) -> list[str]:
    """Apply link parameters to the state; returns the problems (shown, never raised)."""
    ss = st.session_state
    problems: list[str] = []
    for name, key in QUERY_KEYS.items():
        if name not in params:
            continue
        raw = params[name]
        default = DEFAULTS[key]
        try:
            ss[key] = int(raw) if isinstance(default, int) and not isinstance(default, bool) else raw
            if name == "step":  # links count tour steps from 1
                ss[key] -= 1
        except ValueError:
            problems.append(f"link parameter {name}={raw!r}: expected an integer")
    if "platform" in params:
        set_preset(ss["pf.preset"])
    if "pf" in params:
        try:
            edits = json.loads(params["pf"])
            if not isinstance(edits, dict):
                raise ValueError
            for f, v in edits.items():
                if f in PLATFORM_FIELDS:
                    ss[f"pf.{f}"] = v
        except ValueError:
            problems.append("link parameter pf: expected a JSON object of platform fields")
    if "env" in params:
        try:
            env = json.loads(params["env"])
            if not isinstance(env, dict):
                raise ValueError
            for k, v in env.items():
                if k in ENV_DEFAULTS:
                    ss[f"env.{k}"] = v if isinstance(v, str) else json.dumps(v)
        except ValueError:
            problems.append("link parameter env: expected a JSON object of VLLM_* settings")
    ss["_query_problems"] = problems
    return problems


def set_preset(name: str) -> None:
    """Pick a platform preset: every editable field takes the preset's value."""
    from workbench.ui.loaders import preset_fields

    ss = st.session_state
    ss["pf.preset"] = name
    base = preset_fields(name)
    ss["pf.fields.base"] = base
    for f, v in base.items():
        ss[f"pf.{f}"] = v


def platform_edits() -> dict[str, Any]:
    """The fields the user changed from the preset (empty when untouched)."""
    ss = st.session_state
    base = ss["pf.fields.base"]
    return {f: ss[f"pf.{f}"] for f in PLATFORM_FIELDS if ss[f"pf.{f}"] != base[f]}


def env_mapping() -> dict[str, str]:
    """The env knobs that differ from vLLM's defaults, as `parse_env` takes them."""
    ss = st.session_state
    out = {}
    for key, default in ENV_DEFAULTS.items():
        value = ss[f"env.{key}"]
        if value != default and not (key == "VLLM_DISABLED_KERNELS" and value == ""):
            out[key] = value
    return out


def view_query(extra: dict[str, Any] | None = None) -> dict[str, str]:
    """Query parameters that reproduce the current layer, platform and env."""
    ss = st.session_state
    q: dict[str, str] = {"source": ss["layer.source"]}
    if ss["layer.source"] == "sample":
        q.update(sample=ss["layer.sample"], layer=ss["layer.name"])
    q["platform"] = ss["pf.preset"]
    edits = platform_edits()
    if edits:
        q["pf"] = json.dumps(edits, separators=(",", ":"))
    env = env_mapping()
    if env:
        q["env"] = json.dumps(env, separators=(",", ":"))
    if ss["tp.size"] != 1:
        q["tp"] = str(ss["tp.size"])
    if ss["tp.parallel"] != "auto":
        q["parallel"] = ss["tp.parallel"]
    for k, v in (extra or {}).items():
        q[k] = str(v)
    return q


def link(url_path: str, query: dict[str, str]) -> str:
    """A relative link to a page with query parameters."""
    from urllib.parse import urlencode

    return f"./{url_path}?{urlencode(query)}"


# --------------------------------------------------------------------------- widgets


def _sync(key: str, after: Callable[[], None] | None = None) -> None:
    st.session_state[key] = st.session_state[f"w:{key}"]
    if after is not None:
        after()


def bind(widget: Callable[..., Any], label: str, key: str, *,
         after: Callable[[], None] | None = None, **kwargs: Any) -> Any:
    """Draw `widget` showing state `key`; a change writes the key back (then calls `after`)."""
    st.session_state[f"w:{key}"] = st.session_state[key]
    widget(label, key=f"w:{key}", on_change=_sync, args=(key, after), **kwargs)
    return st.session_state[key]
