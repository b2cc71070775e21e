"""The whole-model comparison: one model under two schemes on two platforms, per layer and in
total, and which scheme wins where, by how much, with a band; the CLI's --schemes."""
import csv
import io
import json

import pytest

from workbench.__main__ import main
from workbench.errors import InvalidInputError
from workbench.perf.compare import model_comparison
from workbench.perf.report import CHECKPOINT, model_report, twin


@pytest.fixture(scope="module")
def llama():
    return model_comparison("Llama-3.1-8B", "w4a8-int,w4a16", "sm90-h200,x86-spr-amx")


def test_each_scheme_and_platform_is_its_own_report(llama):
    assert [(r.scheme, r.platform) for r in llama.reports] == [
        ("w4a8-int", "sm90-h200"), ("w4a8-int", "x86-spr-amx"), ("w4a16", "sm90-h200"), ("w4a16", "x86-spr-amx")]
    alone = model_report("Llama-3.1-8B", "sm90-h200", scheme="w4a16")
    assert llama.report("w4a16", "sm90-h200").totals() == alone.totals()
    # the W4A16 checkpoint is traced as weight-only: no layer reads int8 activations on the H200
    assert {r.activation for r in alone.layers} == {"bf16"}
    assert "W4A16 preset" in alone.notes[0]


def test_per_layer_rows_name_kernel_activation_and_cost(llama):
    doc = llama.to_json()
    assert [x["layer"] for x in doc["layers"]] == ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
    runs = doc["layers"][0]["runs"]
    assert {(r["scheme"], r["platform"]) for r in runs} == {(s, p) for s in ("w4a8-int", "w4a16")
                                                             for p in ("sm90-h200", "x86-spr-amx")}
    cpu = next(r for r in runs if r["scheme"] == "w4a8-int" and r["platform"] == "x86-spr-amx")
    assert cpu["kernel"] == "Dynamic4bitLinearKernel" and cpu["activation"] == "int8"
    for r in runs:
        lo, hi = r["decode_band_us"]
        assert lo <= r["decode_us"] <= hi and r["prefill_us"] > r["decode_us"]


def test_verdicts_compare_totals_with_a_ratio_band(llama):
    by = {(v.platform, v.phase): v for v in llama.verdicts}
    assert set(by) == {(p, ph) for p in ("sm90-h200", "x86-spr-amx") for ph in ("decode", "prefill")}
    tot = {(t["scheme"], t["platform"]): t for t in llama.totals()}
    v = by[("sm90-h200", "decode")]
    a, b = tot[("w4a8-int", "sm90-h200")], tot[("w4a16", "sm90-h200")]
    fast, slow = sorted((a, b), key=lambda t: t["decode_us"])
    assert v.ratio == pytest.approx(slow["decode_us"] / fast["decode_us"])
    assert v.low == pytest.approx(slow["decode_low_us"] / fast["decode_high_us"])
    assert v.high == pytest.approx(slow["decode_high_us"] / fast["decode_low_us"])
    assert v.low <= v.ratio <= v.high
    # a winner is named only where the band is wholly above 1
    for v in llama.verdicts:
        assert v.decided == (v.winner is not None)
        if v.decided and v.low is not None:
            assert v.low > 1
        if not v.decided and v.ratio and v.ratio != 1.0:
            assert "too close to call" in v.sentence() or "undecided" in v.sentence()


def test_a_scheme_that_does_not_load_has_no_total_and_the_other_wins_by_loading():
    cmp = model_comparison("Llama-3.1-8B", "w4a8-int,w4a16", "rocm-mi300x")
    tot = {t["scheme"]: t for t in cmp.totals()}
    assert not tot["w4a8-int"]["loads"] and "decode_us" not in tot["w4a8-int"]
    assert tot["w4a16"]["loads"]
    v = cmp.verdicts[0]
    assert (v.winner, v.ratio) == ("w4a16", None) and "only w4a16 loads" in v.sentence()


def test_a_checkpoint_against_its_w4a16_twin():
    path = "sample_models/ct-w4a8-int-g128"
    cmp = model_comparison(path, (CHECKPOINT, "w4a16"), ("sm90-h200",))
    saved, tw = cmp.reports
    assert [r.layer for r in saved.layers] == [r.layer for r in tw.layers]
    assert {r.activation for r in tw.layers} == {"bf16"}
    assert "twin" in tw.notes[0] and "as saved" in saved.notes[0]
    assert any(a.kernel != b.kernel for a, b in zip(saved.layers, tw.layers))


def test_twin_is_the_same_weights_with_the_schemes_activations():
    from workbench.checkpoints import open_checkpoint

    spec = open_checkpoint("sample_models/ct-w4a8-int-g128").layers[0]
    assert spec.input_args is not None and spec.input_args.num_bits == 8
    t = twin(spec, "w4a16")
    assert t.input_args is None and t.ct_format == "pack-quantized"
    assert (t.weight_args, t.in_features, t.out_features) == (spec.weight_args, spec.in_features, spec.out_features)
    assert twin(spec, CHECKPOINT) is spec
    gptq = open_checkpoint("sample_models/gptq-w4a16-g128").layers[0]
    assert twin(gptq, "w4a16") is gptq
    with pytest.raises(InvalidInputError, match="weight-only"):
        twin(gptq, "w4a8-int")


def test_cli_compares_schemes_and_platforms(capsys):
    argv = ["report", "Llama-3.1-8B", "--schemes", "w4a8-int,w4a16", "--platform", "sm90-h200,x86-spr-amx"]
    assert main(argv + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schemes"] == ["w4a8-int", "w4a16"] and doc["platforms"] == ["sm90-h200", "x86-spr-amx"]
    assert all(t["loads"] and t["decode_us"] > 0 and t["prefill_us"] > t["decode_us"] for t in doc["totals"])
    assert len(doc["verdicts"]) == 4
    assert main(argv + ["--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 4 * 4 and {"scheme", "platform", "kernel", "activation", "fails"} <= set(rows[0])
    assert main(argv + ["--tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "which wins:" in out and "TP 2" in out
    assert " ms" in out and "321168298" not in out  # totals scaled to a unit that reads


def test_cli_refuses_an_unknown_scheme(capsys):
    assert main(["report", "Llama-3.1-8B", "--schemes", "w4a8-int,w3a16"]) == 2
    assert "w3a16" in capsys.readouterr().err


def test_lead_text_says_where_and_by_how_much():
    # Issue 34.8: "stays ahead from never" hid a 1.9-2.1x lead at small M.
    from workbench.perf.predict import Prediction
    from workbench.perf.wording import lead_segments, lead_text

    def curve(name, us):
        return [Prediction("p", name, m, 1, 1, -1, t, t, t, "measured", "k") for m, t in us]

    fast = curve("a", [(1, 10), (16, 10), (128, 20), (256, 40)])
    slow = curve("b", [(1, 20), (16, 21), (128, 20.5), (256, 30)])
    assert [s[:3] for s in lead_segments(fast, slow)] == [(1, 128, True), (256, 256, False)]
    assert lead_text(fast, slow, "W4A8", "W4A16") == \
        "W4A8 is faster at M 1-128 (by 1.02-2.10x), slower at M = 256 (by 1.33x) than W4A16"
    bound = curve("c", [(1, 5)])
    bound = [Prediction("p", "c", 1, 1, 1, -1, 5, 5, 15, "roofline", "k")]
    assert "no M where both are costed" in lead_text(bound, slow[:1], "x", "y")
