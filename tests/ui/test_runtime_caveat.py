"""The Platform page shows what vLLM's source leaves undetermined, read from the Runtime."""
from __future__ import annotations

from workbench.dispatch import trace_gptq
from workbench.dispatch.versions import available
from workbench.ui.widgets import ambiguity_notes

LAYER = {"in_features": 4096, "out_features": 4096, "params_dtype": "bfloat16",
         "layer_name": "model.layers.0.mlp.down_proj", "bits": 4, "group_size": 128,
         "sym": True, "desc_act": False}


def test_a_runtime_caveat_is_an_ambiguity_note():
    env = {"VLLM_MARLIN_INPUT_DTYPE": "int8"}  # read by the first release only
    t = trace_gptq(LAYER, "sm90-h200", env, rules=available()[0])
    assert t.runtime_detail.caveat and t.runtime_detail.caveat in ambiguity_notes(t, env)
    plain = trace_gptq(LAYER, "sm90-h200")
    assert plain.runtime_detail.caveat is None
    assert not [n for n in ambiguity_notes(plain, {}) if "compiled op" in n]
