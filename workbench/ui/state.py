"""The user's choices: one flat `st.session_state` key per setting, set once, shared by every page.

Widgets never own these keys. Streamlit drops a widget's state when the page that draws
it is not shown, so each widget gets a shadow key (`w:<key>`) seeded from the canonical
key on every run and copied back by its `on_change` callback (`bind`). That is what lets
a platform edited on the trace page still be the platform of the Kernels page.

Query parameters (`?platform=sm90-h200&env=...`) are applied once per session, before any
page draws, so a link reproduces a view (the Tour's step links, the trace page's link).
"""
from __future__ import annotations

import functools
import json
from typing import Any, Callable

import streamlit as st

from workbench.dispatch import versions
from workbench.dispatch.versions import DEFAULT_VERSION, RuleSet
from workbench.limits import int_list
from workbench.paths import REPO_ROOT, SAMPLE_ROOT  # noqa: F401 - the pages read them from here
from workbench.platforms import preset_key
from workbench.ui.loaders import (PLATFORM_FIELDS, build_platform, preset_fields, preset_names,
                                  sample_names)

DEFAULT_SAMPLE = "ct-w4a8-int-g128"
DEFAULT_LAYER = "model.layers.0.mlp.down_proj"

SOURCES = {
    "sample": "Bundled sample",
    "directory": "Local checkpoint directory",
    "upload": "Upload (safetensors)",
    "synthetic": "Synthetic layer",
    "trained": "Real trained layer",
}


def rule_set() -> RuleSet:
    """The sidebar's rule set: every page traces with it and reads its pinned values from it
    (a version without one is refused by name, where the page draws)."""
    return versions.rule_set(st.session_state.get("vllm.version"))


def env_defaults() -> dict[str, str]:
    """The env knobs and vLLM's unset values, the sidebar's rule set's: a knob left at its
    default is not exported, so a trace's env shows only what the user changed. While the
    sidebar names a version without a rule set, the pinned one's: the knobs stay editable and
    each trace refuses the version by name."""
    known = st.session_state.get("vllm.version", DEFAULT_VERSION) in versions.RULE_SETS
    return dict((rule_set() if known else versions.pinned()).ENV.unset_values)

DEFAULTS: dict[str, Any] = {
    "layer.source": "sample",
    "layer.sample": DEFAULT_SAMPLE,
    "layer.name": DEFAULT_LAYER,
    "layer.dir": "",
    "layer.upload_dir": "",
    "layer.upload_label": "",
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
    "vllm.version": DEFAULT_VERSION,  # the rule set every trace uses (workbench.dispatch.versions)
    "kern.m_list": "1,4,16,64,256",
    # Seven timed calls per point: a call slowed by other load moves the median of seven less
    # than that of three (with three, one path read 0.23 ms at M = 1 and 7.8 ms at M = 4 on a
    # loaded 2-core machine). Past a load of the core count no count helps: the page says so.
    "kern.reps": 7,
    "align.model": "",
    "align.dim": "N",
    "align.offsets": "0,8,16,32,64,96",
    "tour.step": 0,
}  # and an `env.<KEY>` per env knob of the rule set (`init_state`)

MAX_M = 16384  # the Kernels page's largest token count


def parse_ms(text: str) -> list[int]:
    """The Kernels page's M list by the core's list reader (an empty entry refused, not
    dropped), sorted and unique."""
    return sorted(set(int_list(text.replace(";", ","), "token counts M", 1, MAX_M)))


# Query parameter -> state key, for the keys a link may carry.
QUERY_KEYS = {
    "source": "layer.source", "sample": "layer.sample", "layer": "layer.name",
    "platform": "pf.preset", "compare": "pf.compare", "tp": "tp.size", "parallel": "tp.parallel",
    "step": "tour.step", "model": "align.model", "m": "kern.m_list", "vllm": "vllm.version",
}
# A link value longer than this is refused unread (a layer name or JSON edit is far shorter).
MAX_QUERY_CHARS = 2000
MAX_TP = 64
PARALLEL = ("auto", "column", "row")


def init_state(*, tour_steps: int) -> None:
    """Set every default once per session (never overwrite a choice), then apply a link
    (`tour_steps`: how many steps the Tour has, for a link's `step`; the router knows the pages)."""
    ss = st.session_state
    for key, value in DEFAULTS.items():
        if key not in ss:
            ss[key] = value
    for key, value in env_defaults().items():
        ss.setdefault(f"env.{key}", value)
    if "pf.fields" not in ss:
        if ss["pf.preset"] not in preset_names():
            ss["pf.preset"] = DEFAULTS["pf.preset"]
        ss["pf.fields.base"] = preset_fields(ss["pf.preset"])
        for f, v in ss["pf.fields.base"].items():
            ss.setdefault(f"pf.{f}", v)
        ss["pf.fields"] = True
    if not ss.get("_query_applied"):
        ss["_query_applied"] = True
        apply_query(dict(st.query_params), tour_steps=tour_steps)


def ready() -> bool:
    """Whether `init_state` has set the defaults (pages read them unguarded)."""
    return "pf.fields" in st.session_state


class _Refused(ValueError):
    """A link value that is not accepted; the message says what is."""


def _one_of(options: list[str], what: str, aliases: dict[str, str] | None = None) -> Callable[[str], str]:
    def check(raw: str) -> str:
        raw = (aliases or {}).get(raw, raw)  # the CLI's preset aliases (h100 -> sm90-h200)
        if raw not in options:
            raise _Refused(f"not {what}; accepted: {', '.join(o or '(empty)' for o in options)}")
        return raw
    return check


def _preset(options: list[str], what: str) -> Callable[[str], str]:
    """A platform preset as the CLI reads one (`preset_key`: its aliases, any letter case)."""
    def check(raw: str) -> str:
        key = preset_key(raw) or raw.lower()  # 'host' / 'host-cpu' are no PRESETS key
        if key not in options:
            raise _Refused(f"not {what}; accepted: {', '.join(options)} (aliases such as "
                           "h100, any letter case)")
        return key
    return check


def _int_from(lo: int, hi: int) -> Callable[[str], int]:
    def check(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise _Refused(f"not an integer; accepted: {lo} to {hi}") from None
        if not lo <= value <= hi:
            raise _Refused(f"out of range; accepted: {lo} to {hi}")
        return value
    return check


def _layer_name(raw: str) -> str:
    if "\0" in raw or not raw.strip():
        raise _Refused("empty or holds a NUL byte; accepted: a layer name of the checkpoint")
    return raw


def _m_list(raw: str) -> str:
    from workbench.errors import InvalidInputError

    try:
        parse_ms(raw)
    except InvalidInputError as exc:
        raise _Refused(str(exc)) from None
    return raw


def _tour_step(steps: int) -> Callable[[str], int]:
    check = _int_from(1, steps)
    return lambda raw: check(raw) - 1  # links count tour steps from 1


def _validators(tour_steps: int) -> dict[str, Callable[[str], Any]]:
    from workbench.models import MODELS

    presets = preset_names()
    return {
        "source": _one_of(list(SOURCES), "a layer source"),
        "sample": _one_of(sample_names(), "a bundled sample"),
        "layer": _layer_name,
        "platform": _preset(presets, "a platform preset"),
        "compare": _preset(presets, "a platform preset"),
        "tp": _int_from(1, MAX_TP),
        "parallel": _one_of(list(PARALLEL), "a parallel style"),
        "step": _tour_step(tour_steps),
        "model": _one_of(["", *MODELS], "a model preset"),
        "m": _m_list,
        "vllm": _one_of(list(versions.available()), "a vLLM version with a rule set"),
    }


def _json_object(raw: str) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        raise _Refused("not JSON") from None
    except RecursionError:
        raise _Refused("nested too deeply") from None
    if not isinstance(value, dict):
        raise _Refused(f"a JSON {type(value).__name__}, not an object")
    return value


def _known_only(given: dict, accepted, what: str) -> None:
    unknown = [k for k in given if k not in accepted]
    if unknown:
        raise _Refused(f"unknown {what}(s) {', '.join(map(str, unknown))}; accepted: "
                       f"{', '.join(accepted)}")


def _platform_edits(raw: str) -> dict[str, Any]:
    """Link platform edits, validated by building the platform they describe."""
    from workbench.errors import USER_ERRORS

    edits = _json_object(raw)
    _known_only(edits, PLATFORM_FIELDS, "field")
    ss = st.session_state
    fields = {f: ss[f"pf.{f}"] for f in PLATFORM_FIELDS} | edits
    try:
        build_platform(ss["pf.preset"], fields)
    except (*USER_ERRORS, TypeError, ValueError) as exc:
        raise _Refused(str(exc)) from None
    return edits


def _env_edits(raw: str) -> dict[str, str]:
    from workbench.dispatch.env import parse_env
    from workbench.errors import USER_ERRORS

    env = _json_object(raw)
    _known_only(env, env_defaults(), "key")
    env = {k: v if isinstance(v, str) else json.dumps(v) for k, v in env.items()}
    try:
        parse_env({k: v for k, v in env.items() if v != ""}, rule_set().ENV)
    except (*USER_ERRORS, TypeError, ValueError) as exc:
        raise _Refused(str(exc)) from None
    return env


def _shown_default(key: str) -> Any:
    """A key's default as a link writes it (tour steps count from 1 there, from 0 in the state)."""
    return DEFAULTS[key] + 1 if key == "tour.step" else DEFAULTS[key]


def apply_query(params: dict[str, str], *, tour_steps: int) -> list[str]:
    """Apply link parameters to the state; a value that is refused keeps its default.

    Returns the problems (the sidebar shows them as warnings, never a traceback).
    """
    ss = st.session_state
    problems: list[str] = []

    def shown(raw: str) -> str:
        return repr(raw) if len(raw) <= 80 else repr(f"{raw[:60]}... ({len(raw)} characters)")

    def refuse(name: str, raw: str, why: str, default: Any) -> None:
        problems.append(f"link parameter {name}={shown(raw)} ignored: {why}. Using the default "
                        f"({default if default != '' else 'empty'}).")

    # A parameter the app does not read is named too: a mistyped `platfrom=` would otherwise
    # leave the default in place without a word.
    accepted = [*QUERY_KEYS, "pf", "env"]
    for name in params:
        if name not in accepted:
            problems.append(f"link parameter {shown(name)[1:-1]}={shown(params[name])} ignored: not a "
                            f"parameter of this app; accepted: {', '.join(accepted)}.")
    validators = _validators(tour_steps)
    for name, key in QUERY_KEYS.items():
        if name not in params:
            continue
        raw = params[name]
        if len(raw) > MAX_QUERY_CHARS:
            refuse(name, raw, f"longer than {MAX_QUERY_CHARS} characters", _shown_default(key))
            continue
        try:
            ss[key] = validators[name](raw)
        except _Refused as exc:
            refuse(name, raw, str(exc), _shown_default(key))
    if "platform" in params:
        set_preset(ss["pf.preset"])
    # JSON edits of the platform and the env knobs: all of one applies, or none.
    for name, parse, prefix in (("pf", _platform_edits, "pf."), ("env", _env_edits, "env.")):
        if name not in params:
            continue
        raw = params[name]
        if len(raw) > MAX_QUERY_CHARS:
            refuse(name, raw, f"longer than {MAX_QUERY_CHARS} characters", "no edits")
            continue
        try:
            for field_name, value in parse(raw).items():
                ss[prefix + field_name] = value
        except _Refused as exc:
            refuse(name, raw, str(exc), "no edits")
    ss["_query_problems"] = problems
    return problems


# What a Tour step may set: the layer, platform, env knobs, TP and the Alignment page's model.
_TOUR_PREFIXES = ("layer.", "pf.", "env.", "tp.", "align.", "syn.", "trained.")
TOUR_SAVED = "tour.saved"


def save_for_tour() -> None:
    """Keep the user's own settings when the Tour first makes a step's (moving between steps
    keeps the first copy): leaving the Tour puts them back."""
    import copy

    ss = st.session_state
    if TOUR_SAVED not in ss:
        ss[TOUR_SAVED] = {k: copy.deepcopy(ss[k]) for k in list(ss.keys())
                          if isinstance(k, str) and k.startswith(_TOUR_PREFIXES)}


def restore_after_tour() -> bool:
    """Put back the settings `save_for_tour` kept (True if there were any): a step's layer,
    platform edits and env knobs never follow the user onto another page. The next visit to
    the Tour makes its step's settings again."""
    ss = st.session_state
    saved = ss.pop(TOUR_SAVED, None)
    if saved is None:
        return False
    for k in [k for k in list(ss.keys()) if isinstance(k, str) and k.startswith(_TOUR_PREFIXES)]:
        if k not in saved:
            del ss[k]
    for k, v in saved.items():
        ss[k] = v
    ss.pop("tour.entered", None)
    return True


def set_preset(name: str) -> None:
    """Pick a platform preset: every editable field takes the preset's value."""
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
    for key, default in env_defaults().items():
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


CALLBACK_ERROR = "_callback_error"


def guarded(callback: Callable[..., None]) -> Callable[..., None]:
    """`callback` inside the page's error boundary.

    Streamlit runs widget callbacks before the script, outside any `try` of the page: an
    exception there would replace the app with a traceback. It is kept instead, and the
    router shows it in the main area of the run that follows.
    """
    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> None:
        try:
            callback(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - shown by the router's boundary
            st.session_state[CALLBACK_ERROR] = exc
    return run


def _sync(key: str, after: Callable[[], None] | None = None) -> None:
    st.session_state[key] = st.session_state[f"w:{key}"]
    if after is not None:
        after()


def bind(widget: Callable[..., Any], label: str, key: str, *,
         after: Callable[[], None] | None = None, **kwargs: Any) -> Any:
    """Draw `widget` showing state `key`; a change writes the key back (then calls `after`)."""
    st.session_state[f"w:{key}"] = st.session_state[key]
    widget(label, key=f"w:{key}", on_change=guarded(_sync), args=(key, after), **kwargs)
    return st.session_state[key]
