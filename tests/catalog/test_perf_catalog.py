"""Bad input to the performance model, the results reader and the predict / report CLI."""
from __future__ import annotations

import pytest

from workbench.__main__ import main
from workbench.errors import InvalidInputError, WorkbenchError
from workbench.perf import predict
from workbench.perf.selected import predict_selected
from workbench.perf.report import model_report
from workbench.results import SCHEMA, load_results, parse_results

SURFACE = "perf"


def _raises(exc, pattern, fn):
    def run():
        with pytest.raises(exc, match=pattern):
            fn()
    return run


def _cli(argv, code, needle):
    def run(capsys=None):
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            got = main(argv)
        needles = (needle,) if isinstance(needle, str) else needle
        assert got == code and all(n in err.getvalue() for n in needles), (got, err.getvalue())
    return run


def _ok_edges():
    from workbench.perf.cpu_classes import CPU_CALL_FLOOR_US, GPU_CALL_FLOOR_US
    from workbench.perf.hardware import _doc

    for platform, part in _doc()["parts"].items():
        for path in ("w4a8_native", "w4a16_fallback", "bf16_dense", "int8_mm"):
            for m, nk in ((1, 1), (2 ** 20, 2 ** 31 - 1)):
                j = predict(platform, path, m, nk, nk, -1).to_json()
                floor = CPU_CALL_FLOOR_US if part["kind"] == "cpu" else GPU_CALL_FLOOR_US
                assert floor <= j["low_us"] <= j["predicted_us"] <= j["high_us"], (platform, path, j)


def _refused_report():
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["report", "Qwen2.5-72B", "--platform", "sm90-h200", "--tp", "4"])
    text = out.getvalue()
    assert code == 1 and "total per forward" not in text, (code, text)
    assert "down_proj: Weight input_size_per_partition=7392 is not divisible by group_size=128" in text


def _ok_band():
    p = predict("sm90-h200", "w4a8_native", 7, 4096, 4096, 128)
    assert p.basis == "measured" and p.low_us <= p.predicted_us <= p.high_us


def _ok_refused_layer():
    p = predict_selected("sm70-v100", 1, 4096, 4096, 128)
    assert p.predicted_us is None and "vLLM cannot run this layer here" in p.note


def _write(tmp, text, name="r.json"):
    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp())
    (d / name).write_text(text)
    return d / name


CATALOG = [
    ("predict m = 0", "InvalidInputError: m = 0; accepted: an integer >= 1",
     _raises(InvalidInputError, r"m = 0; accepted: an integer >= 1", lambda: predict("sm90-h200", "w4a8_native", 0, 64, 64))),
    ("predict group 100 on K = 4096", "InvalidInputError: group_size names -1 or a divisor of K",
     _raises(InvalidInputError, r"group_size = 100; accepted: -1 \(per-channel\) or a divisor of K = 4096",
             lambda: predict("sm90-h200", "w4a8_native", 1, 4096, 4096, 100))),
    ("predict path 'fast'", "InvalidInputError: lists the accepted paths",
     _raises(InvalidInputError, r"path 'fast'; accepted: w4a8_native, w4a16_fallback",
             lambda: predict("sm90-h200", "fast", 1, 64, 64))),
    ("predict path 'dense' on sm90-h200", "InvalidInputError: dense is the CPU dense GEMM; lists the GPU paths",
     _raises(InvalidInputError, r"path 'dense' is this project's CPU dense GEMM; on 'sm90-h200' accepted: w4a8_native",
             lambda: predict("sm90-h200", "dense", 1, 64, 64))),
    ("predict platform 'tpu-v5'", "InvalidInputError: no hardware data; lists the presets and 'host'",
     _raises(WorkbenchError, r"platform 'tpu-v5': no hardware data; accepted: .*sm90-h200.*'host'",
             lambda: predict("tpu-v5", "bf16_dense", 1, 64, 64))),
    ("predict K = True (a bool)", "InvalidInputError: k = True; accepted: an integer >= 1",
     _raises(InvalidInputError, r"k = True", lambda: predict("sm90-h200", "bf16_dense", 1, 64, True))),
    ("predict sm90-h200 W4A8 g128 at M = 7", "ok: a measured prediction inside its band", _ok_band),
    ("predict 'selected' on V100 (vLLM refuses W4A8)", "ok: no time; the note quotes vLLM's refusal",
     _ok_refused_layer),
    ("CLI predict --m 1,x", "exit 2, one error line naming --m, the bad entry and what is accepted",
     _cli(["predict", "--n", "64", "--k", "64", "--m", "1,x"], 2, ("error: --m", "x", "accepted"))),
    ("CLI predict --paths ','", "exit 2, error: --paths: empty",
     _cli(["predict", "--n", "64", "--k", "64", "--paths", ","], 2, "--paths: empty")),
    ("CLI report of a file that is neither preset nor folder", "exit 2, error: neither a model preset nor a checkpoint directory",
     _cli(["report", "README.md"], 2, "neither a model preset")),
    ("report --tp 0", "InvalidInputError: tp = 0; accepted: an integer >= 1",
     _raises(InvalidInputError, r"tp = 0; accepted", lambda: model_report("Llama-3.1-8B", "sm90-h200", 0))),
    ("report Llama-3.1-8B at TP 3", "InvalidInputError: tp: 3; accepted: a power of two",
     _raises(InvalidInputError, r"tp: 3; accepted: a power of two",
             lambda: model_report("Llama-3.1-8B", "sm90-h200", 3))),
    ("report Phi-3-mini at TP 64 (32 heads)", "InvalidInputError: num_attention_heads = 32 is not divisible by 64",
     _raises(InvalidInputError, r"num_attention_heads = 32 is not divisible by tensor parallel size 64",
             lambda: model_report("Phi-3-mini", "sm90-h200", 64))),
    ("results file with schema 'other/2'", "InvalidInputError: names the accepted schema",
     _raises(InvalidInputError, r"schema 'other/2'; accepted: 'w4a8-workbench-results/1'",
             lambda: parse_results({"schema": "other/2", "records": [{}]}))),
    ("results record median_us = NaN", "InvalidInputError: median_us = nan; accepted: a finite number",
     _raises(InvalidInputError, r"record 0 median_us = nan; accepted: a finite number",
             lambda: parse_results({"schema": SCHEMA, "records": [
                 {"path": "x", "n": 1, "k": 1, "m": 1, "median_us": float("nan")}]}))),
    ("results file that is a CSV export", "InvalidInputError: CSV files are exports, never read back",
     _raises(InvalidInputError, r"CSV files are exports", lambda: load_results(_write(None, "a,b\n", "r.csv")))),
    ("results file that is not JSON", "InvalidInputError: not JSON",
     _raises(InvalidInputError, r"not JSON", lambda: load_results(_write(None, "{oops")))),
    ("CLI report Qwen2.5-72B on sm90-h200 at TP 4 (down_proj K 7392, g128)",
     "exit 1, no total, down_proj named with vLLM's error", _refused_report),
    ("predict every preset at N = K = 1, M = 1 and at N = K = 2^31-1, M = 2^20",
     "ok: every figure at least the per-call floor and inside its own band", _ok_edges),
]


@pytest.mark.parametrize("row", CATALOG, ids=[r[0] for r in CATALOG])
def test_catalog(row):
    row[2]()
