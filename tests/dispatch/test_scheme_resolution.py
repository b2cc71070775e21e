"""compressed-tensors scheme resolution (§1.3 to §1.6): predicates, gates, TP partitions."""
from __future__ import annotations

import pytest

from workbench.dispatch import trace_scheme
from workbench.quant_args import QuantArgs, QuantArgsError

W4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
A8 = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True, "symmetric": True}


def layer(fmt="int-quantized", weights=W4, inputs=A8, **extra):
    return {"weights": weights, "input_activations": inputs, "output_activations": None,
            "format": fmt, "layer_name": "model.layers.0.mlp.down_proj", "in_features": 4096,
            "out_features": 4096, "params_dtype": "bfloat16", **extra}


def test_predicates_are_recorded_in_vllm_order_until_the_match():
    t = trace_scheme(layer(), "x86-avx512")
    names = [p.name.split("(")[0] for p in t.predicates]
    assert names == ["_is_nvfp4_format", "_is_mxfp4_w4a8_fp8", "_is_mxfp4", "_is_mxfp8",
                     "_is_fp8_w4a8_sm90", "_is_wNa8o8_int", "_is_wNaM_int", "_is_wNaM_int",
                     "_is_wNa16_group_channel", "_is_fp8_w8a8", "_is_fp8_w8a16",
                     "_is_static_tensor_w8a8", "_is_dynamic_token_w8a8", "_is_dynamic_token_w4a8_int"]
    assert [p.matched for p in t.predicates].count(True) == 1 and t.predicates[-1].matched
    assert all(p.detail.startswith("fails: ") for p in t.predicates[:-1])


def test_channelwise_effective_group_is_k_column_and_k_shard_row():
    ch = {"num_bits": 4, "type": "int", "strategy": "channel", "symmetric": True}
    col = trace_scheme(layer(weights=ch, output_size_per_partition=2048), "x86-avx512")
    assert col.mp_config.group_size == 4096 and col.mp_config.partition_weight_shape == (4096, 2048)
    row = trace_scheme(layer(weights=ch, input_size_per_partition=1024), "x86-avx512")
    assert row.mp_config.group_size == 1024 and row.mp_config.full_weight_shape == (4096, 4096)


def test_group_straddling_a_row_parallel_shard_is_vllms_value_error():
    t = trace_scheme(layer(in_features=14784, input_size_per_partition=1848), "x86-avx512")
    assert t.scheme == "CompressedTensorsW4A8Int" and t.error_type == "ValueError"
    assert t.error == ("Weight input_size_per_partition=1848 is not divisible by group_size=128. This "
                       "happens when tensor_parallel_size splits the layer input into shards that are "
                       "not a whole number of quant groups. Consider reducing tensor_parallel_size.")
    assert t.to_json()["kernel"]["mp_config"] is None  # raised before the config is built


def test_wna16_straddle_names_the_layer_after_selection():
    # Marlin rejects the straddle, Humming accepts, then the scheme's own check raises.
    t = trace_scheme(layer("pack-quantized", inputs=None, in_features=14784,
                           input_size_per_partition=1848), "sm80-a100")
    assert t.selected == "HummingLinearKernel" and t.error_type == "ValueError"
    assert " MarlinLinearKernel cannot implement due to: in_features per partition 1848 is not divisible by group_size = 128." in t.reasons
    t = trace_scheme(layer("pack-quantized", inputs=None, in_features=10944,
                           input_size_per_partition=5472), "x86-avx512")
    assert t.selected == "CPUWNA16LinearKernel" and t.error_type == "ValueError"
    assert "for layer 'model.layers.0.mlp.down_proj'" in t.error


def test_w4a8_fp8_off_sm90_has_no_scheme():
    fp8 = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}
    for preset in ("sm80-a100", "sm89-l40s", "sm100-b200", "x86-avx512", "xpu"):
        t = trace_scheme(layer("pack-quantized", inputs=fp8), preset)
        assert t.error_type == "NotImplementedError", preset
    ok = trace_scheme(layer("pack-quantized", inputs=fp8), "sm90-h200")
    assert ok.scheme == "CompressedTensorsW4A8Fp8"
    bad_group = trace_scheme(layer("pack-quantized", weights={**W4, "group_size": 64}, inputs=fp8),
                             "sm90-h200")
    assert bad_group.error == "W4A8 kernels require group quantization with group size 128"


def test_scheme_capability_gate_is_runtime_error():
    w8 = {"num_bits": 8, "type": "int", "strategy": "channel"}
    t = trace_scheme(layer(weights=w8), "sm70-v100")
    assert (t.scheme, t.error_type) == (None, "RuntimeError")
    assert t.error == ("Quantization scheme is not supported for the current GPU. Min capability: 75. "
                       "Current capability: 70.")
    assert trace_scheme(layer(weights=w8), "x86-avx512").scheme == "CompressedTensorsW8A8Int8"


def test_group_actorder_is_refused_while_parsing():
    t = trace_scheme(layer("pack-quantized", weights={**W4, "actorder": "group"}, inputs=None))
    assert t.error_type == "ValueError" and "actorder='group'" in t.error
    assert trace_scheme(layer("pack-quantized", weights={**W4, "actorder": "static"}, inputs=None),
                        "sm80-a100").scheme == "CompressedTensorsWNA16"


def test_wna16_types_follow_bits_and_symmetry():
    for bits, sym, wt in ((4, True, "uint4b8"), (8, True, "uint8b128"), (4, False, "uint4"),
                          (3, True, "uint3b4")):
        t = trace_scheme(layer("pack-quantized", weights={**W4, "num_bits": bits, "symmetric": sym},
                               inputs=None), "sm90-h200")
        assert str(t.mp_config.weight_type) == wt
        assert t.mp_config.zero_points is (not sym)


def test_batch_invariant_skips_the_kernel_loop():
    t = trace_scheme(layer("pack-quantized", inputs=None), "sm90-h200", {"VLLM_BATCH_INVARIANT": "1"})
    assert t.scheme == "CompressedTensorsWNA16" and t.selected is None and t.error is None
    assert t.steps == () and any("batch-invariant" in n for n in t.notes)


def test_batch_invariant_still_verifies_whole_groups():
    """Skipping the loop does not skip create_weights' group check (wNa16.py)."""
    t = trace_scheme(layer("pack-quantized", inputs=None, in_features=14784,
                           input_size_per_partition=1848), "sm90-h200",
                     {"VLLM_BATCH_INVARIANT": "1"})
    assert t.error_type == "ValueError" and "input_size_per_partition=1848" in t.error
    assert t.to_json()["kernel"] == {"mp_config": None, "selected": None, "reasons": [],
                                     "error": t.error, "error_type": "ValueError"}


def test_quant_args_repr_matches_compressed_tensors():
    w = QuantArgs.from_json(W4, "w")
    assert repr(w) == ("QuantizationArgs(num_bits=4, type='int', symmetric=True, group_size=128, "
                       "strategy='group', block_structure=None, dynamic=False, actorder=None, "
                       "scale_dtype=None, zp_dtype=torch.int8, observer='memoryless_minmax', "
                       "observer_kwargs={})")
    a = QuantArgs.from_json({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}, "a")
    assert "zp_dtype=torch.float8_e4m3fn, observer=None" in repr(a)
    assert QuantArgs.from_json({"num_bits": 4, "group_size": -1}, "c").strategy == "channel"


@pytest.mark.parametrize("bad", [
    {"num_bits": 4, "strategy": "token"},  # static token
    {"num_bits": 4, "strategy": "group"},  # group without size
    {"num_bits": 4, "group_size": 64, "strategy": "channel"},
    {"num_bits": 4, "group_size": -7},
    {"num_bits": 4, "strategy": "diagonal"},
    {"num_bits": 4, "colour": "red"},
])
def test_invalid_quant_args_are_named_errors(bad):
    with pytest.raises(QuantArgsError):
        QuantArgs.from_json(bad, "scheme.weights")
