"""Humming's activation as the default rule set's vLLM decides it: `check_and_fallback_input_schema`
(utils/humming/schema.py:261-400), one test per branch, the traces that carry it, and the
compatibility test held against the real `humming` package where it is installed."""
from __future__ import annotations

import importlib
import importlib.util
import itertools
import types

import pytest

from workbench import dispatch
from workbench.dispatch.versions import rule_set

# The rule set under test, as the version registry names it (no version written here): its
# module, or the one of the release it derives that module from.
H = rule_set().module("humming_input")
VllmError = rule_set().module("errors").VllmError

W4_G128 = H.weight_schema(4, 128, False)
W4_CHANNEL = H.weight_schema(4, -1, False)
INT8_TOKEN = H.InputSchema(H.INT8, 0, H.FLOAT32, "dynamic_token")


def test_weight_schema_is_unsigned_and_channel_for_minus_one():
    # humming.py:54 maps -1 to 0; HummingWeightSchema makes int4 uint4 and 0 channelwise
    # (humming/schema/humming.py:46-59).
    assert W4_CHANNEL == H.WeightSchema(H._int(4, False), None, 0, 0, "channel", False)
    assert W4_G128.scale_type == "group" and W4_G128.group_size == 128


def test_16_bit_input_is_kept():  # schema.py:343-344
    d = H.check_and_fallback_input_schema(W4_G128, H.InputSchema(), "bfloat16", 90)
    assert (d.branch, d.schema, d.source) == ("16-bit", H.InputSchema(), H.VLLM_SCHEMA + ":343")


def test_int8_per_token_on_channelwise_weights_is_kept():  # schema.py:359
    d = H.check_and_fallback_input_schema(W4_CHANNEL, INT8_TOKEN, "bfloat16", 90)
    assert d.branch == "kept" and d.schema == INT8_TOKEN


@pytest.mark.parametrize("w,i", [(W4_G128, INT8_TOKEN),  # groupwise weight
                                 (W4_CHANNEL, H.InputSchema(H.INT8, 128, None, "dynamic_group"))])
def test_int8_with_a_groupwise_weight_or_input_runs_16_bit(w, i):  # schema.py:354-357
    d = H.check_and_fallback_input_schema(w, i, "float16", 90)
    assert (d.branch, d.schema) == ("groupwise-to-16-bit", H.InputSchema())


def test_int4_is_deprecated_from_sm90_and_falls_back_to_int8():  # schema.py:328, 361-394
    i = H.InputSchema(H.INT4, 0, H.FLOAT32, "dynamic_token")
    assert H.check_and_fallback_input_schema(W4_CHANNEL, i, "bfloat16", 89).branch == "kept"
    d = H.check_and_fallback_input_schema(W4_CHANNEL, i, "bfloat16", 90)
    assert (d.branch, d.schema) == ("fallback", INT8_TOKEN)  # int4's order: int8 first (:307)


def test_int8_is_deprecated_on_sm103_to_109():  # schema.py:329
    assert H.is_deprecated(H.INT8, 103) and H.is_deprecated(H.INT8, 109)
    assert not H.is_deprecated(H.INT8, 120) and not H.is_deprecated(H.INT8, 90)


def test_every_sub_16_bit_type_is_deprecated_on_sm100_to_119():  # schema.py:333
    for d in (H.E4M3, H.INT8, H.E2M1):
        assert H.is_deprecated(d, 100) and H.is_deprecated(d, 119) and not H.is_deprecated(d, 120)
    assert H.is_deprecated(H.INT4, 120)  # int4 stays deprecated from SM90 on (:328)
    # so on a B200 an int8 layer walks int8, e4m3, e3m4 (all deprecated) down to bf16
    d = H.check_and_fallback_input_schema(W4_CHANNEL, INT8_TOKEN, "bfloat16", 100)
    assert (d.branch, d.schema) == ("fallback", H.InputSchema(H.BFLOAT16, 0, None, "none"))


def test_fp8_fallback_on_sm120_uses_mx_group_scales_for_channelwise_weights():  # :377-385
    # e5m2 needs a bf16 output (humming/config/mma.py:62-63): an fp16 layer walks e5m2's order
    # (:279-283), and e4m3 on SM120 with channelwise weights takes 32-wide e8m0 group scales.
    i = H.InputSchema(H.E5M2, 0, H.FLOAT32, "dynamic_token")
    d = H.check_and_fallback_input_schema(W4_CHANNEL, i, "float16", 120)
    assert (d.branch, d.schema) == ("fallback", H.InputSchema(H.E4M3, 32, H.E8M0, "dynamic_group"))
    d = H.check_and_fallback_input_schema(W4_CHANNEL, i, "float16", 90)  # per token below SM120
    assert d.schema == H.InputSchema(H.E4M3, 0, H.FLOAT32, "dynamic_token")


def test_fp6_inputs_are_read_as_e4m3():  # schema.py:316-318
    i = H.InputSchema(H.E2M3, 0, H.FLOAT32, "dynamic_token")
    d = H.check_and_fallback_input_schema(W4_CHANNEL, i, "bfloat16", 90)
    assert d.requested.a_dtype == H.E4M3 and d.schema.a_dtype == H.E4M3


def test_without_fallback_a_deprecated_type_is_kept_with_vllms_warning():  # schema.py:337-341
    i = H.InputSchema(H.INT4, 0, H.FLOAT32, "dynamic_token")
    d = H.check_and_fallback_input_schema(W4_CHANNEL, i, "bfloat16", 90, allow_fallback=False)
    assert d.branch == "kept-no-fallback" and d.warning == "Humming int4 activation is slow on SM90 now."


def test_without_fallback_an_incompatible_schema_is_vllms_value_error():  # schema.py:396-400
    i = H.InputSchema(H.INT8, 16, None, "dynamic_group")  # 8-bit acts need groups >= 32
    with pytest.raises(VllmError) as exc:
        H.check_and_fallback_input_schema(W4_CHANNEL, i, "bfloat16", 90, allow_fallback=False)
    assert exc.value.message.startswith(
        "No compatible Humming input schema for HummingInputSchema(quant_method='humming', "
        "a_dtype=int8, input_scale_group_size=16, input_scale_dtype=None, "
        "input_quant_mode=<InputQuantizationMode.DynamicGroup: 'dynamic_group'>) with weight "
        "schema HummingWeightSchema(quant_method='humming', b_dtype=uint4")
    assert exc.value.message.endswith(" on SM90 (allow_fallback=False)")


def test_a_float32_layer_fails_vllms_assertion():  # schema.py:276
    with pytest.raises(VllmError) as exc:
        H.check_and_fallback_input_schema(W4_CHANNEL, INT8_TOKEN, "float32", 90)
    assert exc.value.error_type == "AssertionError"


def test_asymmetric_weights_as_wide_as_the_activations_are_refused():  # linear.py:108-119
    with pytest.raises(VllmError, match=r"\(W8A8\)\. Use symmetric weights"):
        H.humming_layer_input(8, -1, True, "bfloat16", H.InputConfig(8), "bfloat16", 90)


def test_an_8_bit_act_type_wins_over_the_input_config():  # humming.py:66-73, linear.py:76-80
    d = H.humming_layer_input(4, -1, False, "float8_e4m3fn", H.InputConfig(8), "bfloat16", 90)
    assert d.requested.a_dtype == H.E4M3
    d = H.humming_layer_input(4, -1, False, "bfloat16", None, "bfloat16", 90)
    assert d.requested == H.InputSchema()


def test_the_ct_input_config_maps_to_humming_modes():  # compressed_tensors.py:349-378
    assert H.config_schema(H.InputConfig(8)) == H.InputSchema(H.INT8, 0, None, "dynamic_token")
    assert H.config_schema(H.InputConfig(8, group_size=128)).mode == "dynamic_group"
    assert H.config_schema(H.InputConfig(4, dynamic=False)).mode == "static_tensor"


def test_the_sign_magnitude_conversion_changes_no_decision():
    # convert_symmetric_integer_weight (humming/schema/humming.py:295-323) depends on the
    # weight values, which a trace does not have: every decision is the same either way.
    inputs = [H.InputSchema(), INT8_TOKEN, H.InputSchema(H.INT4, 0, H.FLOAT32, "dynamic_token"),
              H.InputSchema(H.E4M3, 0, H.FLOAT32, "dynamic_token"),
              H.InputSchema(H.INT8, 128, None, "dynamic_group"),
              H.InputSchema(H.INT4, 64, None, "dynamic_group")]
    for sm, bits, g, i, p in itertools.product((75, 80, 89, 90, 100, 103, 110, 120, 121),
                                               range(2, 9), (-1, 32, 64, 128), inputs,
                                               ("bfloat16", "float16")):
        w = H.weight_schema(bits, g, False)
        assert _outcome(w, i, p, sm) == _outcome(H.sign_magnitude(w), i, p, sm), (w, i, p, sm)


def _outcome(w, i, p, sm):
    try:
        return H.check_and_fallback_input_schema(w, i, p, sm).schema
    except VllmError as exc:  # e.g. a bf16 layer below SM80: no schema at all
        return exc.error_type


# -- the traces -----------------------------------------------------------------------------

SCHEME = {"format": "pack-quantized",
          "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                      "group_size": 128, "dynamic": False},
          "input_activations": {"num_bits": 8, "type": "int", "symmetric": True,
                                "strategy": "token", "dynamic": True},
          "output_activations": None, "layer_name": "model.layers.0.mlp.down_proj",
          "in_features": 4096, "out_features": 4096, "params_dtype": "bfloat16"}
NO_MACHETE = {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"}


def test_g128_pack_quantized_w4a8_on_h200_runs_bf16_activations():
    t = dispatch.trace_scheme(SCHEME, "sm90-h200", NO_MACHETE)
    rt = t.runtime_detail
    assert t.selected == "HummingLinearKernel"
    assert (rt.activation, rt.activation_requested, rt.emulation) == ("bf16", "int8", "w4a16_fallback")
    assert rt.source == rule_set().cite(H.VLLM_SCHEMA + ":354")  # in the traced release's lines
    text = dispatch.describe_runtime(rt)
    assert "activations stay bf16" in text and "Real W4A8" not in text
    assert "not the int8 activations the layer's input schema asks for" in text
    assert rt.to_json()["activation"] == "bf16"


def test_per_channel_pack_quantized_w4a8_on_h200_stays_int8():
    s = {**SCHEME, "weights": {**SCHEME["weights"], "strategy": "channel", "group_size": None}}
    rt = dispatch.trace_scheme(s, "sm90-h200", NO_MACHETE).runtime_detail
    assert (rt.activation, rt.activation_requested, rt.emulation) == ("int8", None, "w4a8_native")
    assert dispatch.describe_runtime(rt).startswith(
        "Real W4A8: activations quantized per token to int8")


def test_an_int8_marlin_input_dtype_reaching_humming_falls_back_for_g128():
    # GPTQ with VLLM_MARLIN_INPUT_DTYPE=int8 hands Humming an int8 act_type (humming.py:66).
    mp = {"weight_type": "uint4b8", "act_type": "int8", "group_size": 128, "zero_points": False,
          "out_type": None, "full_weight_shape": [4096, 4096],
          "partition_weight_shape": [4096, 4096]}
    rt = dispatch.trace_mp(mp, "sm90-h200", {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"})
    assert rt.selected == "HummingLinearKernel"
    assert rt.runtime_detail.activation == "bf16" and rt.runtime_detail.caveat


# -- against the real package ---------------------------------------------------------------

HAS_HUMMING = importlib.util.find_spec("humming") is not None


@pytest.mark.skipif(not HAS_HUMMING, reason="humming-kernels (the test / cuda extra) is not "
                                            "installed")
def test_is_compatible_agrees_with_the_real_package():
    """`is_humming_schema_compatible` of humming-kernels 0.1.19 on every input of a sweep; only
    the device's SM version is simulated (humming/device.py's `current_device`)."""
    import torch
    import humming.device as hd
    from humming import dtypes as D
    from humming.schema import HummingInputSchema, HummingWeightSchema
    from humming.schema import is_humming_schema_compatible as real

    def dt(x):
        return None if x is None else D.DataType.from_str(x.name)

    saved = hd.current_device._value
    acts = [None, H.INT8, H.INT4, H.E4M3, H.E3M4, H.E5M2, H.E2M1]
    try:
        for sm in (75, 89, 90, 100, 120):
            hd.current_device._value = types.SimpleNamespace(sm_version=sm)
            for bits, g, zp, sm_weight in itertools.product((2, 4, 5, 6, 8), (-1, 16, 32, 128),
                                                            (False, True), (False, True)):
                if zp and sm_weight:
                    continue
                w = H.weight_schema(bits, g, zp)
                w = H.sign_magnitude(w) if sm_weight else w
                rw = HummingWeightSchema(b_dtype=dt(w.b_dtype), weight_scale_group_size=w.group_size,
                                         has_zero_point=zp)
                assert repr(rw) == repr(w)
                for a, ig, sd, p in itertools.product(acts, (0, 32, 128), (None, H.E8M0),
                                                      ("bfloat16", "float16")):
                    i = H.InputSchema(a, ig, sd, "dynamic_token")
                    ri = HummingInputSchema(a_dtype=dt(a), input_scale_group_size=ig,
                                            input_scale_dtype=dt(sd), input_quant_mode="dynamic_token")
                    assert repr(ri) == repr(i)
                    assert real(ri, rw, getattr(torch, p)) == H.is_compatible(
                        i, w, H.PARAM_DTYPES[p], sm), (sm, w, i, p)
    finally:
        hd.current_device._value = saved


def test_no_device_capability_is_vllms_assertion():
    """schema.py:269-270 asserts the capability before anything else: a CUDA platform that
    reports none fails the layer's load with that AssertionError, not with a wrong answer."""
    with pytest.raises(VllmError) as exc:
        H.check_and_fallback_input_schema(W4_G128, INT8_TOKEN, "bfloat16", None)
    assert exc.value.error_type == "AssertionError"


@pytest.mark.skipif(not HAS_HUMMING, reason="humming-kernels (the test / cuda extra) is not "
                                            "installed")
def test_the_kernels_copy_of_the_decision_agrees_with_the_rule_set():
    """`w4a8_kernels.vllm_humming` repeats vLLM's check_and_fallback_input_schema on real
    humming schemas, to build the kernel vLLM builds; the rule set models it for traces. Both
    give the same schema, or the same error, on every input of a sweep (the device's SM version
    simulated as above), so the copy the GPU runs cannot drift from the one traces show."""
    import torch
    import humming.device as hd
    from humming import dtypes as D
    from humming.config import InputQuantizationMode
    from humming.schema import HummingInputSchema, HummingWeightSchema
    from w4a8_kernels.vllm_humming import check_and_fallback_input_schema as kernels_copy

    def dt(x):
        return None if x is None else D.DataType.from_str(x.name)

    modes = {m.value: m for m in InputQuantizationMode}
    saved = hd.current_device._value
    acts = [None, H.INT8, H.INT4, H.E4M3, H.E5M2, H.E3M4, H.E2M1, H.E2M3]
    seen = {"raised": 0, "fell back": 0, "kept": 0, "dropped to 16-bit": 0}
    try:
        for sm in (75, 80, 89, 90, 100, 103, 120):
            hd.current_device._value = types.SimpleNamespace(sm_version=sm)
            for bits, g, zp, sm_weight in itertools.product((4, 8), (-1, 32, 128), (False, True),
                                                            (False, True)):
                if zp and sm_weight:
                    continue
                w = H.weight_schema(bits, g, zp)
                w = H.sign_magnitude(w) if sm_weight else w
                for a, ig, sd, p, fallback in itertools.product(
                        acts, (0, 32), (H.FLOAT32, H.E8M0), ("bfloat16", "float16"), (True, False)):
                    if a is None and (ig or sd != H.FLOAT32):
                        continue
                    mode = None if a is None else "dynamic_token" if ig == 0 else "dynamic_group"
                    i = H.InputSchema(a, ig, None if a is None else sd, mode)
                    rw = HummingWeightSchema(b_dtype=dt(w.b_dtype), weight_scale_group_size=w.group_size,
                                             has_zero_point=zp)
                    ri = HummingInputSchema(a_dtype=dt(a), input_scale_group_size=ig,
                                            input_scale_dtype=dt(i.scale_dtype),
                                            input_quant_mode=None if mode is None else modes[mode])
                    case = (sm, w, i, p, fallback)
                    try:
                        got = repr(kernels_copy(rw, ri, getattr(torch, p), fallback, sm))
                    except ValueError as exc:
                        got = f"ValueError: {exc}"
                    try:
                        d = H.check_and_fallback_input_schema(w, i, p, sm, fallback)
                        want = repr(d.schema)
                        seen["fell back" if d.branch == "fallback" else "kept" if "kept" in d.branch
                             else "dropped to 16-bit"] += 1
                    except VllmError as exc:
                        want = f"{exc.error_type}: {exc.message}"
                        seen["raised"] += 1
                    assert got == want, case
    finally:
        hd.current_device._value = saved
    assert all(seen.values()), seen  # the sweep reaches every kind of answer
