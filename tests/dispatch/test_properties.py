"""Properties that hold for every MP config on every platform (hypothesis)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.dispatch import trace_mp
from workbench.dispatch.versions import rules
from workbench.platforms import PRESETS

ERROR_HEADER = rules().ERROR_HEADER

configs = st.fixed_dictionaries({
    "weight_type": st.sampled_from(["int4", "uint4b8", "uint4", "uint8b128", "uint8", "int8",
                                    "float8_e4m3fn", "uint2b2", "uint3b4"]),
    "act_type": st.sampled_from(["bfloat16", "float16", "float32", "int8", "float8_e4m3fn"]),
    "group_size": st.sampled_from([-1, 16, 32, 64, 96, 128, 256, 512]),
    "zero_points": st.booleans(),
    "out_type": st.sampled_from([None, "bfloat16", "float16"]),
    "full_weight_shape": st.tuples(st.integers(1, 40000), st.integers(1, 40000)).map(list),
})
envs = st.sampled_from([{}, {"linear_backend": "marlin"}, {"linear_backend": "humming"},
                        {"VLLM_DISABLED_KERNELS": "MarlinLinearKernel,HummingLinearKernel"},
                        {"linear_backend_per_quant": {"mixed_precision": "triton"}}])


@settings(max_examples=300, deadline=None)
@given(cfg=configs, tp=st.sampled_from([1, 2, 4, 8]), row=st.booleans(),
       preset=st.sampled_from(sorted(PRESETS)), env=envs)
def test_trace_ends_in_one_kernel_or_one_reason_per_evaluated_kernel(cfg, tp, row, preset, env):
    k, n = cfg["full_weight_shape"]  # cut to a multiple of tp: vLLM's divide() asserts it
    k, n = (max(tp, k - k % tp), n) if row else (k, max(tp, n - n % tp))
    part = [k // tp, n] if row else [k, n // tp]
    t = trace_mp({**cfg, "full_weight_shape": [k, n], "partition_weight_shape": part}, preset, env)
    selected = [s for s in t.steps if s.outcome == "selected"]
    if t.selected is not None:
        assert len(selected) == 1 and t.steps[-1].kernel == t.selected and t.error is None
        assert len(t.reasons) == len(t.steps) - 1
        assert t.candidates.index(t.selected) == len(t.steps) - 1  # nothing after it was tried
    else:
        assert selected == [] and t.error_type == "ValueError"
        assert len(t.reasons) == len(t.steps) == len(t.candidates)
        assert t.error == ERROR_HEADER + "\n".join(t.reasons)
    for s, r in zip(t.steps, t.reasons):
        assert s.kernel in r
        assert r.startswith(" ") == (s.outcome != "capability")
