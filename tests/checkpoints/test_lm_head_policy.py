"""INC and GPTQ resolve a layer's quantization by one policy, vLLM's: the checkpoint reader's
listing and the dispatch core's trace agree on every per-layer rule, and the ParallelLMHead
(`lm_head`) is treated as vLLM treats it:

- INC: unquantized unless an extra_config key names it (inc/config_parser.py:163-176: exact or
  ".key" suffix first, then `quantized = not isinstance(layer, ParallelLMHead)`);
- GPTQ: quantized only with `lm_head: true` (utils/gptq_utils.py:179-182), and then a "-:"
  dynamic rule leaves it unquantized with UnquantizedEmbeddingMethod (:189-195).
"""
from __future__ import annotations

import pytest

from workbench.checkpoints import open_checkpoint, trace_layer
from workbench.dispatch import trace_gptq, trace_inc

DOWN = "model.layers.0.mlp.down_proj"
LM_HEAD = "lm_head"


def _with_lm_head(tools, tmp_path, sample: str, edit) -> object:
    """A sample whose lm_head holds a copy of down_proj's quantized tensors."""
    path = tools.copy_sample(sample, tmp_path)

    def add(tensors):
        for role in ("qweight", "qzeros", "scales", "g_idx"):
            if f"{DOWN}.{role}" in tensors:
                tensors[f"{LM_HEAD}.{role}"] = tensors[f"{DOWN}.{role}"].clone()

    tools.edit_tensors(path, add)
    tools.edit_config(path, lambda c: edit(c["quantization_config"]))
    if (path / "quantize_config.json").exists():
        tools.edit_config(path, edit, file="quantize_config.json")
    return path


def _dispatch(trace, ck, spec_like) -> object:
    """The dispatch core's trace of the lm_head as vLLM builds it (a ParallelLMHead)."""
    return trace({"quantization_config": dict(ck.quant_config), "layer_name": LM_HEAD,
                  "module": "ParallelLMHead", "in_features": spec_like.in_features,
                  "out_features": spec_like.out_features, "params_dtype": spec_like.params_dtype})


INC_CASES = [
    # (extra_config, quantized as vLLM resolves it)
    ({}, False),  # block_name_to_quantize "model.layers" does not hold it, nor does the class
    ({"lm_head": {"bits": 4, "group_size": 128, "sym": True}}, True),  # exact key
    ({"model.lm_head": {"bits": 4}}, False),  # a key the name does not end with
    ({"lm_head": {"bits": 16}}, False),  # named, 16 bits: unquantized
    ({"lm_.*": {"bits": 4, "group_size": 128}}, True),  # a regex key searches the name
]


@pytest.mark.parametrize("extra, quantized", INC_CASES)
def test_inc_reader_and_dispatch_agree_on_lm_head(tools, tmp_path, extra, quantized):
    path = _with_lm_head(tools, tmp_path, "autoround-w4a16-g128",
                         lambda qc: qc.update(extra_config=extra))
    ck = open_checkpoint(path)
    listed = LM_HEAD in ck.layer_names()
    assert listed is quantized
    t = trace_layer(ck.spec(LM_HEAD)) if listed else _dispatch(trace_inc, ck, ck.spec(DOWN))
    assert (t.method != "UnquantizedLinearMethod") is quantized, (t.method, t.error)
    if quantized:
        assert t.error is None or "lm_head" not in t.error


GPTQ_CASES = [
    # (lm_head, dynamic, what vLLM builds for the ParallelLMHead)
    (False, {}, "UnquantizedEmbeddingMethod"),
    (False, {"+:lm_head": {"bits": 4}}, "UnquantizedEmbeddingMethod"),  # dynamic is not asked
    (True, {}, None),  # quantized: a GPTQ kernel
    (True, {"-:lm_head": {}}, "UnquantizedEmbeddingMethod"),
    (True, {"-:model\\.layers\\..*": {}}, None),  # a rule for other layers
]


@pytest.mark.parametrize("lm_head, dynamic, unquantized", GPTQ_CASES)
def test_gptq_reader_and_dispatch_agree_on_lm_head(tools, tmp_path, lm_head, dynamic, unquantized):
    path = _with_lm_head(tools, tmp_path, "gptq-w4a16-g128",
                         lambda qc: qc.update(lm_head=lm_head, dynamic=dynamic))
    ck = open_checkpoint(path)
    listed = LM_HEAD in ck.layer_names()
    assert listed is (unquantized is None)
    assert any(n.startswith("lm_head holds lm_head.qweight") for n in ck.notes) is (not listed)
    t = trace_layer(ck.spec(LM_HEAD)) if listed else _dispatch(trace_gptq, ck, ck.spec(DOWN))
    if unquantized:
        assert t.method == unquantized and t.runtime_detail.method == unquantized
    else:
        assert t.method is None or not t.method.startswith("Unquantized"), t.method
        assert t.selected and not t.selected.startswith("Unquantized")


def test_a_linear_named_lm_head_stays_a_linear():
    # The recorded cases build a LinearBase named "lm_head": vLLM quantizes it like any other.
    layer = {"quantization_config": {"bits": 4, "group_size": 128, "sym": True, "desc_act": False},
             "layer_name": LM_HEAD, "in_features": 4096, "out_features": 4096}
    assert not trace_gptq(layer).selected.startswith("Unquantized")
    assert trace_gptq({**layer, "module": "ParallelLMHead"}).selected == "UnquantizedEmbeddingMethod"
    inc = {"quantization_config": {"bits": 4, "group_size": 128, "sym": True},
           "layer_name": LM_HEAD, "in_features": 4096, "out_features": 4096}
    assert trace_inc(inc).selected != "UnquantizedLinearMethod"
    assert trace_inc({**inc, "module": "ParallelLMHead"}).selected == "UnquantizedLinearMethod"
