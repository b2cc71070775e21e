"""vllm_humming: the layer the pinned vLLM builds for Humming, and what it computes.

Without a CUDA GPU and humming only the pieces that need neither run (the configs vLLM builds,
the checkpoint tensors, the probes); the GPU tests skip with a reason.
"""
from __future__ import annotations

import json
from importlib.util import find_spec

import pytest
import torch

from w4a8_kernels import registry
from w4a8_kernels.packing import unpack_int4_ct, unpack_int4_gptq_zeros
from w4a8_kernels.reference import w4a8_reference, w4a16_reference
from w4a8_kernels.vllm_humming import (PAD_K, PAD_N, _layer_tensors, humming_available,
                                       humming_compute_config, humming_quant_config,
                                       int8_input_quant_config)
from w4a8_kernels.vllm_machete import machete_available

HUMMING_OK, HUMMING_WHY = humming_available()
needs_humming = pytest.mark.skipif(not HUMMING_OK, reason=f"vllm_humming cannot run: {HUMMING_WHY}")
# Inside each of the M buckets the GPU kernels' heuristics switch at (as gpu_bench's CHECK_MS).
MS = [1, 16, 24, 48, 100, 200, 384, 1024, 4096]


def test_configs_are_the_ones_vllm_builds():
    # humming.py:50-61: "int" + size_bits, channelwise -1 -> 0
    assert humming_quant_config(-1, 4096, False) == {
        "quant_method": "humming", "dtype": "int4", "group_size": 0, "has_zero_point": False}
    assert humming_quant_config(4096, 4096, True)["group_size"] == 0
    assert humming_quant_config(128, 4096, True) == {
        "quant_method": "humming", "dtype": "int4", "group_size": 128, "has_zero_point": True}
    # compressed_tensors_wNa8.py:123-132
    assert int8_input_quant_config() == {
        "num_bits": 8, "type": "int", "strategy": "token", "symmetric": True, "dynamic": True,
        "group_size": 0, "quant_method": "compressed-tensors", "format": "int-quantized"}
    # utils/humming/linear.py:160-167 with vLLM's env defaults
    assert json.loads(humming_compute_config()) == {
        "use_batch_invariant": False, "use_f16_accum": False, "gemm_type": "dense"}
    assert (PAD_N, PAD_K) == (256, 128)  # linear.py:141-142


def test_layer_tensors_are_the_pack_quantized_checkpoint():
    gen = torch.Generator().manual_seed(0)
    n, k, g = 16, 256, 128
    w_q = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    s = torch.rand(n, k // g, generator=gen) + 0.01
    t = _layer_tensors(w_q, s, g, None, "cpu")
    assert set(t) == {"weight", "weight_scale"}
    assert t["weight"].dtype == torch.int32 and t["weight"].shape == (n, k // 8)
    assert torch.equal(unpack_int4_ct(t["weight"], k), w_q)  # u = q + 8, low nibble first
    assert t["weight_scale"].dtype == torch.bfloat16 and t["weight_scale"].shape == (n, k // g)
    u = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.int8)
    z = torch.randint(0, 16, (n, k // g), generator=gen, dtype=torch.int8)
    ta = _layer_tensors(u, s, g, z, "cpu")
    assert torch.equal(unpack_int4_ct(ta["weight"], k), (u.to(torch.int16) - 8).to(torch.int8))
    # compressed_tensors_wNa8.py:218-244: int32 [N / 8, G], packed along N
    assert ta["zero_point"].shape == (n // 8, k // g)
    assert torch.equal(unpack_int4_gptq_zeros(ta["zero_point"].t().contiguous()), z)


def test_cuda_paths_say_why_they_cannot_run_here():
    for name in ("vllm_humming", "vllm_humming_int8", "vllm_humming_int8_forced",
                 "vllm_machete", "cublas_bf16"):
        p = registry.get_path(name)
        ok, why = p.probe()
        assert p.device == "cuda"
        if not torch.cuda.is_available():
            assert (ok, why) == (False, "no CUDA device")
    if torch.cuda.is_available() and find_spec("humming") is None:
        assert "humming-kernels[cu13]==0.1.19" in humming_available()[1]
    if torch.cuda.is_available() and find_spec("w4a8_kernels.machete_lib") is None:
        assert "not in this build" in machete_available()[1]


def _weight(n, k, g, *, seed=0, lo=-8, zeros=False):
    gen = torch.Generator().manual_seed(seed)
    hi = 16 if zeros else 8
    w_q = torch.randint(0 if zeros else lo, hi, (n, k), generator=gen, dtype=torch.int8)
    ng = 1 if g == -1 else k // g
    s = (torch.rand(n, ng, generator=gen) * 0.02 + 0.001).bfloat16().float()
    z = torch.randint(0, 16, (n, ng), generator=gen, dtype=torch.int8) if zeros else None
    return w_q, s, z


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


@needs_humming
@pytest.mark.parametrize("g", [-1, 128])
@pytest.mark.parametrize("lo", [-8, -7], ids=["uint4", "q-in-7-7"])
def test_humming_w4a16_at_every_m_bucket(g, lo):
    """Against the float64 reference of the quantized layer and the float32 product (bf16
    output rounding bounds both). q in [-7, 7] is converted by humming to float4e0m3."""
    from w4a8_kernels.vllm_humming import humming_linear, prepare_humming

    n, k = 512, 1024
    w_q, s, _ = _weight(n, k, g, lo=lo)
    p = prepare_humming(w_q, s, g, activations="bf16")
    assert p.activation == "bf16"
    assert p.weight_format == ("float4e0m3" if lo == -7 else "uint4")
    w32 = (w_q.float().view(n, -1, k if g == -1 else g) * s.unsqueeze(-1)).reshape(n, k).cuda()
    for m in MS:
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).bfloat16()
        out = humming_linear(x.cuda(), p)
        assert out.shape == (m, n) and out.dtype == torch.bfloat16
        ref = w4a16_reference(x, w_q, s, g)
        assert _rel(out.cpu(), ref) < 8e-3, m
        f32 = (x.cuda().float() @ w32.t()).cpu().double()
        assert _rel(out.cpu(), f32) < 8e-3, m


@needs_humming
@pytest.mark.parametrize("lo", [-8, -7], ids=["uint4", "q-in-7-7"])
def test_humming_int8_per_channel_runs_int8_at_every_m_bucket(lo):
    from w4a8_kernels.vllm_humming import humming_linear, prepare_humming

    n, k = 512, 1024
    w_q, s, _ = _weight(n, k, -1, lo=lo)
    p = prepare_humming(w_q, s, -1, activations="int8")
    assert (p.requested, p.activation, p.vllm_path) == ("int8", "int8", True)
    for m in MS:
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).bfloat16()
        out = humming_linear(x.cuda(), p).cpu()
        assert _rel(out, w4a8_reference(x, w_q, s, -1)) < 1e-2, m
        assert _rel(out, w4a16_reference(x, w_q, s, -1)) < 2e-2, m


@needs_humming
def test_vllm_runs_grouped_int8_in_bf16_and_the_forced_path_does_not():
    """schema.py:354-357: int8 input with a groupwise weight falls back to bf16 activations;
    allow_fallback=False keeps int8 (not a vLLM path)."""
    from w4a8_kernels.vllm_humming import humming_linear, prepare_humming

    n, k, g = 512, 1024, 128
    w_q, s, _ = _weight(n, k, g)
    vllm = prepare_humming(w_q, s, g, activations="int8")
    forced = prepare_humming(w_q, s, g, activations="int8", allow_fallback=False)
    assert (vllm.activation, vllm.vllm_path) == ("bf16", True)
    assert any("replaced int8 activations with bf16" in n for n in vllm.notes)
    assert (forced.activation, forced.vllm_path) == ("int8", False)
    x = torch.randn(64, k, generator=torch.Generator().manual_seed(1)).bfloat16()
    assert _rel(humming_linear(x.cuda(), vllm).cpu(), w4a16_reference(x, w_q, s, g)) < 8e-3
    assert _rel(humming_linear(x.cuda(), forced).cpu(), w4a8_reference(x, w_q, s, g)) < 1e-2


@needs_humming
def test_humming_asymmetric_weights_w4a16():
    from w4a8_kernels.vllm_humming import humming_linear, prepare_humming

    n, k, g = 512, 1024, 128
    w_q, s, z = _weight(n, k, g, zeros=True)
    p = prepare_humming(w_q, s, g, z, activations="bf16")
    x = torch.randn(48, k, generator=torch.Generator().manual_seed(2)).bfloat16()
    assert _rel(humming_linear(x.cuda(), p).cpu(), w4a16_reference(x, w_q, s, g, z)) < 8e-3


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the probe imports humming")
def test_nothing_imports_humming_until_a_cuda_path_is_prepared():
    import subprocess
    import sys

    code = ("import sys, w4a8_kernels.registry, workbench.execution; "
            "from w4a8_kernels.registry import probe_all; probe_all(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('humming', 'triton')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stdout.strip()
    assert loaded == "[]", loaded
