"""The notebooks' face: ipywidgets controls over the workbench core, with a static fallback.

This is the only module that imports ipywidgets (the core never does). A notebook builds a
`Panel` from named controls and a `render(**values)` function returning what to show (Markdown
strings, DataFrames, plotly figures). With a live kernel and ipywidgets the panel draws the
controls and re-renders into an `Output` on every change. Without one (plain Python, a
converted script, or `WORKBENCH_NOTEBOOK_STATIC=1` as the headless tests set) it renders the
default values once as ordinary cell output, so an executed notebook reads the same on a page
viewer that has no kernel.

Environment knobs the notebooks read:
    WORKBENCH_NOTEBOOK_SMALL=1    small sizes and fewer repeats (CI, a quick read-through)
    WORKBENCH_NOTEBOOK_STATIC=1   no widgets: render the default settings as static output
    WORKBENCH_SAMPLE_MODELS=DIR   where the sample checkpoints are (default: sample_models/)
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = [
    "small_mode", "static_mode", "live_widgets", "repo_root", "sample_path", "show", "Panel",
    "panel", "dropdown", "multi", "checkbox", "dispatch_controls", "link_preset",
    "platform_from_values", "env_from_values", "trace_table", "steps_table", "mp_kernel_names",
]

SMALL_ENV = "WORKBENCH_NOTEBOOK_SMALL"
STATIC_ENV = "WORKBENCH_NOTEBOOK_STATIC"


def small_mode() -> bool:
    """True when the notebook should use its small sizes (CI budget)."""
    return os.environ.get(SMALL_ENV, "") not in ("", "0")


def static_mode() -> bool:
    return os.environ.get(STATIC_ENV, "") not in ("", "0")


def live_widgets() -> bool:
    """True when controls can work: an IPython kernel (it carries comms) and ipywidgets."""
    if static_mode():
        return False
    try:
        from IPython import get_ipython
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    ip = get_ipython()
    # A terminal IPython or a plain script has no kernel, hence no comms to a frontend.
    return ip is not None and getattr(ip, "kernel", None) is not None


def repo_root(start: Path | None = None) -> Path:
    """The repository root: the first folder up from `start` (default: cwd) with pyproject.toml."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "pyproject.toml").is_file() and (d / "workbench").is_dir():
            return d
    import workbench

    return Path(workbench.__file__).resolve().parents[1]


def sample_path(name: str) -> Path:
    """A bundled sample checkpoint, `sample_models/<name>`; named error when it is missing."""
    from workbench.errors import CheckpointError

    base = os.environ.get("WORKBENCH_SAMPLE_MODELS")
    path = (Path(base) if base else repo_root() / "sample_models") / name
    if not path.is_dir():
        raise CheckpointError(f"sample checkpoint {name!r} not found at {path}; generate it with "
                              "`python sample_models/generate.py`")
    return path


# --------------------------------------------------------------------------- output


def _displayable(obj: Any) -> Any:
    """Markdown for plain strings; everything else as IPython would show it."""
    if isinstance(obj, str):
        from IPython.display import Markdown

        return Markdown(obj)
    return obj


def show(*objs: Any) -> None:
    """Display Markdown strings, tables and figures; print them when IPython is absent."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python without IPython: text only
        for obj in objs:
            print(obj)
        return
    if get_ipython() is None:  # plain Python: tables as text, figures by title
        for obj in objs:
            if hasattr(obj, "to_plotly_json"):
                print(f"[figure: {obj.layout.title.text}]")
            else:
                print(obj.to_string() if hasattr(obj, "to_string") else obj)
        return
    for obj in objs:
        display(_displayable(obj))


def _as_list(result: Any) -> list:
    if result is None:
        return []
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


def _error_text(exc: BaseException) -> str:
    return f"**{type(exc).__name__}:** {exc}"


@dataclass
class Panel:
    """Named controls and the function they drive.

    `values()` reads the controls; `refresh()` re-renders into `output` (live) and returns what
    was rendered, so a test can drive a panel without a browser.
    """

    controls: dict[str, Any]
    render: Callable[..., Any]
    title: str = ""
    output: Any = None
    last: list = field(default_factory=list)
    links: list[Callable[[dict], None]] = field(default_factory=list)

    def values(self) -> dict[str, Any]:
        return {k: w.value for k, w in self.controls.items()}

    def refresh(self, *_: Any) -> list:
        from workbench.errors import USER_ERRORS

        try:
            self.last = _as_list(self.render(**self.values()))
        except USER_ERRORS as exc:  # a user-fixable input: show the message, keep the panel
            self.last = [_error_text(exc)]
        if self.output is not None:
            self.output.outputs = ()
            for obj in self.last:
                self.output.append_display_data(_displayable(_live_figure(obj)))
        return self.last

    def widget(self) -> Any:
        import ipywidgets as W

        if self.output is None:
            self.output = W.Output()
            for w in self.controls.values():
                w.observe(self.refresh, names="value")
        header = [W.HTML(f"<b>{self.title}</b>")] if self.title else []
        return W.VBox(header + [W.HBox(list(self.controls.values())[i:i + 3])
                                for i in range(0, len(self.controls), 3)] + [self.output])


def _live_figure(obj: Any) -> Any:
    """A plotly Figure becomes a FigureWidget (anywidget) in a live kernel, for zoom and hover."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        return obj
    if isinstance(obj, go.Figure) and not isinstance(obj, go.FigureWidget):
        try:
            return go.FigureWidget(obj)
        except Exception:  # noqa: BLE001 - anywidget missing or too old: the static figure draws too
            return obj
    return obj


def panel(controls: dict[str, Any], render: Callable[..., Any], *, title: str = "",
          display_now: bool = True) -> Panel:
    """Show a control panel (live) or the rendering of its defaults (static)."""
    p = Panel(controls, render, title)
    if not display_now:
        return p
    if live_widgets():
        from IPython.display import display

        display(p.widget())
        p.refresh()
    else:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in p.values().items())
        show(f"*Static output (no live kernel): {title or 'panel'} at its defaults: {shown}. "
             f"Open the notebook in Jupyter for the controls.*")
        show(*p.refresh())
    return p


def _short(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


# --------------------------------------------------------------------------- value controls


@dataclass
class _Value:
    """A stand-in control when ipywidgets is absent: holds a value, ignores observers."""

    value: Any
    description: str = ""

    def observe(self, *_: Any, **__: Any) -> None:
        pass


def _ipw():
    try:
        import ipywidgets as W
    except ImportError:
        return None
    return W


def dropdown(options: Iterable, value: Any, description: str) -> Any:
    W = _ipw()
    options = list(options)
    if W is None:
        return _Value(value, description)
    return W.Dropdown(options=options, value=value, description=description,
                      style={"description_width": "initial"})


def multi(options: Iterable, value: Iterable, description: str, rows: int = 5) -> Any:
    W = _ipw()
    options, value = list(options), tuple(value)
    if W is None:
        return _Value(value, description)
    return W.SelectMultiple(options=options, value=value, description=description, rows=rows,
                            style={"description_width": "initial"})


def checkbox(value: bool, description: str) -> Any:
    W = _ipw()
    if W is None:
        return _Value(value, description)
    return W.Checkbox(value=value, description=description, indent=False)


# --------------------------------------------------------------------------- dispatch controls


def mp_kernel_names(rules=None) -> tuple[str, ...]:
    """Every candidate kernel of a rule set (None: the pinned one), in its lists' order."""
    from workbench.dispatch.versions import rule_set

    seen: dict[str, None] = {}
    for kernels in rule_set(rules).POSSIBLE_KERNELS.values():
        for k in kernels:
            seen.setdefault(k.__name__, None)
    return tuple(seen)


def version_control() -> Any:
    """The vLLM version to trace with: one of the versions with a rule set."""
    from workbench.dispatch.versions import DEFAULT_VERSION, available

    return dropdown(available(), DEFAULT_VERSION, "vLLM version")


def dispatch_controls(preset: str = "sm90-h200", layers: Iterable[str] = (),
                      layer: str | None = None) -> dict[str, Any]:
    """The vLLM version, the platform preset, its packages / torch ops / AMX, and vLLM's
    dispatch knobs. `version` holds the rule set to trace with (`trace_*(..., rules=)`).

    Choosing a preset resets packages, ops and AMX to that preset's values (see `link_preset`).
    """
    from workbench.dispatch.versions import pinned
    from workbench.platforms import KNOWN_PACKAGES, KNOWN_TORCH_OPS, PRESETS

    base = PRESETS[preset]
    controls: dict[str, Any] = {}
    layers = list(layers)
    if layers:
        controls["layer"] = dropdown(layers, layer or layers[0], "layer")
        controls["tp_size"] = dropdown([1, 2, 4, 8], 1, "TP size")
    controls.update(
        version=version_control(),
        preset=dropdown([*PRESETS, "host"], preset, "platform"),
        packages=multi(KNOWN_PACKAGES, base.packages, "packages"),
        torch_ops=multi(KNOWN_TORCH_OPS, base.torch_ops, "torch ops"),
        amx=checkbox(base.amx, "AMX tiles"),
        disabled=multi(mp_kernel_names(), (), "VLLM_DISABLED_KERNELS", rows=6),
        linear_backend=dropdown(pinned().ENV.linear_backends, "auto", "--linear-backend"),
        cpu_int4_w4a8=checkbox(True, "VLLM_CPU_INT4_W4A8"),
        marlin_input_dtype=dropdown(["unset", "int8", "fp8"], "unset", "VLLM_MARLIN_INPUT_DTYPE"),
    )
    return controls


def link_preset(p: Panel) -> None:
    """When the preset changes, load its packages, ops and AMX into the controls."""
    ctrl = p.controls["preset"]
    if not hasattr(ctrl, "observe") or isinstance(ctrl, _Value):
        return

    def on_preset(change: dict) -> None:
        plat = _base_platform(change["new"])
        p.controls["packages"].value = tuple(x for x in plat.packages
                                             if x in p.controls["packages"].options)
        p.controls["torch_ops"].value = tuple(x for x in plat.torch_ops
                                              if x in p.controls["torch_ops"].options)
        p.controls["amx"].value = plat.amx

    ctrl.observe(on_preset, names="value")


def _base_platform(preset: str):
    from workbench.platforms import detect_host, get_preset

    return detect_host() if preset == "host" else get_preset(preset)


def platform_from_values(preset: str, packages: Iterable[str] = (), torch_ops: Iterable[str] = (),
                         amx: bool = False, **_: Any):
    """A Platform: the preset, with the packages, ops and AMX flag the controls hold."""
    base = _base_platform(preset)
    edited = replace(base, packages=tuple(packages), torch_ops=tuple(torch_ops), amx=bool(amx))
    if edited != base:
        edited = replace(edited, name=f"{base.name}*",
                         description=f"{base.label()} (edited: packages {list(packages)}, "
                                     f"ops {list(torch_ops)}, AMX {bool(amx)})")
    return edited


def env_from_values(disabled: Iterable[str] = (), linear_backend: str = "auto",
                    cpu_int4_w4a8: bool = True, marlin_input_dtype: str = "unset",
                    **_: Any) -> dict[str, str]:
    """The env mapping `workbench.dispatch` takes; only knobs that differ from vLLM's defaults."""
    env: dict[str, str] = {}
    if disabled:
        env["VLLM_DISABLED_KERNELS"] = ",".join(disabled)
    if linear_backend != "auto":
        env["linear_backend"] = linear_backend
    if not cpu_int4_w4a8:
        env["VLLM_CPU_INT4_W4A8"] = "0"
    if marlin_input_dtype != "unset":
        env["VLLM_MARLIN_INPUT_DTYPE"] = marlin_input_dtype
    return env


# --------------------------------------------------------------------------- trace tables


def trace_table(rows: list[tuple[str, Any]]):
    """One row per (label, Trace): scheme, outcome, and what runs."""
    import pandas as pd

    out = []
    for label, t in rows:
        rejected = sum(s.outcome in ("rejected", "capability", "disabled") for s in t.steps)
        out.append({
            "platform": label,
            "scheme": t.scheme,
            "selected": t.selected or "-",
            "error": (t.error or "").split("\n")[0] if t.error else "",
            "walked": f"{len(t.steps)} of {len(t.candidates)}" if t.candidates else str(len(t.steps)),
            "rejected before": rejected,
            "what runs": t.runtime,
        })
    return pd.DataFrame(out)


def steps_table(t) -> Any:
    """A trace's kernel steps, in loop order, with vLLM's reason text."""
    import pandas as pd

    return pd.DataFrame([{"#": i, "kernel": s.kernel, "outcome": s.outcome,
                          "reason": (s.reason or "").strip()} for i, s in enumerate(t.steps, 1)])
