"""Plot builders (workbench.plots): each figure holds exactly the data it was given."""
from __future__ import annotations

import shutil

import pytest

pytest.importorskip("plotly")

from workbench import plots  # noqa: E402
from workbench.dispatch.versions import pinned  # noqa: E402


def test_int4_histogram_counts_every_weight():
    from workbench.synthetic import synthetic_layer

    layer = synthetic_layer(out_features=64, in_features=256, group_size=128, seed=3)
    fig = plots.int4_histogram(layer)
    bar = fig.data[0]
    assert list(bar.x) == list(range(-8, 8))
    assert sum(bar.y) == 64 * 256
    w = layer.int4_weight()
    assert bar.y[list(bar.x).index(0)] == int((w == 0).sum())
    asym = synthetic_layer(out_features=64, in_features=256, group_size=128, symmetric=False, seed=3)
    assert list(plots.int4_histogram(asym).data[0].x) == list(range(16))
    assert len(plots.scale_histogram(layer).data[0].x) == 64 * 2


def test_docs_matrix_marks_every_disagreement():
    from workbench.dispatch.docs_matrix import compute_matrix

    rows = compute_matrix()
    fig = plots.docs_matrix_figure(rows)
    z = fig.data[0].z
    assert sum(v == -1 for line in z for v in line) == sum(c["disagrees"] for r in rows for c in r["cells"])
    assert sum(v == 2 for line in z for v in line) == sum(c["code"] is None for r in rows for c in r["cells"])


def test_speedup_marks_crossover_and_inc_threshold():
    pts = [{"m": m, "speedup": s, "series": "a"} for m, s in ((1, 0.5), (64, 0.9), (512, 1.4))]
    fig = plots.speedup_figure(pts, crossovers={"a": 512, "b": None})
    xs = sorted(sh.x0 for sh in fig.layout.shapes if sh.type == "line" and sh.x0 == sh.x1)
    assert xs == [512, pinned().MIN_TOKENS_FOR_INT8]
    assert [sh.y0 for sh in fig.layout.shapes if sh.y0 == sh.y1] == [1.0]
    assert list(fig.data[0].x) == [1, 64, 512] and fig.layout.xaxis.type == "log"


def test_latency_is_log_log_with_one_trace_per_path():
    rows = [{"path": p, "m": m, "median_us": m * f} for p, f in (("a", 1.0), ("b", 2.0)) for m in (16, 1, 4)]
    fig = plots.latency_figure(rows)
    assert [t.name for t in fig.data] == ["a", "b"]
    assert list(fig.data[1].x) == [1, 4, 16] and list(fig.data[1].y) == [2.0, 8.0, 32.0]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"


def test_alignment_figure_codes_outcomes():
    rows = [{"label": "a", "verdicts": {"K1": ("selected", ""), "K2": ("rejected", "why")}},
            {"label": "b", "verdicts": {"K1": ("rejected", "x"), "K2": ("accepts", "")}}]
    fig = plots.alignment_figure(rows, ["K1", "K2", "K3"])
    assert [list(r) for r in fig.data[0].z] == [[2, -1, 0], [-1, 1, 0]]
    assert fig.data[0].customdata[0][1] == "why"


def test_exports():
    fig = plots.per_token_error_figure({"p": [0.1, 0.2]})
    html = plots.figure_html(fig)
    assert "<html>" in html and "Plotly.newPlot" in html and len(html) > 1_000_000  # plotly.js embedded
    if shutil.which("chromium") is None and shutil.which("google-chrome") is None:
        pytest.skip("PNG export needs a local Chrome or Chromium (kaleido drives it)")
    png = plots.figure_png(fig, width=300, height=200)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_speedup_axis_spans_the_data_and_every_line_is_labelled():
    # Issue 13.1: plotly places an add_vline label at 10**x on a log axis, which stretched the
    # axis to 1e-15..1e30 and put INC's 512 label off the plot.
    import math

    from workbench import plots

    pts = [{"m": m, "speedup": s, "series": "a"} for m, s in ((1, 0.5), (64, 1.5), (4096, 2.0))]
    fig = plots.speedup_figure(pts, crossovers={"a": 64})
    lo, hi = fig.layout.xaxis.range
    assert -0.5 < lo <= 0 and math.log10(4096) <= hi < math.log10(4096) + 0.5
    labels = {a.text: a.x for a in fig.layout.annotations}
    assert labels["measured crossover a: M≈64"] == math.log10(64)
    assert labels["INC: W4A16 below 512 tokens, W4A8 from 512"] == math.log10(512)
    short = plots.speedup_figure(pts[:2], crossovers={"a": None})
    assert short.layout.xaxis.range[1] < math.log10(512)  # no line stretches the axis
    assert any("outside the measured M" in a.text for a in short.layout.annotations)


def test_the_largest_speedup_sits_below_the_line_labels():
    # Issue 24.1: the 3.7x point at M = 256 hid under the crossover and INC labels at the top.
    from workbench import plots

    pts = [{"m": m, "speedup": s, "series": "a"} for m, s in ((1, 0.6), (16, 1.2), (256, 3.7), (1024, 2.9))]
    fig = plots.speedup_figure(pts, crossovers={"a": 16})
    y0, y1 = fig.layout.yaxis.range
    assert y0 <= 0.6
    rows = 2  # the crossover's label and INC's, one row each from the top
    assert (3.7 - y0) / (y1 - y0) <= 1 - rows * plots.LABEL_ROW
    assert all(a.yanchor == "top" and a.y >= 1 - rows * plots.LABEL_ROW for a in fig.layout.annotations)


def test_an_identical_predicted_curve_is_named_and_marked():
    # Issue 34.10: on CPU presets w4a8_native hid under the identical W4A16-checkpoint curve.
    from workbench.perf.predict import Prediction

    def curve(path):
        return [Prediction("x86", path, m, 1, 1, -1, 10.0 * m, 9.0 * m, 11.0 * m, "measured", "k") for m in (1, 16)]

    fig = plots.prediction_figure(curve("w4a8_native") + curve("vLLM, W4A16 checkpoint"))
    names = [t.name for t in fig.data if t.name and "band" not in t.name]
    assert "vLLM, W4A16 checkpoint predicted (measured) (the same as w4a8_native)" in names
    twin = next(t for t in fig.data if t.name and "the same as" in t.name)
    assert twin.mode == "lines+markers"


def test_speedups_an_order_of_magnitude_apart_share_a_log_axis():
    rows = [{"m": m, "speedup": s, "series": name} for name, s0 in (("CPU 256x1024", 60.0), ("H200 4096x4096", 1.2))
            for m, s in ((1, s0), (16, s0 * 1.1))]
    fig = plots.speedup_figure(rows)
    assert fig.layout.yaxis.type == "log"
    near = plots.speedup_figure([r for r in rows if r["series"].startswith("H200")])
    assert near.layout.yaxis.type != "log"
