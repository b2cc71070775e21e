"""Tour: the W4A8 story in six steps, each a live view of the pages with its settings made.

Entering a step writes its settings into the shared state (layer, platform, env, TP), so
the presenter can change any of them on this page. Leaving the Tour puts the user's own
settings back (`state.restore_after_tour`): a step's edits never follow onto another page.
The URL carries `?step=N`: opening it in a fresh tab reproduces the step's view.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import streamlit as st

from workbench.ui import loaders, state, widgets
from workbench.ui.state import guarded


@dataclass(frozen=True)
class TourStep:
    title: str
    story: str
    settings: dict[str, Any]
    view: Callable[[], None]
    platform_edits: dict[str, Any] = field(default_factory=dict)


def _layer_and_platform():
    ss = st.session_state
    ref = loaders.current_ref(ss)
    return ref, widgets.current_platform(), widgets.current_env()


def _trace_view(*, compare: bool = False) -> None:
    from workbench.ui.views import trace as trace_view

    ref, platform, env = _layer_and_platform()
    t = widgets.compute_trace(ref, platform, env)
    widgets.headline(t, platform, ref)
    widgets.outcome_view(t)
    for note in widgets.ambiguity_notes(t, env):
        st.warning(f"Where vLLM is ambiguous: {note}")
    if compare:
        trace_view.compare(t, platform, ref, env)
        return
    with st.expander("Scheme resolution", expanded=False):
        widgets.scheme_view(t)
    if t.steps:
        st.markdown("**Kernel selection, candidate by candidate**")
        trace_view.kernel_loop(t, key="tour-loop")


def _view_docs_vs_code() -> None:
    _trace_view()


def _view_reference_path() -> None:
    from workbench.ui.views import kernels

    _trace_view_brief()
    # The presenter should see numbers at once: a small sweep runs on entering the step.
    kernels.comparison(key="tour-ref", default_m="1,16,64", auto_run=True)


def _trace_view_brief() -> None:
    ref, platform, env = _layer_and_platform()
    t = widgets.compute_trace(ref, platform, env)
    widgets.headline(t, platform, ref)
    widgets.outcome_view(t)


def _view_h200() -> None:
    st.markdown("Left: the H200 as edited here, **without** `humming` installed. Right: the preset, "
                "with `humming` as vLLM's CUDA requirements install it. Change either freely.")
    _trace_view(compare=True)


def _view_machete() -> None:
    _trace_view()
    from workbench.dispatch import trace_mp

    st.markdown("The same candidate list on a hand-built config: W4A16 weights (`uint4b8`, g128) with "
                "`act_type=int8`, as `VLLM_MARLIN_INPUT_DTYPE=int8` makes it for a GPTQ checkpoint. "
                "Machete accepts before Marlin or Humming are reached, and the load then fails in "
                "its prepack, which has no int8 layout:")
    ref, platform, env = _layer_and_platform()
    t = trace_mp({"weight_type": "uint4b8", "act_type": "int8", "group_size": 128,
                  "zero_points": False, "full_weight_shape": [4096, 4096],
                  "partition_weight_shape": [4096, 4096]}, platform, env,
                 rules=state.rule_set())
    widgets.outcome_view(t)
    widgets.steps_view(t, key="tour-machete-int8")


def _view_inc() -> None:
    from workbench.ui.views import kernels

    _trace_view_brief()
    kernels.speedup_story(key="tour-inc")


def _view_tp() -> None:
    from workbench.ui.views import alignment

    _trace_view()
    alignment.layer_table(key="tour-tp")


STEPS: tuple[TourStep, ...] = (
    TourStep(
        "The docs say x86 CPU cannot run W4A8; the code picks Dynamic4bitLinearKernel",
        "vLLM's hardware table marks llm-compressor W4A8 as unsupported on x86 CPUs. Load the "
        "llm-compressor W4A8 sample (int4 g128 weights, int8 dynamic per-token input, "
        "`int-quantized`) on an x86 CPU: the scheme resolves to `CompressedTensorsW4A8Int`, whose "
        "minimum capability is 1, and the CPU list selects `Dynamic4bitLinearKernel` at its first "
        "candidate.",
        {"layer.source": "sample", "layer.sample": "ct-w4a8-int-g128",
         "layer.name": "model.layers.0.mlp.down_proj", "pf.preset": "x86-avx512", "tp.size": 1},
        _view_docs_vs_code),
    TourStep(
        "That kernel runs torch's reference path here, measured against W4A16",
        "`Dynamic4bitLinearKernel` calls `aten._dyn_quant_matmul_4bit`. On Arm that is KleidiAI; on "
        "x86 torch has no optimized kernel and runs a generic path. Run it on this machine against "
        "the W4A16 fallback and the float64 reference.",
        {"layer.source": "sample", "layer.sample": "ct-w4a8-int-g128",
         "layer.name": "model.layers.0.mlp.down_proj", "pf.preset": "host", "tp.size": 1},
        _view_reference_path),
    TourStep(
        "On H200 every candidate rejects, unless Humming is installed: then it runs weight-only",
        "The same layer on Hopper. Cutlass W4A8 wants fp8 activations, Machete, Marlin, Conch and "
        "Triton want `uint4b8`-style weights, Exllama wants fp16: all reject signed `int4`. Only "
        "Humming accepts, and only if the `humming` package is installed; it then receives a 16-bit "
        "`act_type`, so the int8 activation scheme is dropped.",
        {"layer.source": "sample", "layer.sample": "ct-w4a8-int-g128",
         "layer.name": "model.layers.0.mlp.down_proj", "pf.preset": "sm90-h200",
         "pf.compare": "sm90-h200", "tp.size": 1},
        _view_h200, platform_edits={"packages": []}),
    TourStep(
        "Machete takes a W4A16 layer that carries int8 activations",
        "Write the same W4A8 arguments as `pack-quantized` and the scheme becomes "
        "`CompressedTensorsWNA8Int`, with `uint4b8` weights. On Hopper, Machete accepts it before "
        "Humming (the only kernel that reads the int8 input schema) is reached: the layer silently "
        "runs W4A16.",
        {"layer.source": "sample", "layer.sample": "ct-w4a8-pack-sym-input",
         "layer.name": "model.layers.0.mlp.down_proj", "pf.preset": "sm90-h200", "tp.size": 1},
        _view_machete),
    TourStep(
        "INC's 512-token per-call fallback, set against the measured crossover",
        "vLLM's INC path on Intel XPU (`VLLM_XPU_INC_WNA16_BACKEND=w4a8`) runs W4A8 only for calls of "
        "at least 512 tokens and falls back to W4A16 below. Where W4A8 actually starts to win is a "
        "measurement: the crossover of the speedup curve.",
        {"layer.source": "sample", "layer.sample": "autoround-w4a16-g128",
         "layer.name": "model.layers.0.mlp.down_proj", "pf.preset": "xpu", "tp.size": 1,
         "env.VLLM_XPU_INC_WNA16_BACKEND": "w4a8"},
        _view_inc),
    TourStep(
        "A tensor-parallel shard that breaks alignment",
        "Intermediate size 1152 at TP 2: `down_proj` is row-parallel, so each shard gets K = 576, "
        "which group 128 does not divide: `CompressedTensorsW4A8Int` refuses the layer before any "
        "kernel is tried. `gate_proj` / `up_proj` shards get N = 576, which breaks Machete's "
        "N % 128 rule; on this signed int4 layer Machete never reaches that check, it rejects the "
        "quant type first (`Quant type (int4) not supported by Machete`), and Humming takes the "
        "shard. The N % 128 rule is what a `uint4b8` (W4A16) shard of that width runs into.",
        {"layer.source": "sample", "layer.sample": "ct-w4a8-int-intermediate-1152",
         "layer.name": "model.layers.0.mlp.down_proj", "pf.preset": "sm90-h200", "tp.size": 2,
         "align.model": ""},
        _view_tp),
)


def enter(i: int) -> None:
    """Make step i's settings (the rest of the state is left to vLLM defaults)."""
    ss = st.session_state
    step = STEPS[i]
    state.save_for_tour()  # the user's own settings, put back on leaving the Tour
    for key, default in state.env_defaults().items():
        ss[f"env.{key}"] = default
    ss["tp.parallel"] = "auto"
    for key, value in step.settings.items():
        ss[key] = value
    state.set_preset(ss["pf.preset"])
    for f, v in step.platform_edits.items():
        ss[f"pf.{f}"] = v
    ss["tour.step"] = i
    ss["tour.entered"] = i


def _go(i: int) -> None:
    enter(max(0, min(len(STEPS) - 1, i)))


def prepare() -> None:
    """Make the current step's settings if it was not entered yet (a link, or the first visit).

    The router calls this before it draws the sidebar, so the sidebar shows the step's layer
    and platform on the step's first screen.
    """
    ss = st.session_state
    if not 0 <= ss["tour.step"] < len(STEPS):
        ss["tour.step"] = 0
    if ss.get("tour.entered") != ss["tour.step"]:
        enter(ss["tour.step"])


def render() -> None:
    st.title("Tour: the W4A8 story")
    ss = st.session_state
    n = len(STEPS)
    prepare()
    i = ss["tour.step"]
    st.query_params["step"] = str(i + 1)  # links count from 1
    c = st.columns([1.4, 1.2, 4, 2])
    # "step" in the labels: a step's own view has a candidate stepper with its own Next.
    c[0].button("Previous step", key="tour.prev", disabled=i == 0, on_click=guarded(_go), args=(i - 1,))
    c[1].button("Next step", key="tour.next", disabled=i == n - 1, on_click=guarded(_go), args=(i + 1,))
    ss["w:tour.jump"] = i
    c[2].selectbox("Jump to step", range(n), key="w:tour.jump", label_visibility="collapsed",
                   format_func=lambda k: f"{k + 1}. {STEPS[k].title}",
                   on_change=guarded(lambda: _go(ss["w:tour.jump"])))
    c[3].markdown(f"[Link to step {i + 1}]({state.link('tour', {'step': i + 1})})")
    step = STEPS[i]
    st.header(f"{i + 1}. {step.title}")
    st.markdown(step.story)
    st.caption("Settings made for this step: " + ", ".join(
        f"{k.split('.')[-1]}={v}" for k, v in step.settings.items())
        + "".join(f", platform {k}={v}" for k, v in step.platform_edits.items())
        + ". Change any of them on this page's panel; Previous step / Next step remakes them, and "
        "leaving the Tour puts your own settings back.")
    from workbench.ui.views import trace as trace_view

    trace_view.settings()
    try:
        step.view()
    except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
        widgets.show_error(exc)
