"""The whole-model report: per-rank shapes, what runs, totals; the CLI and the app page."""
import json

import pytest

from workbench.__main__ import main
from workbench.perf.report import model_report


def test_preset_report_shards_per_rank_and_totals_every_layer():
    rep = model_report("Llama-3.1-8B", "sm90-h200", 2)
    by = {r.layer: r for r in rep.layers}
    assert (by["o_proj"].k, by["o_proj"].n) == (2048, 4096)  # row-parallel: K split
    assert (by["gate_up_proj"].k, by["gate_up_proj"].n) == (4096, 14336)  # 2 x 14336 / 2
    assert all(r.kernel == "HummingLinearKernel" and r.computes == "w4a16" for r in rep.layers)
    t = rep.totals()
    assert t["decode_us"] == pytest.approx(sum(r.decode_us * r.count for r in rep.layers), rel=1e-3)
    assert 0 < t["decode_low_us"] < t["decode_us"] < t["decode_high_us"] < t["prefill_us"]


def test_checkpoint_report_names_each_layer_and_vllms_refusal():
    rep = model_report("sample_models/ct-w4a8-int-intermediate-1152", "sm90-h200", 2)
    down = next(r for r in rep.layers if r.layer.endswith("down_proj"))
    assert down.decode_us is None and "not divisible by group_size=128" in down.error
    assert any(r.decode_us is not None for r in rep.layers)


def test_cli_report_json_and_bad_source(capsys):
    assert main(["report", "Qwen2.5-7B", "--platform", "sm80-a100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["platform"] == "sm80-a100" and doc["totals"]["prefill_us"] > doc["totals"]["decode_us"]
    assert main(["report", "no-such-model"]) == 2
    assert "neither a model preset" in capsys.readouterr().err


def test_cli_predict_prints_one_record_per_path_and_m(capsys):
    assert main(["predict", "--platform", "sm90-h200", "--n", "4096", "--k", "4096", "--group", "128",
                 "--m", "1,16,256", "--paths", "w4a8_native,w4a16_fallback,bf16_dense,int8_mm,selected",
                 "--json"]) == 0
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(recs) == 15
    assert {"path", "m", "n", "k", "group_size", "predicted_us", "low_us", "high_us", "basis"} <= set(recs[0])
    assert [r["m"] for r in recs[:3]] == [1, 16, 256]


def test_report_page_exports_csv_and_json():
    pytest.importorskip("streamlit")
    from tests.ui.conftest import open_app

    at = open_app("report", state={"pf.preset": "sm90-h200"})
    assert len(at.dataframe[0].value) == 7  # the loaded sample checkpoint's layers, first
    at.selectbox(key="w:report.source").set_value("Llama-3.1-8B").run()
    assert len(at.dataframe[0].value) == 4  # qkv, o, gate_up, down
    labels = [b.label for b in at.get("download_button")]
    assert labels[:2] == ["report.csv", "report.json"]


def test_trace_page_cost_line_and_kernels_page_predicted_curves():
    pytest.importorskip("streamlit")
    from tests.ui.conftest import open_app, unplain

    from tests.ui.conftest import _walk

    at = open_app("trace", state={"pf.preset": "sm90-h200"})
    text = unplain(" ".join(_walk(at._tree)))
    assert "Cost at M = 16 on sm90-h200: HummingLinearKernel" in text and "native W4A8" in text
    at = open_app("kernels", state={"pf.preset": "sm80-a100", "kern.saved": []})
    text = unplain(" ".join(_walk(at._tree)))
    assert "Predicted on sm80-a100" in text and "w4a8_native: scaled" in text


def test_report_and_predicted_curves_work_for_every_preset():
    from workbench.perf import predict
    from workbench.perf.predict import predicted_crossover, sweep_ms
    from workbench.platforms import PRESETS

    for name in PRESETS:
        rep = model_report("Qwen2.5-7B", name, 2)
        assert len(rep.layers) == 4, name
        t = rep.totals()
        assert (t is None) == bool(rep.refused()) and (t is None or t["decode_us"] > 0), name
        assert rep.totals(loaded_only=True)["decode_us"] >= 0, name
        curves = {path: [predict(name, path, m, 3584, 18944 // 2, 128) for m in sweep_ms(1, 4096)[::3]]
                  for path in ("w4a8_native", "w4a16_fallback")}
        predicted_crossover(curves["w4a8_native"], curves["w4a16_fallback"])
        assert all(p.predicted_us and p.low_us <= p.predicted_us <= p.high_us
                   for ps in curves.values() for p in ps), name


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_report_shards_qwen72b_as_the_alignment_page_does(tp):
    """One function gives both their shards: each layer keeps its own group (g128 here) at
    the TP size, and the layer vLLM refuses (down_proj: 29568 / TP not a multiple of 128)
    is refused in both, never costed per-channel; a refused layer leaves no total."""
    from workbench.alignment import model_shard_rows
    from workbench.checkpoints import list_layers
    from workbench.paths import SAMPLE_ROOT

    spec = list_layers(SAMPLE_ROOT / "ct-w4a8-int-g128")[0]  # int4 g128, int8 tokens: the report's scheme
    page = {r["layer"].split(".")[-1]: r for r in model_shard_rows(spec, "Qwen2.5-72B", "sm90-h200", {}, tp)}
    rep = model_report("Qwen2.5-72B", "sm90-h200", tp)
    assert {r.layer: (r.k, r.n, r.kernel) for r in rep.layers} == {
        name: (r["K"], r["N"], r["selected"]) for name, r in page.items()}
    by = {r.layer: r for r in rep.layers}
    assert all(r.group_size == 128 for r in rep.layers)
    refused = {r.layer for r in rep.refused()}
    assert refused == (set() if tp == 1 else {"down_proj"})
    if refused:
        assert "not divisible by group_size=128" in by["down_proj"].error
        assert rep.totals() is None and "down_proj" in rep.totals(loaded_only=True)["over"]
    else:
        assert rep.totals()["over"] == "every layer"


@pytest.mark.parametrize("argv,refused", [
    (["report", "Qwen2.5-72B", "--platform", "sm90-h200", "--tp", "4"], ["down_proj"]),
    (["report", "Llama-3.1-8B", "--platform", "rocm-mi300x"], ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]),
    (["report", "sample_models/ct-w4a8-int-g128", "--platform", "sm90-h200", "--tp", "4"],
     ["model.layers.0.self_attn.o_proj"]),
])
def test_cli_report_of_a_model_that_does_not_load_has_no_total_and_exits_1(argv, refused, capsys):
    from workbench.paths import REPO_ROOT

    argv = [str(REPO_ROOT / a) if a.startswith("sample_models/") else a for a in argv]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "total per forward" not in out and "no total: vLLM refuses" in out
    assert all(f"{name}:" in out for name in refused)  # each refused layer with vLLM's error
    assert " us" not in out and "None" not in out
    assert main(argv + ["--total-loaded"]) == 1
    out = capsys.readouterr().out
    assert "over the " in out and "layers that load" in out and "the model does not load" in out


def test_cli_predict_shows_a_roofline_figure_as_a_bound(capsys):
    assert main(["predict", "--platform", "rocm-mi300x", "--n", "4096", "--k", "4096", "--m", "1,256",
                 "--paths", "w4a8_native"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("w4a8_native")]
    assert len(rows) == 2 and all("at least" in r and "(roofline)" in r for r in rows), out
    assert "predicted µs" in out and " us " not in out
