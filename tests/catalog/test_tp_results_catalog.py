"""Bad input to the measured-TP reader (workbench.tp_measured)."""
from __future__ import annotations

import pytest

from workbench.errors import InvalidInputError
from workbench.results import SCHEMA, parse_results
from workbench.tp_measured import load_tp_shards, load_validation, nvlink, tp_measurements

SURFACE = "tp_results"


def _raises(pattern, fn):
    def run():
        with pytest.raises(InvalidInputError, match=pattern):
            fn()
    return run


def _parse(detail, path="w4a8_native"):
    rec = {"path": path, "n": 64, "k": 128, "m": 1, "median_us": 5.0, "detail": detail}
    return lambda: tp_measurements(parse_results({"schema": SCHEMA, "records": [rec]}, "t.json"))


def _validation(text):
    import tempfile
    from pathlib import Path

    p = Path(tempfile.mkdtemp()) / "v.json"
    if text is not None:
        p.write_text(text)
    return lambda: load_validation(p)


def _ok_committed():
    meas = load_tp_shards()
    assert meas.tp_sizes == (1, 2, 4, 8) and len(meas.not_run_at(2)) == 1


CATALOG = [
    ("TP record without detail.tp", "InvalidInputError: record 0 has no detail.'tp'; names the accepted writers",
     _raises(r"t\.json: record 0 has no detail\.'tp'; accepted: records written by benchmarks/tp_bench\.py",
             _parse({"model": "M", "layer": "down_proj"}))),
    ("TP record with tp = 0", "InvalidInputError: detail.tp = 0; accepted: a positive integer",
     _raises(r"detail\.tp = 0; accepted: a positive integer", _parse({"model": "M", "layer": "d", "tp": 0}))),
    ("TP record with tp = true", "InvalidInputError: detail.tp = True; accepted: a positive integer",
     _raises(r"detail\.tp = True; accepted", _parse({"model": "M", "layer": "d", "tp": True}))),
    ("TP file with only bf16_dense records", "InvalidInputError: no w4a8_native or w4a16_fallback records",
     _raises(r"no w4a8_native or w4a16_fallback records", _parse({"tp": 1}, path="bf16_dense"))),
    ("TP validation file missing", "InvalidInputError: no such file; names the script that writes it",
     _raises(r"v\.json: no such file; accepted: the file benchmarks/validate_tp\.py writes", _validation(None))),
    ("TP validation file without points", "InvalidInputError: not the file benchmarks/validate_tp.py writes",
     _raises(r"not the file benchmarks/validate_tp\.py writes \(KeyError", _validation('{"all": {}}'))),
    ("NVLink figure of x86-avx512", "InvalidInputError: no interconnect figure; names the parts that have one",
     _raises(r"'x86-avx512': no interconnect figure in the hardware data; accepted: sm90-h200",
             lambda: nvlink("x86-avx512"))),
    ("the committed h200_tp_shards.json", "ok: TP 1, 2, 4, 8; the g128 down_proj at TP 2 named as not run",
     _ok_committed),
]


@pytest.mark.parametrize("row", CATALOG, ids=[r[0] for r in CATALOG])
def test_catalog(row):
    row[2]()
