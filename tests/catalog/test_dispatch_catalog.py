"""Bad input to the GPTQ / AWQ / Marlin-input routes of the dispatch API: each row vLLM's own
outcome (its exception type and exact text, recorded in the trace) or a named error."""
from __future__ import annotations

import pytest

import time
from functools import partial

from workbench.dispatch import trace_awq, trace_gptq, trace_inc
from workbench.dispatch.versions import available
from workbench.errors import InvalidInputError

SURFACE = "dispatch"

LAYER = {"in_features": 4096, "out_features": 4096, "params_dtype": "bfloat16",
         "layer_name": "model.layers.0.mlp.down_proj"}
GPTQ = {"bits": 4, "group_size": 128, "desc_act": False, "sym": True, **LAYER}
AWQ = {"bits": 4, "group_size": 128, "zero_point": True, **LAYER}


def _without(case: dict, key: str) -> dict:
    return {k: v for k, v in case.items() if k != key}


def _vllm_error(trace, case, error_type, text, platform="sm90-h200", env=None):
    def run():
        t = trace(case, platform, env)
        assert (t.error_type, t.error) == (error_type, text), (t.error_type, t.error)
        assert t.selected is None
    return run


def _load_failure(trace, case, error_type, text, env):
    def run():
        rt = trace(case, "sm90-h200", env).runtime_detail
        assert (rt.fails_at, rt.error_type, rt.error) == ("load", error_type, text), rt
    return run


def _named(trace, case, pattern):
    def run():
        with pytest.raises(InvalidInputError, match=pattern):
            trace(case, "sm90-h200")
    return run


def _refused_within(trace, case, pattern, within_s=2.0):
    from workbench.checkpoints.errors import PatternRefusedError

    def run():
        start = time.perf_counter()
        with pytest.raises(PatternRefusedError, match=pattern):
            trace(case, "sm90-h200")
        assert time.perf_counter() - start < within_s
    return run


def _selects(trace, case, selected, method=None, platform="sm90-h200", within_s=None):
    def run():
        start = time.perf_counter()
        t = trace(case, platform)
        if within_s is not None:
            assert time.perf_counter() - start < within_s
        assert t.error is None, (t.error_type, t.error)
        assert t.selected == selected, t.selected
        if method is not None:
            assert t.method == method, t.method
    return run


AR = {"quantization_config": {"quant_method": "auto-round", "bits": 4, "group_size": 128,
                              "sym": True}, **LAYER}


def _inc(**extra):
    return {**AR, "quantization_config": {**AR["quantization_config"], **extra}}


INT8 = {"VLLM_MARLIN_INPUT_DTYPE": "int8"}
# (tracer, its short form, the key left out, the keys vLLM's get_from_keys names)
_MISSING = [(trace_gptq, GPTQ, "bits", "['bits']"), (trace_gptq, GPTQ, "group_size", "['group_size']"),
            (trace_gptq, GPTQ, "desc_act", "['desc_act']"),
            (trace_awq, AWQ, "zero_point", "['zero_point']"),
            (trace_awq, AWQ, "bits", "['w_bit', 'bits']")]
CATALOG = [
    *[(f"{trace.__name__} short form without {key}",
       f"ok: vLLM's ValueError: Cannot find any of {keys} in the model's quantization config.",
       _vllm_error(trace, _without(case, key), "ValueError",
                   f"Cannot find any of {keys} in the model's quantization config."))
      for trace, case, key, keys in _MISSING],
    ("trace_gptq with bits \"four\"",
     "InvalidInputError: gptq.bits: expected an integer, got 'four'",
     _named(trace_gptq, {**GPTQ, "bits": "four"}, r"gptq\.bits: expected an integer, got 'four'")),
    ("trace_gptq with dynamic a list",
     "InvalidInputError: gptq.dynamic: expected a JSON object of rules",
     _named(trace_gptq, {**GPTQ, "dynamic": ["+:.*"]}, r"gptq\.dynamic: expected a JSON object")),
    ("trace_gptq with dynamic '-:(a|aa)+$' and layer_name a^40 '!' (re backtracks for minutes)",
     "ok: answered in under 5 s; the rule does not match, Machete selected",
     _selects(trace_gptq, {**GPTQ, "dynamic": {"-:(a|aa)+$": {}}, "layer_name": "a" * 40 + "!"},
              "MacheteLinearKernel", within_s=5.0)),
    ("trace_gptq with dynamic '-:.*[[:digit:]]\\.mlp\\..*' (a POSIX class, as vLLM's regex reads it)",
     "ok: the layer is skipped: UnquantizedLinearMethod",
     _selects(trace_gptq, {**GPTQ, "dynamic": {"-:.*[[:digit:]]\\.mlp\\..*": {}}},
              "UnquantizedLinearMethod")),
    ("trace_gptq with dynamic override group_size \"64\" (a string)",
     "ok: ignored as override_config ignores it; Machete at g128",
     _selects(trace_gptq, {**GPTQ, "dynamic": {"+:.*down_proj": {"group_size": "64"}}},
              "MacheteLinearKernel")),
    ("trace_gptq with bits 3", "ok: vLLM's ValueError: Unsupported quantization config: bits=3, sym=True",
     _vllm_error(trace_gptq, {**GPTQ, "bits": 3}, "ValueError",
                 "Unsupported quantization config: bits=3, sym=True")),
    ("trace_inc with extra_config {'.*[[:digit:]]\\.mlp\\..*': {'bits': 16}} (a POSIX class)",
     "ok: UnquantizedLinearMethod",
     _selects(trace_inc, _inc(extra_config={".*[[:digit:]]\\.mlp\\..*": {"bits": 16}}),
              "UnquantizedLinearMethod")),
    ("trace_inc with extra_config {layer: {'bits': 16}}", "ok: UnquantizedLinearMethod",
     _selects(trace_inc, _inc(extra_config={LAYER["layer_name"]: {"bits": 16}}), "UnquantizedLinearMethod")),
    ("trace_inc with extra_config {layer: {'bits': 16.0}}", "ok: UnquantizedLinearMethod (16.0 < 16 is false)",
     _selects(trace_inc, _inc(extra_config={LAYER["layer_name"]: {"bits": 16.0}}), "UnquantizedLinearMethod")),
    ("trace_inc with extra_config {'mlp\\.down.*': {'bits': 16}} (a regex key)", "ok: UnquantizedLinearMethod",
     _selects(trace_inc, _inc(extra_config={"mlp\\.down.*": {"bits": 16}}), "UnquantizedLinearMethod")),
    ("trace_inc with a lookahead key '(?:(?=(?:.?){1900}$).)*x' and a 989-character layer name",
     "ok: answered in under 20 s (re hangs); the key does not match",
     _selects(trace_inc, {**_inc(extra_config={"(?:(?=(?:.?){1900}$).)*x": {"bits": 16}}),
                          "layer_name": "a" * 989}, "MacheteLinearKernel", within_s=20.0)),
    ("GPTQ g128 on sm90-h200 with VLLM_MARLIN_INPUT_DTYPE=int8 (Machete gets act_type int8)",
     "ok: Machete selected; RuntimeError at load from machete_prepack_B (no int8 layout)",
     _load_failure(partial(trace_gptq, rules=available()[0]), GPTQ, "RuntimeError",  # 1st release
                   "NotImplementedError: prepack_B_dispatch(..) is not implemented for atype = "
                   "Char, b_type = uint4b8, with_group_scales_type= Char", INT8)),
    # Round 4: config values as vLLM's from_config hands them on, unconverted (Python decides).
    ("trace_gptq with sym 1 (1 == True finds TYPE_MAP's entry)", "ok: Machete selected, as vLLM "
     "(recorded: AutoGPTQLinearMethod, MacheteLinearKernel); was refused",
     _selects(trace_gptq, {**GPTQ, "sym": 1}, "MacheteLinearKernel")),
    ("trace_gptq with desc_act 0 and desc_act null (falsy to `if desc_act`)", "ok: Machete selected, as "
     "vLLM; was refused", lambda: [_selects(trace_gptq, {**GPTQ, "desc_act": v}, "MacheteLinearKernel")()
                                   for v in (0, None)]),
    ("trace_gptq with desc_act \"false\" (a non-empty string is true)", "ok: vLLM's ValueError: GPTQ group "
     "activation ordering (desc_act=True) is no longer supported...",
     _vllm_error(trace_gptq, {**GPTQ, "desc_act": "false"}, "ValueError",
                 "GPTQ group activation ordering (desc_act=True) is no longer supported. Use a "
                 "checkpoint with static activation ordering or desc_act=False.")),
    ("trace_gptq with sym null", "ok: vLLM's ValueError: Unsupported quantization config: bits=4, sym=None",
     _vllm_error(trace_gptq, {**GPTQ, "sym": None}, "ValueError",
                 "Unsupported quantization config: bits=4, sym=None")),
    ("trace_gptq with bits 0", "ok: vLLM's ZeroDivisionError from 32 // weight_bits (auto_gptq.py:146)",
     _vllm_error(trace_gptq, {**GPTQ, "bits": 0}, "ZeroDivisionError",
                 "integer division or modulo by zero")),
    ("trace_awq with zero_point 1", "ok: selected as with true (recorded: Machete); was refused",
     _selects(trace_awq, {**AWQ, "zero_point": 1}, "MacheteLinearKernel")),
    ("trace_inc with sym 1", "ok: Machete selected, as vLLM; was refused",
     _selects(trace_inc, _inc(sym=1), "MacheteLinearKernel")),
    ("trace_gptq with a dynamic of 5000 regex rules", "PatternRefusedError: 5000 regex patterns; accepted: "
     "at most 2000, at once", _refused_within(trace_gptq, {**GPTQ, "dynamic": {
         f"-:x{i}\\..*": {} for i in range(5000)}}, "5000 regex patterns; accepted: at most 2000")),
    ("trace_inc with extra_config {layer: {'bits': '16'}} (a string)", "ok: vLLM's TypeError: '>=' not "
     "supported between instances of 'str' and 'int' (inc/inc.py:329); was an internal error",
     _vllm_error(trace_inc, _inc(extra_config={LAYER["layer_name"]: {"bits": "16"}}), "TypeError",
                 "'>=' not supported between instances of 'str' and 'int'")),
]


@pytest.mark.parametrize("row", CATALOG, ids=[row[0] for row in CATALOG])
def test_dispatch_catalog(row):
    row[2]()
