"""Alignment page: TP shards against every candidate kernel, model presets, the padding sweep."""
from __future__ import annotations

import json


def _table(at):
    return next(d.value for d in at.dataframe if "vLLM picks" in d.value.columns)


def test_tp_split_that_breaks_the_group_is_refused(ui):
    at = ui.open_app("alignment", state={"layer.sample": "ct-w4a8-int-intermediate-1152",
                                         "pf.preset": "sm90-h200"})
    t = _table(at).set_index("layer")
    assert t.loc["model.layers.0.mlp.down_proj", "vLLM picks"] == "HummingLinearKernel"
    at.number_input(key="w:tp.size").set_value(2).run()
    t = _table(at).set_index("layer")
    assert t.loc["model.layers.0.mlp.down_proj", "K/TP"] == 576
    assert t.loc["model.layers.0.mlp.down_proj", "vLLM picks"] == "ValueError"
    assert "input_size_per_partition=576 is not divisible by group_size=128" in ui.text(at)
    assert not ui.errors(at)  # vLLM's refusal is the answer here, not an error of the page
    # the heatmap keeps the refused layer: a row whose every cell reads "refused"
    heat = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]
    row = next(i for i, y in enumerate(heat["y"]) if y.startswith("down_proj"))
    assert set(heat["text"][row]) == {"refused"} and len(heat["y"]) == 7
    # every candidate's verdict, not only the loop's first acceptance: Humming is selected and
    # the kernels after it (Marlin, Conch, ...) still say why they reject int4
    gate = t.loc["model.layers.0.mlp.gate_proj"]
    assert gate["N/TP"] == 576 and gate["Humming"] == "SELECTED"
    assert gate["Marlin"].startswith("rejected: Quant type (int4) not supported by")
    assert "Marlin, supported types" in gate["Marlin"]  # one space or two: the release's text
    assert ui.plotly_count(at) >= 2  # the heatmap and the padding sweep


def test_model_preset_shapes(ui):
    at = ui.open_app("alignment", state={"pf.preset": "sm90-h200", "tp.size": 2})
    at.selectbox(key="w:align.model").set_value("Qwen2.5-72B").run()
    t = _table(at).set_index("layer")
    assert t.loc["Qwen2.5-72B.down_proj", "K/TP"] == 14784  # llm-compressor #973
    assert t.loc["Qwen2.5-72B.down_proj", "vLLM picks"] == "ValueError"
    assert t.loc["Qwen2.5-72B.o_proj", "vLLM picks"] == "HummingLinearKernel"


def test_padding_sweep_follows_marlin_rule(ui):
    from workbench.alignment import marlin_padded_nk, padding_rows

    # vLLM's rule: the cheaper of (n%64, k%lcm(128,g)) and (n%128, k%lcm(64,g))
    assert marlin_padded_nk(264, 1024, 128) == (320, 1024)
    assert marlin_padded_nk(256, 1000, 128) == (256, 1024)
    rows = {(r["offset"], r["rule"]): r["cost"] for r in padding_rows("N", 256, 1024, [0, 8], 128)}
    assert rows[(0, "Marlin (marlin_padded_nk)")] == 0.0
    assert abs(rows[(8, "Cutlass W4A8 (K, N % 128)")] - 100 * (384 / 264 - 1)) < 1e-9
    at = ui.open_app("alignment")
    at.text_input(key="w:align.offsets").set_value("0,x").run()
    assert any("offsets: '0,x'" in e for e in ui.errors(at))


def test_sweep_starts_from_the_shard_of_the_chosen_shapes_and_tp(ui):
    # Issue 13.6: the sweep read the full checkpoint layer, whatever TP and Shapes said.
    at = ui.open_app("alignment", state={"pf.preset": "sm90-h200", "tp.size": 8,
                                         "align.model": "Llama-3.1-8B"})
    sweep = next(d.value for d in at.dataframe if "rules broken (whose rule)" in d.value.columns)
    assert set(sweep["K"]) == {14336 // 8} and sweep["N"].min() == 4096  # down_proj's shard
    broken = " ".join(sweep["rules broken (whose rule)"])
    assert "K, N % 128 (CutlassW4A8)" in broken and "(Machete)" in broken
    at.selectbox(key="w:align.sweep_layer").set_value("Llama-3.1-8B.gate_up_proj").run()
    sweep = next(d.value for d in at.dataframe if "rules broken (whose rule)" in d.value.columns)
    assert sweep["N"].min() == 2 * 14336 // 8 and set(sweep["K"]) == {4096}


def _measured(at):
    return next(d.value for d in at.dataframe if "W4A8 efficiency" in d.value.columns)


def test_measured_tp_shards_beside_the_verdicts(ui):
    # Issue 17.4: the committed per-shard H200 timings at the chosen TP, each beside the
    # table's verdict for the same shard; the efficiency from the raw file, not the module.
    from workbench.tp_measured import TP_SHARDS

    raw = json.loads(TP_SHARDS.read_text())["records"]

    def us(layer, tp, path, g, m):
        return next(r["median_us"] for r in raw if r["detail"]["layer"] == layer and r["detail"]["tp"] == tp
                    and r["path"] == path and r["group_size"] == g and r["m"] == m)

    at = ui.open_app("alignment", state={"pf.preset": "sm90-h200", "tp.size": 2,
                                         "align.model": "Qwen2.5-72B", "layer.sample": "ct-w4a8-int-g128"})
    verdicts = _table(at).set_index("layer")
    t = _measured(at)
    assert set(t["K/TP"]) == {8192, 29568 // 2} and set(t["N/TP"]) == {59136 // 2, 8192}
    row = t[(t["layer"] == "gate_up_proj") & (t["group"] == "g128") & (t["M"] == 1)].iloc[0]
    assert row["W4A8 native µs"] == f"{us('gate_up_proj', 2, 'w4a8_native', 128, 1):.1f}"
    eff = us("gate_up_proj", 1, "w4a16_fallback", 128, 1) / (2 * us("gate_up_proj", 2, "w4a16_fallback", 128, 1))
    assert row["W4A16 efficiency"] == f"{eff:.2f}"
    assert row["vLLM picks (table above)"] == verdicts.loc["Qwen2.5-72B.gate_up_proj", "vLLM picks"] != ""
    from workbench.perf.predict import predict

    model = predict("sm90-h200", "w4a8_native", 1, 59136 // 2, 8192, 128).predicted_us
    assert row["W4A8 model µs"] == f"{model:.1f}"
    # a per-channel row has no verdict in a g128 table; the g128 down_proj shard was refused
    assert set(t[t["group"] == "channel"]["vLLM picks (table above)"]) == {"(the table is traced at g128)"}
    # the all-reduce floor, roofline only: down_proj's M x 8192 bf16 output, 2 (TP-1)/TP of it per
    # rank at 450 GB/s each way; none for gate_up_proj (column-parallel, no collective)
    down = t[(t["layer"] == "down_proj") & (t["M"] == 4096)].iloc[0]
    assert down["all-reduce floor µs (roofline only)"] == f"{2 * 0.5 * 4096 * 8192 * 2 / 450e3:.1f}"
    assert set(t[t["layer"] == "gate_up_proj"]["all-reduce floor µs (roofline only)"]) == {""}
    assert not ((t["layer"] == "down_proj") & (t["group"] == "g128")).any()
    text = ui.text(at)
    assert "The collective is not measured" in text and "no collective term" in text
    assert "roofline only, not measured" in text and "NVLink figure: https" in text
    assert "Not measured: w4a8_native K 14784 x N 8192, group 128" in text
    assert "NVIDIA H200" in text and "h200_tp_shards.json" in text
    assert "Over all 156 measured points: median |predicted/measured - 1|" in text
    assert not ui.errors(at)
    at.session_state["pf.preset"] = "x86-avx512"
    at.run()
    assert set(_measured(at)["vLLM picks (table above)"]) <= {"", "(the table is traced at g128)"}
    assert "filled when the page's platform is sm90-h200" in ui.text(at)
    at.number_input(key="w:tp.size").set_value(3).run()
    assert "Measured at TP 1, 2, 4, 8 only" in ui.text(at)
    assert not any("W4A8 efficiency" in d.value.columns for d in at.dataframe)


def test_measure_is_offered_only_for_a_shard_that_loads(ui):
    # Issue 24.6: "Measure on this machine" errored on the default shard, which the table refuses.
    at = ui.open_app("alignment", state={"layer.sample": "ct-w4a8-int-intermediate-1152", "tp.size": 2})
    assert at.session_state["align.sweep_layer"] == "model.layers.0.mlp.down_proj"
    assert not [b for b in at.button if b.key == "align.measure"]
    assert ("Measure on this machine: not offered for down_proj [K 576, N 256]: vLLM refuses this shard "
            "(ValueError: Weight input_size_per_partition=576 is not divisible by group_size=128). Pick a "
            "shard that loads, or another TP size.") in ui.unplain(ui.text(at))
    at.selectbox(key="w:align.sweep_layer").set_value("model.layers.0.mlp.gate_proj").run()
    (measure,) = [b for b in at.button if b.key == "align.measure"]
    measure.click().run(timeout=300)
    assert not ui.errors(at)
    assert at.session_state["align.measured"]["shard"] == [256, 576]


def test_measured_tp_shards_are_shown_only_for_the_model_measured(ui):
    # Issue 34.12: the section showed Qwen2.5-72B's timings whatever model was picked.
    at = ui.open_app("alignment", state={"pf.preset": "sm90-h200", "tp.size": 2, "align.model": "Llama-3.1-8B"})
    assert not any("W4A8 efficiency" in d.value.columns for d in at.dataframe)
    assert "Measured TP shards exist for Qwen2-72B's MLP shapes only; Llama-3.1-8B's differ" in ui.unplain(ui.text(at))
