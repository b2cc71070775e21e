"""Bad input to the core's Python API: each row a named `WorkbenchError` (or the right result),
raised before anything large is allocated."""
from __future__ import annotations

import time

import pytest
import torch

from workbench import alignment, models, sweeps
from workbench.bench import bench_layer_weight, summarize, synthetic_bench_layer, time_fn
from workbench.dispatch.types import MPConfig, PartitionFit
from workbench.errors import InvalidInputError, UnknownPresetError
from workbench.perf import predict
from workbench.platforms import platform_from_json
from workbench.synthetic import SyntheticSpec, layer_from_weight, quant_args, quantize_rtn, synthetic_layer

SURFACE = "core"

MP = {"weight_type": "int4", "act_type": "bfloat16", "group_size": 128,
      "full_weight_shape": [4096, 4096]}


def _raises(pattern, fn, exc=InvalidInputError, within_s: float = 1.0):
    """`fn` raises `exc` matching `pattern`, within `within_s` seconds (no allocation first)."""
    def run():
        start = time.perf_counter()
        with pytest.raises(exc, match=pattern):
            fn()
        assert time.perf_counter() - start < within_s
    return run


def _spec(**fields):
    return lambda: SyntheticSpec(**fields)


def _ok(check):
    def run():
        assert check()
    return run



def _hostile_names_escaped():
    import csv
    import io

    from workbench.results import rows_csv
    from workbench.text import printable

    for name in ("a\x1b]0;owned\x07b", "x\x1b[2Jy", "row\nforged", "\u202eevil", "c1\x9b"):
        assert printable(name).isprintable(), name
    text = rows_csv([{"layer": '=HYPERLINK("http://x","y")'}, {"layer": "+1"}, {"layer": "a\x1b[2J"}])
    cells = [r["layer"] for r in csv.DictReader(io.StringIO(text))]
    assert cells[0].startswith("'=") and cells[1] == "'+1" and "\x1b" not in text, cells

CATALOG = [
    ("SyntheticSpec(out_features=2**20, in_features=2**20)",
     "InvalidInputError: size: a synthetic 1048576 x 1048576 layer needs about N GiB; the limit here is M GiB",
     _raises(r"synthetic 1048576 x 1048576 layer needs about [\d.]+ GiB; the limit here is [\d.]+ GiB",
             _spec(out_features=2**20, in_features=2**20))),
    ("SyntheticSpec 10^9 x 10^9", "InvalidInputError: size: ... needs about N GiB (at once, no hang)",
     _raises(r"needs about [\d.]+ GiB", _spec(out_features=10**9, in_features=10**9))),
    ("synthetic_layer(out_features=2**20, in_features=2**20)", "InvalidInputError: size: ... (not the allocator's RuntimeError)",
     _raises(r"needs about [\d.]+ GiB", lambda: synthetic_layer(out_features=2**20, in_features=2**20))),
    ("SyntheticSpec(out_features=True)", "InvalidInputError: out_features: True; accepted: an integer from 1 to 2147483647",
     _raises(r"out_features: True; accepted: an integer from 1", _spec(out_features=True))),
    ("SyntheticSpec(in_features=10**100)", "InvalidInputError: in_features: ...; accepted: an integer from 1 to 2147483647",
     _raises(r"in_features: 1000.*accepted: an integer from 1 to 2147483647", _spec(in_features=10**100))),
    ("SyntheticSpec(in_features=64.0)", "InvalidInputError: in_features: 64.0; accepted: an integer",
     _raises(r"in_features: 64.0; accepted: an integer", _spec(in_features=64.0, group_size=-1))),
    ("SyntheticSpec(group_size=True)", "InvalidInputError: group_size: True does not divide in_features = 4096; accepted: -1 (per channel) or a positive divisor of K",
     _raises(r"group_size: True does not divide .*accepted: -1 \(per channel\) or a positive divisor", _spec(group_size=True))),
    ("quantize_rtn(w, group_size=True)", "InvalidInputError: group_size: True ... (was group 1)",
     _raises(r"group_size: True does not divide", lambda: quantize_rtn(torch.randn(8, 64), group_size=True))),
    ("quantize_rtn(w, num_bits=4.0)", "InvalidInputError: num_bits: 4.0; accepted: 4 (was a TypeError)",
     _raises(r"num_bits: 4.0; accepted: 4", lambda: quantize_rtn(torch.randn(8, 64), num_bits=4.0, group_size=32))),
    ("quantize_rtn(NaN weight)", "InvalidInputError: weight: holds NaN or Inf; accepted: finite values (was NaN scales)",
     _raises(r"weight: holds NaN or Inf", lambda: quantize_rtn(torch.full((8, 64), float("nan")), group_size=32))),
    ("quantize_rtn(1e30 weight, scale_dtype=float16)", "InvalidInputError: weight: a group's scale (1.33e+29) overflows float16",
     _raises(r"scale \(1.33e\+29\) overflows float16",
             lambda: quantize_rtn(torch.full((8, 64), 1e30), group_size=32, scale_dtype=torch.float16))),
    ("quantize_rtn(float64 1e300 weight)", "InvalidInputError: weight: a group's scale (inf) overflows bfloat16",
     _raises(r"scale \(inf\) overflows bfloat16",
             lambda: quantize_rtn(torch.full((8, 64), 1e300, dtype=torch.float64), group_size=32))),
    ("quantize_rtn(meta weight)", "InvalidInputError: weight: a meta tensor [8, 64]; accepted: a [N, K] tensor with data",
     _raises(r"weight: a meta tensor \[8, 64\]", lambda: quantize_rtn(torch.empty(8, 64, device="meta"), group_size=32))),
    ("quantize_rtn(0 x 64 weight)", "InvalidInputError: weight: empty [0, 64]; accepted: ... N, K >= 1",
     _raises(r"weight: empty \[0, 64\]", lambda: quantize_rtn(torch.empty(0, 64), group_size=32))),
    ("quantize_rtn(w, symmetric='no')", "InvalidInputError: symmetric: 'no'; accepted: True or False (was symmetric)",
     _raises(r"symmetric: 'no'; accepted: True or False", lambda: quantize_rtn(torch.randn(8, 64), group_size=32, symmetric="no"))),
    ("quantize_rtn(w, scale_dtype=torch.int8)", "InvalidInputError: scale_dtype: torch.int8; accepted: torch.bfloat16, torch.float16, torch.float32",
     _raises(r"scale_dtype: torch.int8; accepted", lambda: quantize_rtn(torch.randn(8, 64), group_size=32, scale_dtype=torch.int8))),
    ("quant_args('W4A8', group_size=0)", "InvalidInputError: group_size: 0; accepted: -1 (per channel) or a positive integer",
     _raises(r"group_size: 0; accepted: -1", lambda: quant_args("W4A8", group_size=0))),
    ("layer_from_weight(w, name=5)", "InvalidInputError: name: 5; accepted: a non-empty string",
     _raises(r"name: 5; accepted: a non-empty string", lambda: layer_from_weight(torch.randn(8, 64), name=5, group_size=32))),
    ("layer_from_weight(w, params_dtype=[])", "InvalidInputError: params_dtype: []; accepted: bfloat16, float16, float32 (was a TypeError)",
     _raises(r"params_dtype: \[\]; accepted: bfloat16", lambda: layer_from_weight(torch.randn(8, 64), name="x", group_size=32, params_dtype=[]))),
    ("SyntheticSpec(std=nan)", "InvalidInputError: std: nan; accepted: a finite number above 0",
     _raises(r"std: nan; accepted: a finite number above 0", _spec(std=float("nan")))),
    ("SyntheticSpec(outlier_scale=inf)", "InvalidInputError: outlier_scale: inf; accepted: a finite number above 0",
     _raises(r"outlier_scale: inf; accepted: a finite number", _spec(outlier_scale=float("inf")))),
    ("SyntheticSpec(std='0.02')", "InvalidInputError: std: '0.02'; accepted: a finite number above 0",
     _raises(r"std: '0.02'; accepted", _spec(std="0.02"))),
    ("SyntheticSpec(seed=-1)", "InvalidInputError: seed: -1; accepted: an integer from 0 to 2^63-1",
     _raises(r"seed: -1; accepted: an integer from 0", _spec(seed=-1))),
    ("SyntheticSpec(outlier_channels=1.5)", "InvalidInputError: outlier_channels: 1.5; accepted: an integer from 0 to K",
     _raises(r"outlier_channels: 1.5; accepted: an integer from 0 to 4096", _spec(outlier_channels=1.5))),
    ("SyntheticSpec(symmetric='no')", "InvalidInputError: symmetric: 'no'; accepted: True or False",
     _raises(r"symmetric: 'no'; accepted: True or False", _spec(symmetric="no"))),
    ("SyntheticSpec(params_dtype={})", "InvalidInputError: params_dtype: {}; accepted: bfloat16, float16, float32",
     _raises(r"params_dtype: \{\}; accepted: bfloat16", _spec(params_dtype={}))),
    ("synthetic_layer(64 x 128, std=1e6, float16)", "InvalidInputError: std ... weights overflow float16 (largest 65504)",
     _raises(r"weights overflow float16 \(largest 65504\)",
             lambda: synthetic_layer(out_features=64, in_features=128, std=1e6, params_dtype="float16"))),
    ("synthetic_layer(bogus=1)", "InvalidInputError: synthetic_layer: unknown field(s) ['bogus']",
     _raises(r"unknown field\(s\) \['bogus'\]", lambda: synthetic_layer(bogus=1))),
    ("synthetic_layer({'out_features': 3})", "InvalidInputError: synthetic_layer: expected a SyntheticSpec ..., got dict",
     _raises(r"expected a SyntheticSpec .*got dict", lambda: synthetic_layer({"out_features": 3}))),
    ("synthetic_layer(out_features=64, in_features=130, group_size=-1)", "ok: a 64 x 130 per-channel layer",
     _ok(lambda: synthetic_layer(out_features=64, in_features=130, group_size=-1).qweight.shape == (64, 130))),
    ("MPConfig.from_json weight_type 'int3'", "InvalidInputError: mp_config.weight_type: unknown weight type 'int3'; accepted: vLLM's scalar_types ...",
     _raises(r"unknown weight type 'int3'; accepted: vLLM's scalar_types", lambda: MPConfig.from_json({**MP, "weight_type": "int3"}))),
    ("MPConfig.from_json act_type 'int3'", "InvalidInputError: mp_config.act_type: unknown dtype 'int3'; accepted: torch dtypes ...",
     _raises(r"act_type: unknown dtype 'int3'; accepted: torch dtypes", lambda: MPConfig.from_json({**MP, "act_type": "int3"}))),
    ("MPConfig.from_json partition [4096, 8192] of full [4096, 4096]", "ok, as vLLM takes any MPLinearLayerConfig: warning LARGER (no TP split produces it)",
     _ok(lambda: MPConfig.from_json({**MP, "partition_weight_shape": [4096, 8192]}).partition_warning.why
         is PartitionFit.LARGER)),
    ("MPConfig.from_json partition [1000, 4096] of full [4096, 4096]", "ok, as vLLM takes any MPLinearLayerConfig: warning NOT_DIVIDING",
     _ok(lambda: MPConfig.from_json({**MP, "partition_weight_shape": [1000, 4096]}).partition_warning.why
         is PartitionFit.NOT_DIVIDING)),
    ("MPConfig.from_json partition [2048, 2048] of full [4096, 4096]", "ok, as vLLM takes any MPLinearLayerConfig: warning BOTH_SPLIT",
     _ok(lambda: MPConfig.from_json({**MP, "partition_weight_shape": [2048, 2048]}).partition_warning.why
         is PartitionFit.BOTH_SPLIT)),
    ("MPConfig.from_json partition [1024, 4096] of full [4096, 4096]", "ok: a row-parallel shard at TP 4, no warning",
     _ok(lambda: MPConfig.from_json({**MP, "partition_weight_shape": [1024, 4096]}).partition_warning is None)),
    ("platform_from_json capability 10^9", "InvalidInputError: platform.capability: got 1000000000; accepted: null or an integer from 10 to 199",
     _raises(r"got 1000000000; accepted: null or an integer from 10 to 199",
             lambda: platform_from_json({"preset": "sm90-h200", "capability": 10**9}))),
    ("platform_from_json capability 9.0", "InvalidInputError: platform.capability: got 9.0; accepted: ... an integer",
     _raises(r"got 9.0; accepted: null or an integer", lambda: platform_from_json({"preset": "sm90-h200", "capability": 9.0}))),
    ("bench_layer_weight(64 x 256 layer, M = [0, 1])", "InvalidInputError: m[0]: 0; accepted: an integer from 1 to 1048576 (an empty GEMM was timed, its errors None)",
     _raises(r"m\[0\]: 0; accepted: an integer from 1 to 1048576",
             lambda: bench_layer_weight(synthetic_bench_layer(64, 256, 64), ["w4a8_native"], [0, 1]))),
    ("bench_layer_weight(64 x 256 layer, M = [10**7])", "InvalidInputError: m[0]: 10000000; accepted: ... to 1048576 (not the allocator's error)",
     _raises(r"m\[0\]: 10000000; accepted", lambda: bench_layer_weight(synthetic_bench_layer(64, 256, 64), ["w4a8_native"], [10**7]))),
    ("bench_layer_weight(64 x 65536 layer, M = [2**20], 6 paths)", "InvalidInputError: size: benchmarking ... needs about 1154 GiB; the limit here is M GiB",
     _raises(r"size: benchmarking N = 64, K = 65536, M up to 1048576 on 6 path\(s\) needs about [\d.]+ GiB",
             lambda: bench_layer_weight(synthetic_bench_layer(64, 65536, 128), ["w4a8_native"] * 6, [2**20]), within_s=5)),
    ("bench_layer_weight(paths='w4a8_native')", "InvalidInputError: paths: 'w4a8_native'; accepted: a list of kernel path names",
     _raises(r"paths: 'w4a8_native'; accepted: a list", lambda: bench_layer_weight(synthetic_bench_layer(64, 256, 64), "w4a8_native", [1]))),
    ("bench_layer_weight(..., max_call_s=nan)", "InvalidInputError: max_call_s: nan; accepted: a finite number above 0 and at most 3600 (NaN switched the budget off)",
     _raises(r"max_call_s: nan; accepted: a finite number above 0 and at most 3600",
             lambda: bench_layer_weight(synthetic_bench_layer(64, 256, 64), ["w4a8_native"], [1], max_call_s=float("nan")))),
    ("bench_layer_weight(..., repeats=0)", "InvalidInputError: repeats: 0; accepted: an integer from 1 to 1000",
     _raises(r"repeats: 0; accepted: an integer from 1 to 1000",
             lambda: bench_layer_weight(synthetic_bench_layer(64, 256, 64), ["w4a8_native"], [1], repeats=0))),
    ("bench.time_fn(fn, repeats=0)", "InvalidInputError: repeats: 0; accepted: an integer from 1 to 1000 (was a StatisticsError)",
     _raises(r"repeats: 0; accepted: an integer from 1 to 1000", lambda: time_fn(lambda: None, repeats=0))),
    ("bench.summarize([nan])", "InvalidInputError: samples: [nan]; accepted: at least one finite duration >= 0 (was a NaN median)",
     _raises(r"samples: \[nan\]; accepted: at least one finite duration", lambda: summarize([float("nan")]))),
    ("perf.predict(m = 99999999999)", "InvalidInputError: m = 99999999999; accepted: an integer >= 1 and at most 1048576 (was extrapolated to 3.7e9 us)",
     _raises(r"m = 99999999999; accepted: an integer >= 1 and at most 1048576",
             lambda: predict("sm90-h200", "w4a8_native", 99999999999, 4096, 4096, 128))),
    ("models.partitions(model, tp=2.0)", "InvalidInputError: tp: 2.0; accepted: an integer from 1 to 1024 (n was 3072.0)",
     _raises(r"tp: 2.0; accepted: an integer from 1 to 1024", lambda: models.partitions("Llama-3.1-8B", 2.0))),
    ("models.partitions(model, tp=True)", "InvalidInputError: tp: True; accepted: an integer from 1 to 1024",
     _raises(r"tp: True; accepted", lambda: models.partitions("Llama-3.1-8B", True))),
    ("models.partitions(model, tp=None)", "InvalidInputError: tp: None; accepted: ... (was a TypeError)",
     _raises(r"tp: None; accepted", lambda: models.partitions("Llama-3.1-8B", None))),
    ("models.get_model([])", "UnknownPresetError: model preset: expected a name, got []",
     _raises(r"expected a name, got \[\]", lambda: models.get_model([]), exc=UnknownPresetError)),
    ("models.partition_table('Qwen2.5-7B')", "InvalidInputError: models: a list of model names (a string was walked letter by letter)",
     _raises(r"accepted: a list of model names", lambda: models.partition_table("Qwen2.5-7B"))),
    ("models.partition_table(['x'])", "UnknownPresetError: model preset 'x' does not exist (was a 'refused' row)",
     _raises(r"model preset 'x' does not exist", lambda: models.partition_table(["x"]), exc=UnknownPresetError)),
    ("models.broken_rules(k=0, n=4096)", "InvalidInputError: k: 0; accepted: an integer from 1 to 2147483647 (was: no rule broken)",
     _raises(r"k: 0; accepted: an integer from 1", lambda: models.broken_rules(0, 4096))),
    ("models.broken_rules(4096, 4096, group_size=nan)", "InvalidInputError: group_size: nan; accepted: ... or -1 or 0",
     _raises(r"group_size: nan; accepted", lambda: models.broken_rules(4096, 4096, float("nan")))),
    ("alignment.marlin_padded_nk(n=-1, ...)", "InvalidInputError: n: -1; accepted: an integer from 1 (was the shape (0, 4096))",
     _raises(r"n: -1; accepted: an integer from 1", lambda: alignment.marlin_padded_nk(-1, 4096, 128))),
    ("alignment.marlin_padded_nk(group_size=2.5)", "InvalidInputError: group_size: 2.5; accepted: ... or -1",
     _raises(r"group_size: 2.5; accepted", lambda: alignment.marlin_padded_nk(4096, 4096, 2.5))),
    ("alignment.padding_rows(dim='X')", "InvalidInputError: dim: 'X'; accepted: 'K' or 'N'",
     _raises(r"dim: 'X'; accepted: 'K' or 'N'", lambda: alignment.padding_rows("X", 4096, 4096, [0], 128))),
    ("sweeps.sweep_partitions(model, tp_sizes=(0,))", "InvalidInputError: tp_sizes[0]: 0; accepted ... (was an empty sweep)",
     _raises(r"tp_sizes\[0\]: 0; accepted", lambda: sweeps.sweep_partitions("Llama-3.1-8B", (0,)))),
    ("sweeps.sweep_m(n=0)", "InvalidInputError: out_features: 0; accepted: an integer from 1",
     _raises(r"out_features: 0; accepted", lambda: sweeps.sweep_m(0, 128, 64, ms=[1]))),
    ("sweeps.sweep_alignment(ns=(64.0,))", "InvalidInputError: out_features: 64.0; accepted: an integer",
     _raises(r"out_features: 64.0; accepted", lambda: sweeps.sweep_alignment((64.0,), 128, ms=[1]))),
    ("layer names holding ESC]0;...BEL, ESC[2J, a newline, U+202E, C1 0x9b; a CSV cell =HYPERLINK(...) or +1",
     "escaped as visible \\x1b / \\n / \\u202e; CSV cells prefixed with ' (OWASP), no ESC byte in the CSV",
     _hostile_names_escaped),
]


@pytest.mark.parametrize("row", CATALOG, ids=[row[0] for row in CATALOG])
def test_core_catalog(row):
    row[2]()
