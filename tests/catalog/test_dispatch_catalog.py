"""Bad input to the GPTQ / AWQ / Marlin-input routes of the dispatch API: each row vLLM's own
outcome (its exception type and exact text, recorded in the trace) or a named error."""
from __future__ import annotations

import pytest

from workbench.dispatch import trace_awq, trace_gptq
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
    ("GPTQ g128 on sm90-h200 with VLLM_MARLIN_INPUT_DTYPE=int8 (Machete gets act_type int8)",
     "ok: Machete selected; RuntimeError at load from machete_prepack_B (no int8 layout)",
     _load_failure(trace_gptq, GPTQ, "RuntimeError",
                   "NotImplementedError: prepack_B_dispatch(..) is not implemented for atype = "
                   "Char, b_type = uint4b8, with_group_scales_type= Char", INT8)),
]


@pytest.mark.parametrize("row", CATALOG, ids=[row[0] for row in CATALOG])
def test_dispatch_catalog(row):
    row[2]()
