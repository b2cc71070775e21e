"""The measured TP shards (workbench.tp_measured) and the model's check against them."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from workbench.errors import InvalidInputError
from workbench.results import SCHEMA, parse_results
from workbench.tp_measured import TP_SHARDS, beside_verdicts, load_tp_shards, shards_at, tp_measurements

ROOT = Path(__file__).resolve().parents[1]


def _doc(records, **prov):
    return {"schema": SCHEMA, "provenance": prov, "records": records}


def _rec(path, n, k, m, us, tp, layer="down_proj", g=-1):
    return {"path": path, "n": n, "k": k, "m": m, "group_size": g, "median_us": us,
            "detail": {"model": "M", "layer": layer, "tp": tp}}


def test_committed_shards_and_their_efficiency():
    meas = load_tp_shards()
    assert meas.tp_sizes == (1, 2, 4, 8)
    assert all(t.efficiency == 1.0 for t in meas.timings if t.tp == 1)
    raw = json.loads(TP_SHARDS.read_text())["records"]

    def us(tp, m):
        return next(r["median_us"] for r in raw if r["detail"]["layer"] == "gate_up_proj" and r["detail"]["tp"] == tp
                    and r["path"] == "w4a8_native" and r["group_size"] == -1 and r["m"] == m)

    row = next(r for r in shards_at(meas, 8) if r["layer"] == "gate_up_proj" and r["group_size"] == -1 and r["m"] == 1)
    assert row["N"] == 59136 // 8 and row["K"] == 8192
    assert row["w4a8_native_efficiency"] == pytest.approx(us(1, 1) / (8 * us(8, 1)), rel=1e-12)
    assert row["w4a8_native_efficiency"] < 0.8  # the small shard no longer fills the GPU
    # the g128 down_proj shards past TP 1 were refused by the bench: named, not timed
    assert [(f["k"], f["group_size"]) for f in meas.not_run_at(4)] == [(29568 // 4, 128)]
    assert not any(r["layer"] == "down_proj" and r["group_size"] == 128 for r in shards_at(meas, 4))


def test_a_shard_without_its_tp1_counterpart_has_no_efficiency():
    meas = tp_measurements(parse_results(_doc([_rec("w4a8_native", 64, 128, 1, 5.0, 2),
                                               _rec("w4a8_native", 64, 256, 16, 8.0, 1),
                                               _rec("w4a8_native", 64, 128, 16, 5.0, 2)])))
    by_m = {t.m: t for t in meas.timings if t.tp == 2}
    assert by_m[1].efficiency is None and by_m[16].efficiency == pytest.approx(8.0 / 10.0)


def test_verdicts_join_on_shape_and_group():
    meas = tp_measurements(parse_results(_doc([_rec("w4a8_native", 64, 128, 1, 5.0, 2),
                                               _rec("w4a8_native", 64, 128, 1, 6.0, 2, g=128)])))
    table = [{"layer": "x.down_proj", "K": 128, "N": 64, "selected": None, "error": "bad",
              "error_type": "ValueError"}]
    rows = {r["group_size"]: r for r in beside_verdicts(table, meas, 2, 128)}
    assert rows[128]["vllm_picks"] == "ValueError" and rows[128]["table_layer"] == "x.down_proj"
    assert rows[-1]["vllm_picks"] is None  # the table was traced with g128, not per-channel


@pytest.mark.parametrize("detail, needle", [
    ({"model": "M", "layer": "d"}, "record 0 has no detail.'tp'"),
    ({"model": "M", "layer": "d", "tp": 0}, "detail.tp = 0; accepted: a positive integer"),
    ({"model": "M", "layer": "d", "tp": "2"}, "detail.tp = '2'; accepted: a positive integer"),
])
def test_bad_tp_records_are_named(detail, needle):
    rec = {**_rec("w4a8_native", 64, 128, 1, 5.0, 1), "detail": detail}
    with pytest.raises(InvalidInputError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        tp_measurements(parse_results(_doc([rec]), "t.json"))


def test_committed_validation_is_current():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from validate_tp import OUT
    from workbench.perf.fit import error_stats as stats
    from workbench.perf.predict import predict

    assert stats([0.3, -0.1, 0.2, 0.0]) == {"n": 4, "median_abs_err": 0.15, "p90_abs_err": 0.3,
                                            "max_abs_err": 0.3}
    doc = json.loads(OUT.read_text())
    meas = load_tp_shards()
    assert doc["all"]["n"] == len(meas.timings) == len(doc["points"])
    assert doc["all"] == {**stats([p["rel_err"] for p in doc["points"]]),
                          "band_coverage": round(sum(p["in_band"] for p in doc["points"]) / len(doc["points"]), 4)}
    assert doc["collective"]["modelled"] is False and doc["collective"]["measured"] is False
    for p in doc["points"][::31]:  # the model as it is now: regenerate the file when it changes
        now = predict("sm90-h200", p["path"], p["m"], p["n"], p["k"], p["group_size"]).predicted_us
        assert now == pytest.approx(p["predicted_us"], rel=1e-3), p


def test_predictions_join_the_measured_rows(tmp_path):
    from workbench.tp_measured import load_validation, with_predictions

    check = load_validation()
    rows = with_predictions(shards_at(load_tp_shards(), 4), check)
    assert len(rows) == 18 and all(r["w4a8_native_predicted_us"] > 0 for r in rows)
    bad = tmp_path / "v.json"
    bad.write_text(json.dumps({"all": {}, "points": [{"tp": 1}]}))
    with pytest.raises(InvalidInputError, match=r"v\.json: not the file benchmarks/validate_tp\.py writes"):
        load_validation(bad)


def test_all_reduce_floor_is_the_bandwidth_bound():
    from workbench.tp_measured import all_reduce_floor_us, nvlink

    link = nvlink("sm90-h200")
    assert link["nvlink_gbs_bidirectional"] == 900.0 and link["source"].startswith("https://www.nvidia.com/")
    # TP 8, M 4096: 7/4 of a 64 MiB bf16 output each way at 450 GB/s
    assert all_reduce_floor_us(4096, 8192, 8, 900.0) == pytest.approx(1.75 * 4096 * 8192 * 2 / 450e3)
    assert all_reduce_floor_us(4096, 8192, 1, 900.0) == 0.0
    with pytest.raises(InvalidInputError, match=r"'x86-avx512': no interconnect figure.*accepted: sm90-h200"):
        nvlink("x86-avx512")
