"""The one results reader: the schema, and both committed legacy forms, read the same way."""
import json

import pytest

from workbench.errors import InvalidInputError
from workbench.results import SCHEMA, ResultRecord, load_results, parse_results, write_results


def test_schema_round_trip(tmp_path):
    rec = ResultRecord("w4a8_native", "triton_w4a8", 4096, 4096, 128, 16, 10.5, 10.2, 10.9, 20,
                       {"block_m": 16}, {"method": "graph"})
    p = write_results(tmp_path / "r.json", {"platform": "sm90-h200"}, [rec])
    res = load_results(p)
    assert res.form == "schema/1" and res.platform == "sm90-h200" and res.records == (rec,)
    assert json.loads(p.read_text())["schema"] == SCHEMA


def test_legacy_h200_records_get_path_names():
    doc = {"provenance": {"gpu": "NVIDIA H200"},
           "tables": {"w4a8": {"decode|group": {"block_m": 16}}},
           "records": [{"kernel": "w4a8", "group_size": 128, "N": 64, "K": 256, "M": m, "time_us": 3.0}
                       for m in (16, 17, 513)] + [
               {"kernel": "cublas_bf16", "group_size": None, "N": 64, "K": 256, "M": 1, "time_us": 2.0},
               {"kernel": "w4a8", "group_size": 128, "N": 64, "K": 256, "M": 7, "error": "OOM"}]}
    res = parse_results(doc, "h200_bench.json")
    assert res.platform == "sm90-h200" and len(res.records) == 4
    # the bucket's table entry is not the launched config (block_k = g): none is claimed
    assert [r.config for r in res.records[:3]] == [None, None, None]
    assert res.records[0].path == "w4a8_native"
    assert res.records[3].path == "bf16_dense" and res.records[3].group_size == -1


def test_schema_error_records_are_kept_apart_not_refused():
    doc = {"schema": SCHEMA, "provenance": {"platform": "sm90-h200"}, "records": [
        {"path": "w4a8_native", "n": 64, "k": 256, "group_size": 64, "m": 0, "error": "K not a multiple"},
        {"path": "w4a8_native", "n": 64, "k": 256, "group_size": 64, "m": 1, "median_us": 5.0}]}
    res = parse_results(doc, "x.json")
    assert len(res.records) == 1 and res.not_run[0]["error"] == "K not a multiple"


def test_committed_files_all_read():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    for name in ("h200_bench.json", "cpu_sweep_m.json", "cpu_sweep_group.json", "cpu_sweep_tp.json"):
        res = load_results(root / name)
        assert res.records and all(r.median_us > 0 for r in res.records), name


@pytest.mark.parametrize("doc, match", [
    ({}, "no 'records' list"),
    ({"schema": "other/9", "records": [{}]}, "accepted: 'w4a8-workbench-results/1'"),
    ({"schema": SCHEMA, "records": [{"path": "x", "n": 1, "k": 1, "m": 1}]}, "no 'median_us'"),
    ({"schema": SCHEMA, "records": [{"path": "x", "n": 1, "k": 1, "m": 1, "median_us": "fast"}]},
     "median_us = 'fast'"),
    ({"records": [{"m": 1}]}, "neither"),
])
def test_bad_documents_are_named(doc, match):
    with pytest.raises(InvalidInputError, match=match):
        parse_results(doc, "x.json")


def test_csv_is_never_read_back(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("path,m\n")
    with pytest.raises(InvalidInputError, match="CSV files are exports"):
        load_results(p)
