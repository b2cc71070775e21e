"""Kernels page: a real (small) sweep on this machine, its figures, per-token error, saved results."""
from __future__ import annotations

import json
import re

from workbench.dispatch.versions import DEFAULT_VERSION


def test_sweep_runs_and_draws_every_figure(ui):
    at = ui.open_app("kernels")
    shown = ui.text(at)
    assert (f"vLLM {DEFAULT_VERSION} selects **`Dynamic4bitLinearKernel`**" in shown
            or f"vLLM {DEFAULT_VERSION} finds no kernel" in shown)
    at.text_input(key="w:kern.m_list").set_value("1,16").run()
    at.number_input(key="w:kern.reps").set_value(1).run()
    at.multiselect(key="w:kern.paths").set_value(["w4a8_native", "w4a16_fallback"]).run()
    at.button(key="kern.run").click().run(timeout=300)
    assert not ui.errors(at), ui.errors(at)
    records = at.session_state["kern.records"]
    assert {(r["path"], r["m"]) for r in records} == {(p, m) for p in ("w4a8_native", "w4a16_fallback")
                                                     for m in (1, 16)}
    # W4A8 against the float reference: int8 activations cost some SQNR, but not much
    native = [r for r in records if r["path"] == "w4a8_native"]
    assert all(30 < r["sqnr_db"] < 80 for r in native)
    assert all(r["kernel_rel_error"] < 1e-5 for r in native)  # the kernel itself is exact-ish
    # latency here, latency of the saved H200 rows (apart: other shapes), speedup, error, predicted
    assert ui.plotly_count(at) == 5
    assert "Measured crossover: w4a8_native over w4a16_fallback [this machine, N 256 x K 1024]" in ui.text(at)
    assert "Noise: p80/p20 up to" in ui.text(at)
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    for fig in figs:  # every figure says which layer shape its series are
        assert "N 256 x K 1024" in fig["layout"]["title"]["text"] or "N 4096" in fig["layout"]["title"]["text"] \
            or "N 8192" in fig["layout"]["title"]["text"], fig["layout"]["title"]["text"]
    speedup = next(f for f in figs if f["layout"]["title"]["text"].startswith("W4A8 speedup"))
    for trace in speedup["data"]:  # one shape per label, never two under one name
        assert trace["name"].count(" x K ") == 1, trace["name"]
    # the x-axis spans the data (log axis: the range is in log10 units)
    import math

    xs = [x for t in speedup["data"] for x in t["x"]]
    lo, hi = speedup["layout"]["xaxis"]["range"]
    assert math.log10(min(xs)) - 0.5 <= lo <= math.log10(min(xs)) and math.log10(max(xs)) <= hi <= math.log10(max(xs)) + 0.5
    at.number_input(key="kern.pt_m").set_value(8).run()
    at.button(key="kern.pt_run").click().run(timeout=300)
    pt = at.session_state["kern.per_token"]
    assert pt["m"] == 8 and set(pt["errors"]) == {"w4a8_native", "w4a16_fallback"}
    assert all(len(v) == 8 for v in pt["errors"].values())
    assert ui.plotly_count(at) == 6
    labels = [b.label for b in at.get("download_button")]
    assert "Records as CSV" in labels and "latency.html" in labels


def test_bad_token_counts_are_named(ui):
    at = ui.open_app("kernels")
    at.text_input(key="w:kern.m_list").set_value("1, a").run()
    at.button(key="kern.run").click().run()
    assert ui.errors(at) == ["token counts M: 'a'; accepted: an integer from 1 to 16384 (comma-separated)"]
    at.text_input(key="w:kern.m_list").set_value("1,,16").run()  # was read as 1,16
    at.button(key="kern.run").click().run()
    assert ui.errors(at) == ["token counts M: '1,,16' has an empty entry (entry 2); accepted: "
                             "comma-separated integers"]


def test_saved_results_are_read_in_both_formats(tmp_path):
    from workbench.errors import InvalidInputError
    from workbench.ui import runs

    h200 = {"gpu": "H200", "records": [
        {"kernel": "w4a8", "group_size": 128, "N": 8192, "K": 8192, "M": m, "time_us": t8}
        for m, t8 in ((1, 30.0), (1024, 100.0))] + [
        {"kernel": "w4a16", "group_size": 128, "N": 8192, "K": 8192, "M": m, "time_us": t16}
        for m, t16 in ((1, 20.0), (1024, 200.0))] + [
        {"kernel": "w4a8", "group_size": 128, "N": 8192, "K": 8192, "M": 7, "error": "OOM"}]}
    prov, rows = runs.read_saved("h200_bench.json", json.dumps(h200).encode())
    assert prov == {"gpu": "H200"} and len(rows) == 4
    assert {r["path"] for r in rows} == {"w4a8_native", "w4a16_fallback"}  # the schema's names
    prov, _ = runs.read_saved("h200_bench.json", json.dumps({**h200, "provenance": {"gpu": "X"}}).encode())
    assert prov == {"gpu": "X"}
    sp = runs.speedup_rows(rows, "H200: w4a8 g128", "H200: w4a16 g128", "s")
    assert [(p["m"], p["speedup"]) for p in sp] == [(1, 20 / 30), (1024, 2.0)]
    assert runs.crossover_of(sp) == 1024
    ours = {"provenance": {"cpu": "x"}, "records": [
        {"path": "w4a8_native", "m": 4, "n": 64, "k": 128, "group_size": 128, "median_ms": 0.5}]}
    _, rows = runs.read_saved("cpu_bench.json", json.dumps(ours).encode())
    assert rows[0]["median_us"] == 500.0 and rows[0]["series"] == "x: w4a8_native"
    assert rows[0]["path"] == "w4a8_native" and rows[0]["saved"]
    import pytest

    with pytest.raises(InvalidInputError, match="no 'records' list"):
        runs.read_saved("x_bench.json", b"{}")


def test_uploaded_saved_results_are_plotted_with_their_crossover(ui):
    recs = [{"kernel": kern, "group_size": 128, "N": 256, "K": 1024, "M": m, "time_us": t}
            for kern, times in (("w4a8", (30.0, 40.0, 100.0)), ("w4a16", (20.0, 50.0, 300.0)))
            for m, t in zip((1, 64, 1024), times)]
    at = ui.open_app("kernels", state={"kern.saved": []})  # the uploaded file alone
    at.file_uploader(key="kern.upload").set_value(
        ("h200_bench.json", json.dumps({"gpu": "NVIDIA H200", "records": recs}).encode(), "application/json")).run()
    assert not ui.errors(at)
    shown = ui.text(at)
    assert "h200_bench.json: NVIDIA H200" in shown
    assert "H200: w4a8 g128 over w4a16 g128 [N 256 x K 1024]: M = 64" in shown
    assert ui.plotly_count(at) == 3  # predicted, latency and speedup (no local run: no error figure)


def test_committed_h200_results_are_shown_by_default(ui):
    import pytest

    from workbench.ui import runs

    if not (runs.RESULTS_DIR / "h200_bench.json").exists():
        pytest.skip("no committed H200 results")
    at = ui.open_app("kernels")
    assert at.session_state["kern.saved"] == ["h200_bench.json"]
    shown = ui.text(at)
    assert "h200_bench.json: NVIDIA H200" in shown
    assert "H200: w4a8 g128 over w4a16 g128" in shown
    # another saved shape changes what is plotted
    shapes = at.selectbox(key="w:kern.saved_shape").options
    assert "N 8192 x K 14784" in shapes
    at.selectbox(key="w:kern.saved_shape").set_value("N 8192 x K 14784").run()
    assert at.session_state["kern.saved_shape"] == "N 8192 x K 14784"
    assert ui.plotly_count(at) == 3  # predicted, latency, speedup


def test_timing_noise_flags_a_wide_band_or_a_loaded_machine():
    from workbench.noise import timing_noise

    quiet = timing_noise([{"path": "a", "m": 1, "p20_ms": 1.0, "p80_ms": 1.2}], [0.5], cores=2)
    assert not quiet.noisy and quiet.worst_spread == 1.2
    wide = timing_noise([{"path": "a", "m": 1, "p20_ms": 1.0, "p80_ms": 1.2},
                         {"path": "b", "m": 4, "p20_ms": 1.0, "p80_ms": 1.6}], [0.5], cores=2)
    assert wide.spread_high and (wide.worst_path, wide.worst_m) == ("b", 4)
    loaded = timing_noise([{"path": "a", "m": 1, "p20_ms": 1.0, "p80_ms": 1.1}], [0.5, 2.5], cores=2)
    assert loaded.overloaded and not loaded.spread_high and loaded.load == 2.5


def test_a_sweep_cut_short_keeps_what_it_measured(ui):
    # Issue 13.4: the header's Stop ends the script with no rerun, mid-sweep. The records of
    # each M are in the session as they arrive; the next run says where it stopped and plots them.
    at = ui.open_app("kernels", state={"kern.saved": []})
    at.text_input(key="w:kern.m_list").set_value("1,2").run()
    at.number_input(key="w:kern.reps").set_value(1).run()
    at.multiselect(key="w:kern.paths").set_value(["w4a8_native", "w4a16_fallback"]).run()
    at.button(key="kern.run").click().run(timeout=300)
    meta = at.session_state["kern.meta"]
    assert meta["status"] == "done" and meta["done_m"] == 2
    meta["status"] = "running"  # what a script stopped after M = 2 leaves behind
    at.session_state["kern.meta"] = meta
    at.run()
    assert "M = [1, 2], stopped after M = 2" in ui.text(at)
    assert ui.plotly_count(at) >= 2 and len(at.session_state["kern.records"]) == 4


def test_predicted_chart_title_and_band_read_as_written(ui):
    # Issue 24.2: a plotly title is HTML (Markdown escapes showed as backslashes); a band with one
    # open edge read "band 1--" / "(band 1-None)"; the roofline is promised only where drawn.
    at = ui.open_app("kernels", state={"pf.preset": "sm90-h200"})
    fig = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
               if json.loads(c.proto.spec)["layout"]["title"]["text"].startswith("Predicted latency"))
    title = fig["layout"]["title"]["text"]
    assert title == ("Predicted latency, sm90-h200: N 256 x K 1024, g 128 (dashed: predicted, band shaded; "
                     "dotted: roofline)")
    assert any(t["name"] == "w4a8_native roofline" for t in fig["data"])
    # the drawn crossover is the vLLM user's (both checkpoints costed from their kernels' timings)
    (note,) = [a["text"] for a in fig["layout"]["annotations"] if a["text"].startswith("predicted crossover")]
    assert re.fullmatch(r"predicted crossover M≈\d+ \(band [^)]+\)", note) and "None" not in note and "--" not in note
    caption = next(c for c in ui.text(at).splitlines() if "W4A16 fallback:" in c)
    # a band over the whole range is no crossover (issue 34.8): said, with where each leads
    assert "band spans all of 1 to beyond 8192: undetermined" in caption and "None" not in caption
    assert "the W4A8 checkpoint is faster at M 1-8192 (by " in caption
    # beside it, what vLLM runs for the layer saved as W4A8 and as W4A16, kernels named
    from workbench.dispatch.versions import DEFAULT_VERSION

    assert f"What vLLM {DEFAULT_VERSION} runs: W4A8 runs HummingLinearKernel" in caption, caption
    # Humming for the W4A8-int checkpoint, Machete for the W4A16 one: both timed on the H200
    assert {"vLLM, W4A8-int checkpoint predicted (measured)", "vLLM, W4A16 checkpoint predicted (measured)"} <= {
        t["name"] for t in fig["data"]}


def test_the_roofline_is_not_promised_where_it_is_not_drawn():
    from types import SimpleNamespace

    from workbench import plots

    def pt(path, m, roof):
        return SimpleNamespace(path=path, m=m, predicted_us=10.0 * m, low_us=9.0 * m, high_us=11.0 * m,
                               roofline_us=roof, basis="measured")

    preds = [pt("w4a8_native", m, None) for m in (1, 8)] + [pt("w4a16_fallback", m, None) for m in (1, 8)]
    assert not plots.has_roofline(preds)
    names = [t.name for t in plots.prediction_figure(preds).data]
    assert not any("roofline" in n for n in names)
    assert plots.has_roofline([pt("w4a8_native", 1, 2.0)])
    assert plots.crossover_band(4, 64, 8192) == "band 4-64"
    assert plots.crossover_band(4, None, 8192) == "band 4 to beyond 8192"


def test_an_uploaded_results_file_is_plotted_at_once_beside_the_committed_ones(ui):
    # Issue 24.5: with the committed H200 file picked, an upload of another shape was accepted,
    # but nothing of it was plotted until its shape, last in "Saved shape", was picked.
    import pytest

    from workbench.ui import runs

    if not (runs.RESULTS_DIR / "h200_bench.json").exists():
        pytest.skip("no committed H200 results")
    recs = [{"kernel": kern, "group_size": 128, "N": 512, "K": 768, "M": m, "time_us": t}
            for kern, times in (("w4a8", (30.0, 100.0)), ("w4a16", (20.0, 300.0)))
            for m, t in zip((1, 1024), times)]
    at = ui.open_app("kernels")
    assert at.session_state["kern.saved"] == ["h200_bench.json"]
    at.file_uploader(key="kern.upload").set_value(
        ("mine_bench.json", json.dumps({"gpu": "X", "records": recs}).encode(), "application/json")).run()
    assert not ui.errors(at)
    assert at.selectbox(key="w:kern.saved_shape").options[0] == "N 512 x K 768"
    assert at.session_state["kern.saved_shape"] == "N 512 x K 768"
    assert "MINE: w4a8 g128 over w4a16 g128 [N 512 x K 768]: M = 1024" in ui.text(at)
    # the user's later pick stands over reruns
    at.selectbox(key="w:kern.saved_shape").set_value("N 4096 x K 4096").run()
    at.run()
    assert at.session_state["kern.saved_shape"] == "N 4096 x K 4096"


def test_live_and_saved_records_make_one_row_shape():
    from workbench.bench import BenchRecord, write_json
    from workbench.ui import runs

    live = [BenchRecord("w4a8_native", 4, 64, 128, 128, 0.5, 0.01, True, p20_ms=0.4, p80_ms=0.7,
                        sqnr_db=30.0, computes="w4a8").to_dict(),
            BenchRecord("triton_w4a8", 4, 64, 128, 128, None, None, False, why="no CUDA device").to_dict()]
    rows = runs.record_rows(live)
    assert len(rows) == 1 and (rows[0]["median_us"], rows[0]["p20_us"], rows[0]["p80_us"]) == (500.0, 400.0, 700.0)
    assert rows[0]["series"] == rows[0]["path"] == "w4a8_native" and rows[0]["sqnr_db"] == 30.0
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        f = write_json([BenchRecord(**r) for r in live], Path(d) / "cpu_bench.json", {"cpu": "x"})
        _, saved = runs.read_saved(f.name, f.read_bytes())
    assert set(saved[0]) == set(rows[0]) and saved[0]["median_us"] == 500.0 and saved[0]["sqnr_db"] == 30.0


def test_the_error_split_names_its_references(ui):
    # Issue 34.2: the page never said which reference its errors use, and a checkpoint's
    # rel_error left the int4 weight's part out without a word.
    at = ui.open_app("kernels")
    shown = ui.text(at)
    assert "rel_error and SQNR are against x @ dequant(W4)^T" in ui.unplain(shown) or \
        "rel_error and SQNR are against x @ W_float^T" in ui.unplain(shown)
    at.number_input(key="kern.split_m").set_value(16).run()
    at.button(key="kern.split_run").click().run(timeout=120)
    assert not ui.errors(at), ui.errors(at)
    doc = at.session_state["kern.split"]["split"]
    assert [p["part"] for p in doc["parts"]] == ["weight", "activation", "together"]
    assert all(p["reference"] for p in doc["parts"]) and doc["m"] == 16
    act = doc["parts"][1]
    assert act["rel_error"] > 0 and len(act["per_token"]) == 16
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert any(f["layout"]["title"]["text"].startswith("Error per token, split") for f in figs)


def test_a_noisy_run_is_flagged_and_never_a_crossover(ui):
    # Issue 34.4: a 15 ms W4A16 call at M = 1 (0.107 ms in bench) drew "measured crossover M ~ 1".
    at = ui.open_app("kernels")
    at.text_input(key="w:kern.m_list").set_value("1,16").run()
    at.number_input(key="w:kern.reps").set_value(1).run()
    at.multiselect(key="w:kern.paths").set_value(["w4a8_native", "w4a16_fallback"]).run()
    at.button(key="kern.run").click().run(timeout=300)
    recs = at.session_state["kern.records"]
    # a planted outlier: the fallback's M = 1 call slowed 140x, its band 30x wide, by others' load
    for r in recs:  # every other record quiet, whatever this machine's load was
        r.update(p20_ms=r["median_ms"], p80_ms=r["median_ms"], others_cores=0.0, threads=1)
        if r["path"] == "w4a16_fallback" and r["m"] == 1:
            r.update(median_ms=r["median_ms"] * 140, p20_ms=r["median_ms"], p80_ms=r["median_ms"] * 30 * 140,
                     others_cores=2.0, threads=2)
    at.session_state["kern.records"] = recs
    at.run()
    text = ui.unplain(ui.text(at))
    assert "These timings are noisy" in text
    line = next(x for x in text.splitlines() if x.startswith("Measured crossover:"))
    assert "w4a8_native over w4a16_fallback [this machine" in line and "none drawn" in line
    assert "an unreliable timing never makes a crossover" in line
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    speedup = next(f for f in figs if f["layout"]["title"]["text"].startswith("W4A8 speedup"))
    assert not any(a["text"].startswith("measured crossover") and "this machine" in a["text"]
                   for a in speedup["layout"].get("annotations", []))
    trace = speedup["data"][0]
    assert "unreliable timing" in trace["name"] and "x-open" in trace["marker"]["symbol"]
    data = next(d.value for d in at.dataframe if "unreliable" in d.value.columns)
    flagged = data[data["unreliable"].notna()]
    assert list(flagged["path"]) == ["w4a16_fallback"] and "p80/p20" in flagged["unreliable"].iloc[0]


def _two_paths(ui, ms: str):
    at = ui.open_app("kernels")
    at.text_input(key="w:kern.m_list").set_value(ms).run()
    at.number_input(key="w:kern.reps").set_value(1).run()
    at.multiselect(key="w:kern.paths").set_value(["w4a8_native", "w4a16_fallback"]).run()
    return at


def test_a_crashing_kernel_is_named_once_and_the_next_run_works(ui, monkeypatch):
    # Issue 34.7: a native crash in Run took the server down for every session. The sweep runs
    # in the session's child process; a real SIGSEGV there (planted, read by the child only)
    # is said once, what was measured stays, and the next Run works in a fresh child.
    from workbench.contained import PLANT_ENV

    monkeypatch.setenv(PLANT_ENV, "segv:w4a8_native@16")
    at = _two_paths(ui, "1,16")
    at.button(key="kern.run").click().run(timeout=300)
    assert not at.exception
    assert ui.errors(at) == [
        "The kernel run crashed with SIGSEGV during the first call of path `w4a8_native` at M = 16 (in a child "
        "process: nothing else ended). Drop `w4a8_native` from Paths and run again, or start the app with "
        "W4A8_KERNELS_MAX_ISA=avx512 (or avx2) to keep the native engines off their widest instructions."]
    assert {(r["path"], r["m"]) for r in at.session_state["kern.records"]} == {("w4a8_native", 1),
                                                                               ("w4a16_fallback", 1)}
    assert "failed at M = 16 (SIGSEGV); measured up to M = 1" in ui.text(at)
    assert ui.plotly_count(at) >= 2  # M = 1's figures are drawn
    at.run()
    assert not ui.errors(at)  # said once
    monkeypatch.delenv(PLANT_ENV)
    at.button(key="kern.run").click().run(timeout=300)
    assert not at.exception and not ui.errors(at)
    assert len(at.session_state["kern.records"]) == 4 and at.session_state["kern.meta"]["status"] == "done"
    assert at.session_state["measure.worker"].starts == 2
    # the per-token error runs the paths there too
    at.session_state["measure.worker"].close()
    monkeypatch.setenv(PLANT_ENV, "abort:w4a16_fallback@8")
    at.number_input(key="kern.pt_m").set_value(8).run()
    at.button(key="kern.pt_run").click().run(timeout=300)
    assert not at.exception
    [said] = ui.errors(at)
    assert said.startswith("The per-token error run crashed with SIGABRT during the per-token run of path "
                           "`w4a16_fallback` at M = 8"), said
    assert "kern.per_token" not in at.session_state and len(at.session_state["kern.records"]) == 4


def test_a_hanging_kernel_is_stopped_and_named(ui, monkeypatch):
    from workbench.contained import PLANT_ENV, TIMEOUT_ENV

    monkeypatch.setenv(PLANT_ENV, "hang:w4a16_fallback@1")
    monkeypatch.setenv(TIMEOUT_ENV, "10")  # from the child's start: its imports are not counted
    at = _two_paths(ui, "1")
    at.button(key="kern.run").click().run(timeout=300)
    assert not at.exception
    [said] = ui.errors(at)
    assert said.startswith("The kernel run did not answer within 10 s during the first call of path "
                           "`w4a16_fallback` at M = 1: stopped as a hang"), said
    assert at.session_state["kern.records"] == []
    assert at.session_state["kern.meta"]["status"].startswith("failed at M = 1 (timeout)")
    assert not at.session_state["measure.worker"].alive()
