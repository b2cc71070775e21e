"""Plotly figure builders shared by the app and the notebooks (no UI library here).

Each builder takes the core's plain results (layers, matrix rows, sweep rows) and returns
a `plotly.graph_objects.Figure`; `figure_html` / `figure_png` export one.
"""
from __future__ import annotations

import math
from html import escape
from typing import Any, Iterable, Sequence

import plotly.graph_objects as go

from workbench.dispatch.versions import RuleSet, pinned

__all__ = [
    "int4_histogram", "scale_histogram", "docs_matrix_figure", "alignment_figure",
    "padding_cost_figure", "latency_figure", "speedup_figure", "error_figure",
    "per_token_error_figure", "figure_html", "figure_png",
    "prediction_figure", "crossover_band", "has_roofline",
]

_OK, _SELECTED, _REJECT = "#2e9e5b", "#1a5fb4", "#d9534f"
# One row of a chart's line labels, as a share of the plot's height (a 15 px line on a
# plot area of about 250 px, the height Streamlit gives a chart with its legend below).
LABEL_ROW = 0.08


def _layout(fig: go.Figure, title: str, **kwargs: Any) -> go.Figure:
    # The legend goes under the plot: above it, a long title and the legend overlap.
    # A title of several lines (<br>) gets the room it needs: one line is about 22 px.
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=15)), template="plotly_white",
                      margin=dict(l=60, r=20, t=38 + 22 * (title.count("<br>") + 1), b=60),
                      legend=dict(orientation="h", yanchor="top", y=-0.2, x=0), **kwargs)
    return fig


# --------------------------------------------------------------------------- layer


def _short(name: str) -> str:
    """The last two parts of a module name (`mlp.down_proj`), as a title can hold them."""
    return ".".join(name.split(".")[-2:])


def int4_histogram(layer) -> go.Figure:
    """How often each int4 code occurs in the layer's weight (signed, or unsigned with zeros)."""
    import torch

    w = layer.int4_weight().to(torch.int64).flatten()
    signed = layer.zeros is None
    lo = -8 if signed else 0
    counts = torch.bincount(w - lo, minlength=16)[:16].tolist()
    codes = list(range(lo, lo + 16))
    fig = go.Figure(go.Bar(x=codes, y=counts, marker_color=_SELECTED, name="weights"))
    kind = "signed int4 (symmetric)" if signed else "unsigned int4 with zero points"
    # Plotly renders <a>, <b>, <br> in text: a name from a checkpoint is escaped.
    # The short name: the full one heads the page, and a half-width title cannot wrap it.
    return _layout(fig, f"Weight codes of {escape(_short(layer.name))}<br>{kind}",
                   xaxis_title="int4 code", yaxis_title="count", bargap=0.1)


def scale_histogram(layer) -> go.Figure:
    """The distribution of the group scales (as stored, shown in float32)."""
    import torch

    s = layer.scales.to(torch.float32).flatten().tolist()
    fig = go.Figure(go.Histogram(x=s, nbinsx=60, marker_color=_OK, name="scales"))
    return _layout(fig, f"Scales of {escape(_short(layer.name))}<br>{layer.scales.shape[0]} x "
                        f"{layer.scales.shape[1]}, {str(layer.scales.dtype).removeprefix('torch.')}",
                   xaxis_title="scale", yaxis_title="count")


# --------------------------------------------------------------------------- dispatch tables


def docs_matrix_figure(rows: list[dict], rules: RuleSet | None = None) -> go.Figure:
    """vLLM's documented hardware table against the code: each cell docs / code, disagreements red,
    and where vLLM fails (selection, load, first forward); `rules`: the rule set that computed
    the rows (None: the pinned one)."""
    from workbench.dispatch.docs_matrix import FAILS_AT_WORDS

    hardware = [c["hardware"] for c in rows[0]["cells"]] if rows else []
    names = [r["implementation"] for r in rows]
    # -1: docs and code disagree; 0 / 1: both say NO / YES; 2: docs only (row not modelled)
    z, text, hover = [], [], []
    for r in rows:
        zr, tr, hr = [], [], []
        for c in r["cells"]:
            docs = "YES" if c["docs"] else "NO"
            if c["code"] is None:
                zr.append(2)
                tr.append(f"docs {docs}")
            else:
                code = "YES" if c["code"] else "NO"
                zr.append(-1 if c["disagrees"] else (1 if c["code"] else 0))
                tr.append(f"docs {docs}<br>code {code}" + ("<br>(W4A16)" if c["weight_only"] else "")
                          + (f"<br>{FAILS_AT_WORDS[c['fails_at']]}" if c.get("fails_at") else ""))
            hr.append(c["explanation"])
        z.append(zr)
        text.append(tr)
        hover.append(hr)
    colorscale = [[0.0, _REJECT], [0.16, _REJECT], [0.17, "#e4efe8"], [0.5, "#e4efe8"],
                  [0.51, _OK], [0.83, _OK], [0.84, "#f2f2f2"], [1.0, "#f2f2f2"]]
    fig = go.Figure(go.Heatmap(z=z, x=hardware, y=names, text=text, texttemplate="%{text}",
                               textfont=dict(size=11), customdata=hover,
                               hovertemplate="%{y} on %{x}<br>%{customdata}<extra></extra>",
                               colorscale=colorscale, zmin=-1, zmax=2, showscale=False, xgap=2, ygap=2))
    # The colour legend: a colour scale bar would read as a continuous value.
    for color, label in ((_REJECT, "docs and code disagree"), (_OK, "both YES"),
                         ("#e4efe8", "both NO"), ("#f2f2f2", "docs only (not modelled)")):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=label, hoverinfo="skip",
                                 marker=dict(size=14, symbol="square", color=color,
                                             line=dict(color="#999", width=1))))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=12))
    fig.update_xaxes(tickfont=dict(size=12))
    return _layout(fig, "vLLM docs (Supported Hardware) against what the "
                        f"{(rules or pinned()).version} code selects; red: they disagree",
                   # a cell of four lines (docs, code, W4A16, where vLLM fails) needs ~15 px a line
                   height=170 + max(60, 15 * max((t.count("<br>") + 1 for tr in text for t in tr), default=1)
                                    + 12) * len(names))


def alignment_figure(rows: list[dict], kernels: Sequence[str]) -> go.Figure:
    """Every layer partition against every candidate kernel: accepted, selected, or rejected.

    `rows`: one per layer, each with `label` and `verdicts` {kernel: (outcome, reason)} where
    outcome is "selected", "accepts", "rejected", "capability", "disabled", "not reached" or
    "refused" (the scheme refused the layer before any kernel was tried).
    """
    code = {"selected": 2, "accepts": 1, "rejected": -1, "capability": -1, "disabled": -0.5,
            "crashed": -1, "refused": -1, "not reached": 0}
    z, text, hover = [], [], []
    for r in rows:
        zr, tr, hr = [], [], []
        for k in kernels:
            outcome, reason = r["verdicts"].get(k, ("not reached", ""))
            zr.append(code.get(outcome, 0))
            tr.append({"selected": "SELECTED", "accepts": "accepts", "refused": "refused"}.get(outcome, "") or
                      ("rejects" if code.get(outcome, 0) < 0 else ""))
            hr.append(reason or outcome)
        z.append(zr)
        text.append(tr)
        hover.append(hr)
    colorscale = [[0.0, _REJECT], [0.25, "#f0ad4e"], [0.34, "#f4f4f4"], [0.67, "#cfe8d8"], [1.0, _SELECTED]]
    short = [k.removesuffix("LinearKernel") for k in kernels]
    fig = go.Figure(go.Heatmap(z=z, x=short, y=[escape(r["label"]) for r in rows], text=text,
                               texttemplate="%{text}", customdata=hover,
                               hovertemplate="%{y}<br>%{x}: %{customdata}<extra></extra>",
                               colorscale=colorscale, zmin=-1, zmax=2, showscale=False, xgap=2, ygap=2))
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "Layer partitions against candidate kernels", height=140 + 36 * len(rows))


def padding_cost_figure(rows: list[dict], *, x: str = "offset", y: str = "cost",
                        series: str | None = None, title: str = "Alignment sweep: padding cost",
                        xaxis_title: str = "offset from an aligned size",
                        yaxis_title: str = "padding overhead (%)") -> go.Figure:
    """Padding cost (or any y) against the K/N offset, one line per series."""
    fig = go.Figure()
    for name, pts in _group(rows, series):
        fig.add_trace(go.Scatter(x=[p[x] for p in pts], y=[p[y] for p in pts], mode="lines+markers",
                                 name=escape(str(name)), error_y=_spread(pts, y)))
    return _layout(fig, title, xaxis_title=xaxis_title, yaxis_title=yaxis_title)


# --------------------------------------------------------------------------- kernels


def _spread(pts: list[dict], y: str) -> dict | None:
    """Error bars from the p20 / p80 the rows carry (`<y>` with `_us` -> `p20_us`, `p80_us`)."""
    unit = y.rsplit("_", 1)[-1]
    lo, hi = f"p20_{unit}", f"p80_{unit}"
    if not pts or not all(p.get(lo) is not None and p.get(hi) is not None for p in pts):
        return None
    return dict(type="data", symmetric=False, array=[p[hi] - p[y] for p in pts],
                arrayminus=[p[y] - p[lo] for p in pts], thickness=1)


def _group(rows: Iterable[dict], key: str | None) -> list[tuple[Any, list[dict]]]:
    out: dict[Any, list[dict]] = {}
    for r in rows:
        out.setdefault(r.get(key) if key else "", []).append(r)
    return list(out.items())


def latency_figure(rows: list[dict], *, x: str = "m", y: str = "median_us", series: str = "path",
                   title: str = "Latency against tokens (M)") -> go.Figure:
    """Latency against M for every path, log-log. Rows of saved results keep their own series."""
    fig = go.Figure()
    for name, pts in _group(rows, series):
        pts = sorted(pts, key=lambda p: p[x])
        dash = "dash" if any(p.get("saved") for p in pts) else "solid"
        fig.add_trace(go.Scatter(x=[p[x] for p in pts], y=[p[y] for p in pts], mode="lines+markers",
                                 name=escape(str(name)), line=dict(dash=dash), error_y=_spread(pts, y)))
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return _layout(fig, title, xaxis_title="tokens M", yaxis_title="latency (µs)")


def speedup_figure(rows: list[dict], *, x: str = "m", y: str = "speedup", series: str = "series",
                   crossovers: dict[str, float | None] | None = None,
                   rules: RuleSet | None = None,
                   title: str = "W4A8 speedup over the W4A16 fallback") -> go.Figure:
    """Speedup (W4A16 time / W4A8 time) against M, 1.0 drawn, crossovers and INC's token switch
    marked: vLLM's INC XPU W4A8 path falls back to W4A16 per call below the `rules`' threshold
    (None: the pinned rule set's)."""
    inc_threshold = (rules or pinned()).MIN_TOKENS_FOR_INT8
    fig = go.Figure()
    for name, pts in _group(rows, series):
        pts = sorted(pts, key=lambda p: p[x])
        flagged = [bool(p.get("unreliable")) for p in pts]
        fig.add_trace(go.Scatter(x=[p[x] for p in pts], y=[p[y] for p in pts], mode="lines+markers",
                                 name=escape(str(name) + (" (x: unreliable timing)" if any(flagged) else "")),
                                 marker=dict(symbol=["x-open" if f else "circle" for f in flagged],
                                             size=[11 if f else 6 for f in flagged]),
                                 hovertext=[escape(p.get("unreliable") or "") for p in pts]))
    fig.add_hline(y=1.0, line=dict(color="#888", dash="dot"))
    xs = [r[x] for r in rows if r[x] > 0]
    lo, hi = (min(xs), max(xs)) if xs else (1, 4096)
    # The axis spans the data; a line outside it is not drawn (it would stretch the axis).
    # Annotations on a log axis take log10(x), unlike the lines: plotly's add_vline places
    # its label at 10**x, which put "M≈32" at 1e32 and INC's 512 off every plot.
    pad = 0.05 * max(math.log10(hi / lo), 1.0)
    fig.update_xaxes(range=[math.log10(lo) - pad, math.log10(hi) + pad])
    marks = [(m, _OK, f"measured crossover {name}: M≈{m:g}")
             for name, m in (crossovers or {}).items() if m is not None]
    if inc_threshold:
        marks.append((inc_threshold, _REJECT, f"INC: W4A16 below {inc_threshold} tokens, W4A8 from "
                      f"{inc_threshold}"))
    # Each label starts at its line, one row lower than the last (lines close together stay legible).
    if inc_threshold and not lo <= inc_threshold <= hi:
        fig.add_annotation(x=1, xref="paper", y=1, yref="paper", xanchor="right", showarrow=False,
                           text=f"INC's {inc_threshold}-token switch lies outside the measured M",
                           font=dict(color=_REJECT))
    rows_used = int(bool(inc_threshold and not lo <= inc_threshold <= hi))
    for i, (m, color, label) in enumerate(marks):
        if not lo <= m <= hi:
            continue
        fig.add_vline(x=m, line=dict(color=color, dash="dash"))
        fig.add_annotation(x=math.log10(m), xref="x", y=1 - LABEL_ROW * i, yref="paper", text=escape(label),
                           showarrow=False, xanchor="left", yanchor="top", font=dict(color=color),
                           bgcolor="white")
        rows_used = max(rows_used, i + 1)
    # The labels' white boxes sit in the top rows of the plot: autorange would put the largest
    # speedup right under them (a 3.7x point vanished so). The y range ends above the rows.
    ys = [r[y] for r in rows if r[x] > 0 and r[y] is not None and math.isfinite(r[y])] + [1.0]
    y_lo, y_hi = min(ys), max(ys)
    pad = 0.06 * max(y_hi - y_lo, 0.5)
    top = min(0.6, LABEL_ROW * rows_used + 0.02)  # the share of the plot the labels take
    if y_lo > 0 and y_hi / y_lo > 10:
        # Curves an order of magnitude apart (a CPU's 60x beside a GPU's 1.2x) share one log
        # axis: on a linear one the small one lies flat on 1.0.
        l0, l1 = math.log10(y_lo) - 0.1, math.log10(y_hi) + 0.1
        fig.update_yaxes(type="log", range=[l0, l0 + (l1 - l0) / (1 - top)])
    else:
        y0 = max(0.0, y_lo - pad)
        fig.update_yaxes(range=[y0, y0 + (y_hi + pad - y0) / (1 - top)])
    fig.update_xaxes(type="log")
    return _layout(fig, title, xaxis_title="tokens M", yaxis_title="speedup (×, >1: W4A8 faster)")


def error_figure(rows: list[dict], *, x: str = "m", y: str = "sqnr_db", series: str = "path",
                 yaxis_title: str = "SQNR against the float64 reference (dB)",
                 title: str = "Error against tokens (M)") -> go.Figure:
    fig = go.Figure()
    for name, pts in _group(rows, series):
        pts = sorted(pts, key=lambda p: p[x])
        fig.add_trace(go.Scatter(x=[p[x] for p in pts], y=[p[y] for p in pts], mode="lines+markers",
                                 name=str(name)))
    fig.update_xaxes(type="log")
    return _layout(fig, title, xaxis_title="tokens M", yaxis_title=yaxis_title)


def per_token_error_figure(errors: dict[str, Sequence[float]], *,
                           yaxis_title: str = "relative error per token",
                           title: str = "Per-token error") -> go.Figure:
    """One line per path: the error of each token (row of the output)."""
    fig = go.Figure()
    for name, values in errors.items():
        fig.add_trace(go.Scatter(x=list(range(len(values))), y=list(values), mode="lines+markers",
                                 name=str(name), marker=dict(size=4)))
    return _layout(fig, title, xaxis_title="token", yaxis_title=yaxis_title)


# --------------------------------------------------------------------------- export


def figure_html(fig: go.Figure, *, offline: bool = True) -> str:
    """A standalone HTML page; `offline` embeds plotly.js so it opens without a network."""
    return fig.to_html(include_plotlyjs=True if offline else "cdn", full_html=True)


def figure_png(fig: go.Figure, *, width: int = 1100, height: int = 550, scale: float = 1.0) -> bytes:
    """PNG bytes through kaleido (which drives a local Chrome/Chromium)."""
    return fig.to_image(format="png", width=width, height=height, scale=scale)


# --------------------------------------------------------------------------- predicted (workbench.perf)

_PREDICTED_COLORS = ("#1a5fb4", "#c64600", "#2e9e5b", "#813d9c", "#986a44", "#d9534f")


def crossover_band(early: int | None, late: int | None, top: int) -> str:
    """A predicted crossover's band in words: the band's optimistic edge `early`, its pessimistic
    edge `late` (None: that edge never stays ahead up to M = `top`)."""
    if early and late:
        return f"band {early}-{late}" if early != late else f"band {early}"
    if early:
        return f"band {early} to beyond {top}"
    return f"band up to {late}" if late else "no band"


def has_roofline(preds: Sequence, roofline_path: str | None = "w4a8_native") -> bool:
    """Whether `prediction_figure` draws the dotted roofline for these predictions."""
    pts = [p for p in preds if p.path == roofline_path and p.predicted_us]
    return bool(pts) and all(p.roofline_us for p in pts)


def prediction_figure(preds: Sequence, measured: Sequence[dict] = (), *, roofline_path: str | None = "w4a8_native",
                      crossover: tuple | None = None,
                      title: str = "Predicted latency against tokens (M)") -> go.Figure:
    """Predicted curves (dashed, with their low-high band shaded), measured rows (solid), the
    roofline of one path (dotted) and the predicted crossover with its band."""
    fig = go.Figure()
    by: dict[str, list] = {}
    for p in preds:
        if p.predicted_us:
            by.setdefault(p.path, []).append(p)
    seen: dict[tuple, str] = {}
    for i, (path, pts) in enumerate(by.items()):
        pts = sorted(pts, key=lambda p: p.m)
        color = _PREDICTED_COLORS[i % len(_PREDICTED_COLORS)]
        xs = [p.m for p in pts]
        # A curve equal to one drawn before would hide under it: it is drawn with markers and
        # its legend says which it equals (on CPUs W4A8 native and the W4A16 checkpoint agree).
        same = seen.setdefault(tuple((p.m, round(p.predicted_us, 6)) for p in pts), path)
        twin = "" if same == path else f" (the same as {same})"
        if all(p.basis == "roofline" for p in pts):  # a bound, not a cost: no band, said so
            fig.add_trace(go.Scatter(x=xs, y=[p.predicted_us for p in pts], mode="lines",
                                     line=dict(dash="dot", color=color),
                                     name=escape(f"{path}: at least this (roofline)")))
            continue
        fig.add_trace(go.Scatter(x=xs + xs[::-1], y=[p.high_us for p in pts] + [p.low_us for p in pts][::-1],
                                 fill="toself", fillcolor=color, opacity=0.15, line=dict(width=0),
                                 hoverinfo="skip", showlegend=False, name=escape(f"{path} band")))
        fig.add_trace(go.Scatter(x=xs, y=[p.predicted_us for p in pts], mode="lines+markers" if twin else "lines",
                                 line=dict(dash="dashdot" if twin else "dash", color=color),
                                 marker=dict(symbol="circle-open", size=9) if twin else None,
                                 name=escape(f"{path} predicted ({pts[0].basis}){twin}")))
        if path == roofline_path and has_roofline(preds, roofline_path):
            fig.add_trace(go.Scatter(x=xs, y=[p.roofline_us for p in pts], mode="lines",
                                     line=dict(dash="dot", color="#888"), name=escape(f"{path} roofline")))
    for name, pts in _group(measured, "path"):
        pts = sorted(pts, key=lambda p: p["m"])
        fig.add_trace(go.Scatter(x=[p["m"] for p in pts], y=[p["median_us"] for p in pts], mode="lines+markers",
                                 name=escape(f"{name} measured")))
    if crossover and crossover[0]:
        m, early, late = crossover
        if early and late and early != late:
            fig.add_vrect(x0=min(early, late), x1=max(early, late), fillcolor=_OK, opacity=0.1, line_width=0)
        fig.add_vline(x=m, line=dict(color=_OK, dash="dash"))
        fig.add_annotation(x=math.log10(m), xref="x", y=0.98, yref="paper", showarrow=False, xanchor="left",
                           text=escape(f"predicted crossover M≈{m} "
                                       f"({crossover_band(early, late, max(p.m for p in preds))})"),
                           font=dict(color=_OK))
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return _layout(fig, title, xaxis_title="tokens M", yaxis_title="latency (µs)")
