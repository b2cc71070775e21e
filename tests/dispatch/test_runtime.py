"""The one Runtime value: produced for every selected kernel, rendered, carried in the JSON."""
from __future__ import annotations

import re

import pytest

from tests.dispatch.conftest import FIRST
from workbench.dispatch import (DEFAULT_VERSION, describe_runtime, trace_inc, trace_mp,
                                trace_scheme)
from workbench.dispatch.types import ACTIVATIONS
from workbench.dispatch.versions import UnknownVersionError, rules
from workbench.platforms import PRESETS

CONFIGS = [{"weight_type": w, "act_type": a, "group_size": g, "zero_points": zp,
            "out_type": "bfloat16" if a == "float8_e4m3fn" else None,
            "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 4096]}
           for w, zp in (("int4", False), ("uint4b8", False), ("uint4", True))
           for a in ("bfloat16", "float16", "int8", "float8_e4m3fn") for g in (128, -1)]
SOURCE = re.compile(r"^[\w/]+\.py(:\d+)?$")


def _runtimes():
    for name, p in PRESETS.items():
        for c in CONFIGS:
            t = trace_mp(c, p)
            if t.selected:
                yield name, c, t


def test_every_selection_has_a_runtime_that_renders_and_cites_vllm():
    seen = set()
    for name, c, t in _runtimes():
        rt = t.runtime_detail
        assert rt is not None and rt.method == t.selected, (name, c)
        assert rt.activation in ACTIVATIONS and SOURCE.match(rt.source), rt
        assert (rt.fails_at is None) == (rt.error is None) == (rt.error_type is None)
        assert t.runtime == describe_runtime(rt) and t.runtime
        out = t.to_json()
        assert out["runtime_detail"] == rt.to_json() and out["vllm_version"] == DEFAULT_VERSION
        seen.add(t.selected)
    assert len(seen) >= 8  # Humming, Machete, Marlin, Cutlass, XPU x2, Dynamic4bit, CPUWNA16, ...


def test_cited_lines_exist_in_the_sdist():
    """The traced release's own sdist (find_sdist): a citation is of that release's lines."""
    from workbench.recorder.sdist import find_sdist

    src = find_sdist(DEFAULT_VERSION)
    if src is None:
        pytest.skip(f"no unpacked vLLM {DEFAULT_VERSION} sdist at hand (WORKBENCH_VLLM_SRC or "
                    "WORKBENCH_VLLM_SDISTS)")
    for _, _, t in _runtimes():
        path, _, line = t.runtime_detail.source.partition(":")
        lines = (src / "vllm" / path).read_text().splitlines()
        assert not line or int(line) <= len(lines), t.runtime_detail.source


def test_cpuwna16_isa_hint_and_builds_without_the_op():
    c = {**CONFIGS[0], "weight_type": "uint4b8"}
    assert trace_mp(c, "x86-avx512").runtime_detail.isa_hint == "vec"
    assert trace_mp(c, "powerpc").runtime_detail.isa_hint == "vsx"
    assert trace_mp({**c, "act_type": "float16"}, "x86-spr-amx").runtime_detail.isa_hint == "vec"
    arm = trace_mp(c, "arm-no-dyn-quant").runtime_detail
    assert (arm.fails_at, arm.error_type, arm.error) == (
        "forward", "AttributeError", "'_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'")
    assert trace_mp(c, "x86-avx2").runtime_detail.fails_at == "forward"  # the _C_AVX2 build


def test_dynamic4bit_says_which_implementation_runs():
    assert trace_mp(CONFIGS[0], "arm-kleidiai").runtime_detail.impl == "kleidiai"
    assert trace_mp(CONFIGS[0], "x86-avx512").runtime_detail.impl == "reference"


def test_every_level_carries_the_version_and_an_unknown_version_is_named():
    for t in (trace_mp(CONFIGS[0]), trace_inc({"bits": 4, "group_size": 128}),
              trace_scheme({"in_features": 64, "out_features": 64})):
        assert t.to_json()["vllm_version"] == DEFAULT_VERSION
    with pytest.raises(UnknownVersionError, match="no rule set for '0.1.0'; available: "):
        trace_mp(CONFIGS[0], rules="0.1.0")
    assert rules(DEFAULT_VERSION).VLLM_VERSION == DEFAULT_VERSION


GPTQ_LAYER = {"in_features": 4096, "out_features": 4096, "params_dtype": "float16",
              "layer_name": "model.layers.0.mlp.down_proj", "bits": 4, "group_size": 128,
              "sym": True, "desc_act": False}
INT8_INPUT = {"VLLM_MARLIN_INPUT_DTYPE": "int8"}


@pytest.mark.parametrize("zero_point, b_type", [(False, "uint4b8"), (True, "uint4")])
def test_machete_with_an_int8_act_type_fails_in_its_prepack(zero_point, b_type):
    # GPTQ/AWQ put VLLM_MARLIN_INPUT_DTYPE into act_type before selection; on an H200 Machete
    # admits it, and its prepack has no int8 layout (machete.py:66, generate.py:215-238).
    from workbench.dispatch import trace_awq, trace_gptq
    layer = ({k: v for k, v in GPTQ_LAYER.items() if k not in ("sym", "desc_act")}
             | {"zero_point": True} if zero_point else GPTQ_LAYER)
    t = (trace_awq if zero_point else trace_gptq)(layer, "sm90-h200", INT8_INPUT, rules=FIRST)
    rt = t.runtime_detail
    assert t.selected == "MacheteLinearKernel" and t.mp_config.act_type.name == "int8"
    assert (rt.fails_at, rt.error_type, rt.failing_op, rt.computes) == (
        "load", "RuntimeError", "_C.machete_prepack_B", "none")
    assert rt.error == ("NotImplementedError: prepack_B_dispatch(..) is not implemented for "
                        f"atype = Char, b_type = {b_type}, with_group_scales_type= Char")
    assert "<file>:<line>" in rt.caveat and t.to_json()["runtime_detail"]["caveat"] == rt.caveat
    assert "fails at weight loading" in t.runtime
    # without the variable Machete runs weight-only on the model's dtype, nothing uncertain
    plain = trace_gptq(GPTQ_LAYER, "sm90-h200", rules=FIRST).runtime_detail
    assert (plain.activation, plain.fails_at, plain.caveat) == ("fp16", None, None)


def test_conch_ignores_a_one_byte_act_type_and_runs_on_the_model_dtype():
    from workbench.dispatch import trace_gptq
    for params_dtype, act in (("float16", "fp16"), ("bfloat16", "bf16")):
        t = trace_gptq({**GPTQ_LAYER, "params_dtype": params_dtype}, "rocm-mi300x", INT8_INPUT,
                       rules=FIRST)
        rt = t.runtime_detail
        assert t.selected == "ConchLinearKernel" and t.mp_config.act_type.name == "int8"
        assert (rt.activation, rt.computes, rt.emulation, rt.caveat) == (
            act, "w4a16", "w4a16_fallback", None)
    # an MP config alone does not carry the model dtype: the assumption is stated
    c = {**CONFIGS[0], "weight_type": "uint4b8", "act_type": "int8"}
    rt = trace_mp(c, "rocm-mi300x", rules=FIRST).runtime_detail
    assert rt.method == "ConchLinearKernel" and rt.activation == "bf16" and "assumed" in rt.caveat


def test_a_checkpoint_layer_is_traced_with_the_version_asked_for():
    from workbench.checkpoints import trace_checkpoint_layer
    from workbench.paths import SAMPLE_ROOT

    path, layer = SAMPLE_ROOT / "ct-w4a8-int-g128", "model.layers.0.mlp.down_proj"
    assert trace_checkpoint_layer(path, layer, "sm80-a100").vllm_version == DEFAULT_VERSION
    with pytest.raises(UnknownVersionError, match="no rule set for '0.1.0'"):
        trace_checkpoint_layer(path, layer, "sm80-a100", version="0.1.0")


def test_a_listing_resolves_its_scheme_column_with_the_version_asked_for():
    from workbench.checkpoints import listing_rows, open_checkpoint
    from workbench.paths import SAMPLE_ROOT

    layers = open_checkpoint(SAMPLE_ROOT / "ct-w4a8-int-g128").layers[:1]
    assert listing_rows(layers, "sm80-a100", version=DEFAULT_VERSION)[0]["kernel"]
    row = listing_rows(layers, "sm80-a100", version="0.1.0")[0]  # a row's error, not a crash
    assert row["kernel"] is None and "no rule set for '0.1.0'" in row["error"]


def test_activation_is_a_str_enum_json_and_sentences_read_as_before():
    from workbench.dispatch.types import Activation, Runtime

    int8 = next(c for c in CONFIGS if c["weight_type"] == "int4" and c["act_type"] == "int8")
    rt = trace_mp(int8, "x86-avx512").runtime_detail
    assert rt.activation is Activation.INT8 and rt.to_json()["activation"] == "int8"
    assert type(rt.to_json()["activation"]) is str and "int8" in describe_runtime(rt)
    assert {"int8": 1}[rt.activation] == 1  # hashes as the bare name
    with pytest.raises(ValueError, match="Runtime.activation 'int3'"):
        Runtime("m", "int3", "w", "op", "x.py")


def test_awq_marlin_on_a_k_shard_of_a_channelwise_layer_fails_at_load_as_vllm_does():
    # Recorded from the pinned vLLM (seed 11 of the recorder's runtime draw): AutoAWQMarlinLinearMethod
    # gives a channelwise K shard 1792 // 3584 = 0 zero-point rows; Marlin unpacks one group.
    from workbench.dispatch import trace_awq

    layer = {"layer_name": "model.layers.3.mlp.gate_proj", "in_features": 3584, "out_features": 18944,
             "params_dtype": "bfloat16", "input_size_per_partition": 1792,
             "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": -1,
                                     "zero_point": True, "version": "gemm"}}
    plat = {"device": "cuda", "capability": 75}
    rt = trace_awq(layer, plat).runtime_detail
    assert (rt.method, rt.fails_at, rt.error_type) == ("MarlinLinearKernel", "load", "AssertionError")
    assert rt.error == "packed_q_w.shape = torch.Size([0, 2368]) size_k = 1, size_n = 18944 pack_Factor = 8"
    whole = trace_awq({**layer, "input_size_per_partition": 3584}, plat).runtime_detail
    assert whole.fails_at is None  # one zero-point row: the unsharded layer loads
