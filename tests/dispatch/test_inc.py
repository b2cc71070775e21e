"""INC / AutoRound resolution and the XPU backend table (vllm/model_executor/layers/quantization/inc/)."""
from __future__ import annotations

import pytest

from workbench.dispatch import trace_inc
from workbench.errors import InvalidInputError

LAYER = {"bits": 4, "group_size": 128, "sym": True, "in_features": 4096, "out_features": 4096,
         "layer_name": "model.layers.0.mlp.down_proj"}


@pytest.mark.parametrize("backend,method", [(None, "INCXPULinearMethod"),
                                            ("w4a16", "INCXPULinearMethod"),
                                            ("w4a8", "INCXPUW4A8LinearMethod")])
def test_xpu_backend_table(backend, method):
    env = {} if backend is None else {"VLLM_XPU_INC_WNA16_BACKEND": backend}
    t = trace_inc(LAYER, "xpu", env)
    assert t.selected == method and t.error is None


def test_w4a8_runtime_is_int8_above_512_tokens_with_fp16_scales():
    t = trace_inc({**LAYER, "scale_dtype": "bfloat16"}, "xpu", {"VLLM_XPU_INC_WNA16_BACKEND": "w4a8"})
    rt = t.runtime_detail
    assert (rt.activation, rt.min_tokens, rt.scale_dtype, rt.emulation) == (
        "int8", 512, "fp16", "inc_xpu_w4a8")
    assert rt.fallback_op == "torch.ops._xpu_C.int4_gemm_w4a16"


def test_w4a8_partition_must_be_multiple_of_8():
    t = trace_inc({**LAYER, "output_size_per_partition": 1052}, "xpu",
                  {"VLLM_XPU_INC_WNA16_BACKEND": "w4a8"})
    assert t.error_type == "NotImplementedError"
    assert t.error == ("VLLM_XPU_INC_WNA16_BACKEND=w4a8 requires partitioned in/out sizes that are "
                       "multiples of 8, got output=1052. Partition shape: (4096, 1052).")


def test_w4a8_needs_the_op_and_a_group_multiple_of_32():
    env = {"VLLM_XPU_INC_WNA16_BACKEND": "w4a8"}
    t = trace_inc(LAYER, {"preset": "xpu", "torch_ops": []}, env)
    assert "requires the int4_gemm_w4a8 op" in t.error
    t = trace_inc({**LAYER, "group_size": 48}, "xpu", env)
    assert "positive multiple of 32, got 48" in t.error


def test_invalid_backend_is_vllms_value_error():
    t = trace_inc(LAYER, "xpu", {"VLLM_XPU_INC_WNA16_BACKEND": "W4A8"})
    assert t.error_type == "ValueError"
    assert t.error == ("Invalid value 'W4A8' for VLLM_XPU_INC_WNA16_BACKEND. Valid options: "
                       "['auto', 'ark', 'w4a16', 'w4a8'].")


def test_int2_needs_ark_and_asym_is_unsupported_on_xpu():
    assert "requires the ARK backend" in trace_inc({**LAYER, "bits": 2}, "xpu").error
    assert trace_inc({**LAYER, "bits": 2}, {"preset": "xpu", "packages": ["auto_round_kernel"]}).selected == "INCARKLinearMethod"
    t = trace_inc({**LAYER, "sym": False}, "xpu")
    assert t.error.startswith("INC on XPU: unsupported config INCLayerConfig(bits=4, group_size=128, sym=False")


def test_cpu_gptq_goes_through_the_mp_loop():
    t = trace_inc(LAYER, "x86-avx512")
    assert t.mp_config is not None and str(t.mp_config.weight_type) == "uint4b8"
    assert t.selected == "CPUWNA16LinearKernel"


def test_cuda_low_bits_go_to_humming_and_4bit_to_the_mp_loop():
    assert trace_inc({**LAYER, "bits": 3}, "sm90-h200").selected == "HummingLinearMethod"
    assert trace_inc(LAYER, "sm90-h200").selected == "MacheteLinearKernel"


def test_bad_inc_input_is_named():
    with pytest.raises(InvalidInputError, match="inc.group_size"):
        trace_inc({**LAYER, "group_size": 0}, "xpu")
