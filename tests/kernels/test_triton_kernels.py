"""Triton W4A8 / W4A16 kernels against the float64 references of kernels.reference.

On a CUDA machine the kernels run on the GPU. Elsewhere they run in Triton's CPU
interpreter (TRITON_INTERPRET=1, set by the fixture below), which computes int8 and fp16
dots exactly but has two gaps, each handled where it matters:
- it truncates float32 -> bf16 instead of rounding to nearest, so a bf16 output is
  held to one bf16 ulp there and to half an ulp on a GPU;
- it cannot run a bf16 `tl.dot` (bf16 is stored as raw uint16), so W4A16 with bf16
  activations runs on a GPU only.

Error bound for out vs the float64 reference, per element:
    |out - ref| <= u * |ref| + (u_w + K * 2**-24) * (|x| @ |W|^T)
u: unit roundoff of the output dtype (output rounding); u_w: rounding of dequantized
weights (W4A16, where the scale and then q * scale are rounded to x's dtype: 2 * u / 2);
K * 2**-24: float32 accumulation. W4A8's int32 group dots are exact: no weight term.
"""
from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

ON_GPU = torch.cuda.is_available()
# The interpreter must be chosen before triton is first imported: triton.language's own
# @jit helpers are bound to compiler or interpreter at that moment.
_ENV_BEFORE = os.environ.get("TRITON_INTERPRET")
if not ON_GPU:
    if "triton.language" in sys.modules and _ENV_BEFORE in (None, "", "0"):
        pytest.skip("triton was imported before TRITON_INTERPRET=1 could be set; run these "
                    "tests in their own pytest process", allow_module_level=True)
    os.environ["TRITON_INTERPRET"] = "1"
triton = pytest.importorskip("triton", reason="triton not installed (pip install triton)")

from w4a8_kernels.errors import KernelInputError  # noqa: E402
from w4a8_kernels.quant import dequantize_groupwise, quantize_per_token_int8  # noqa: E402
from w4a8_kernels.reference import w4a16_reference, w4a8_reference  # noqa: E402
from w4a8_kernels.triton_pack import pack_half_split, unpack_half_split  # noqa: E402
from w4a8_kernels.triton_runtime import TileConfig, triton_available  # noqa: E402

DEVICE = "cuda" if ON_GPU else "cpu"
U = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


@pytest.fixture(scope="module", autouse=True)
def triton_backend():
    """GPU when present, else the interpreter (set at import); restores the environment
    so later modules' availability probes see this machine as it is."""
    if not ON_GPU and "w4a8_kernels.triton_jit" in sys.modules:
        # @triton.jit picks interpreter or compiler when the module is imported.
        importlib.reload(sys.modules["w4a8_kernels.triton_jit"])
    yield
    if not ON_GPU:
        if _ENV_BEFORE is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = _ENV_BEFORE


def _api():
    from w4a8_kernels import triton_w4a8, triton_w4a16
    return triton_w4a8, triton_w4a16


def _dequant64(w_q, scales, g):
    return dequantize_groupwise(w_q, scales, g, dtype=torch.float64)


def assert_within_rounding(out, ref, x64, w64, u, u_w=0.0):
    """The per-element bound of the module docstring; reports the worst element."""
    assert out.shape == ref.shape
    out64 = out.detach().cpu().to(torch.float64)
    assert torch.isfinite(out64).all(), "output holds Inf/NaN (unwritten or overflowed)"
    k = w64.shape[1]
    budget = u * ref.abs() + (u_w + k * 2.0 ** -24) * (x64.abs() @ w64.abs().t())
    excess = (out64 - ref).abs() - budget
    worst = int(excess.argmax())
    i, j = divmod(worst, ref.shape[1])
    assert excess.max() <= 0, (
        f"out[{i}, {j}] = {out64[i, j].item()} vs reference {ref[i, j].item()}: error "
        f"{(out64[i, j] - ref[i, j]).abs().item():.3e} over budget {budget[i, j].item():.3e}")


# %% layout: pure torch, no triton launch

@pytest.mark.parametrize("n, k, g", [(8, 256, -1), (6, 320, 32), (5, 448, 64), (4, 768, 128),
                                     (3, 512, 256), (7, 100, -1)])
def test_half_split_layout_is_exact_and_documented(layer_factory, n, k, g):
    w_q, scales, _ = layer_factory(n, k, g)
    p = pack_half_split(w_q, scales, g)
    assert p.k_padded % (2 * max(128, g if g > 0 else 128)) == 0 and p.k_padded >= k
    half = p.k_padded // 2
    w_pad = torch.nn.functional.pad(w_q, (0, p.k_padded - k)).to(torch.int32)
    b = p.packed.to(torch.int32)
    # byte[n, j]: low nibble = w[n, j], high nibble (signed) = w[n, j + Kp/2]
    assert torch.equal(((b & 0xF) ^ 8) - 8, w_pad[:, :half])
    assert torch.equal(b >> 4, w_pad[:, half:])
    w_back, s_back = unpack_half_split(p)
    assert torch.equal(w_back, w_q)
    assert torch.equal(s_back, scales.reshape(n, -1).float())
    if g > 0:  # padding groups carry zero scales
        assert torch.all(p.scales[k // g:] == 0)


def test_pack_rejects_what_the_kernels_cannot_run(layer_factory):
    w_q, scales, zeros = layer_factory(4, 256, 128, asym=True)
    with pytest.raises(KernelInputError, match="symmetric"):
        pack_half_split(w_q, scales, 128, zeros)
    w_q, scales, _ = layer_factory(4, 256, 16)
    with pytest.raises(KernelInputError, match="group_size = 16"):
        pack_half_split(w_q, scales, 16)
    w_q, scales, _ = layer_factory(4, 256, 128)
    with pytest.raises(KernelInputError, match="outside int4"):
        pack_half_split(w_q * 2, scales, 128)


# %% kernels

def test_probe_answers_without_failing():
    ok, why = triton_available()
    assert ok and why


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_quantize_per_token_matches_reference_bit_for_bit(x_factory, dtype):
    w8, _ = _api()
    x = x_factory(9, 700, dtype=dtype)
    x[3] = 0  # all-zero row: the 1e-10 floor keeps it finite
    # Row 5: values whose exact x * 127 / amax is k + 0.5, the rounding ties.
    x[5] = torch.linspace(-2, 2, 700).to(dtype)
    x[5, :4] = torch.tensor([2.0, 1.0 / 127 * 2 * 63.5, -1.0 / 127 * 2 * 0.5, 0.0]).to(dtype)
    xq, xs = w8.quantize_per_token_int8_triton(x.to(DEVICE))
    rq, rs = quantize_per_token_int8(x)
    assert torch.equal(xq.cpu(), rq)
    assert torch.equal(xs.cpu(), rs)


# (M, N, K, g): odd M and N, K padded (320, 448, 100), each supported group size.
W4A8_CASES = [
    (5, 96, 512, -1), (3, 40, 100, -1), (17, 64, 512, 128), (6, 72, 320, 32),
    (9, 48, 448, 64), (4, 32, 512, 256),
]
CONFIGS = {
    "nt": TileConfig(16, 32, 64),
    "swap": TileConfig(16, 32, 64, swap_ab=True),
    "swap_split2": TileConfig(32, 16, 32, split_k=2, swap_ab=True),
    # kernel variants (TileConfig.variant): W4A8 grouped scaling one dot late (2); W4A16
    # integer dequant times the scale (bit 1), two accumulators (bit 2)
    "nt_v1": TileConfig(16, 32, 64, variant=1),
    "nt_v2": TileConfig(16, 32, 64, variant=2),
    "swap_v2_split2": TileConfig(32, 16, 32, split_k=2, swap_ab=True, variant=2),
    "nt_v3": TileConfig(16, 32, 64, variant=3),
}


def _for_group(cfg, packed):
    from dataclasses import replace
    return cfg if packed.per_channel else replace(cfg, block_k=packed.group_size)


@pytest.mark.parametrize("m, n, k, g", W4A8_CASES)
@pytest.mark.parametrize("cfg_name", ["nt", "swap", "swap_split2", "nt_v2", "swap_v2_split2"])
def test_w4a8_equals_reference_to_output_rounding(layer_factory, x_factory, m, n, k, g, cfg_name):
    w8, _ = _api()
    w_q, scales, _ = layer_factory(n, k, g, seed=m + n)
    x = x_factory(m, k, seed=k, dtype=torch.float16)
    packed = w8.prepare_w4a8(w_q, scales, g, device=DEVICE)
    cfg = _for_group(CONFIGS[cfg_name], packed)
    out = w8.w4a8_matmul(x.to(DEVICE), packed, torch.float16, config=cfg)
    ref = w4a8_reference(x, w_q, scales, g)
    x_q, x_s = quantize_per_token_int8(x)
    assert_within_rounding(out, ref, x_q.double() * x_s.double(), _dequant64(w_q, scales, g),
                           U[torch.float16])


@pytest.mark.parametrize("g", [-1, 128])
def test_w4a8_bf16_output(layer_factory, x_factory, g):
    w8, _ = _api()
    w_q, scales, _ = layer_factory(48, 512, g)
    x = x_factory(7, 512, dtype=torch.bfloat16)
    packed = w8.prepare_w4a8(w_q, scales, g, device=DEVICE)
    out = w8.w4a8_matmul(x.to(DEVICE), packed)
    assert out.dtype == torch.bfloat16
    ref = w4a8_reference(x, w_q, scales, g)
    x_q, x_s = quantize_per_token_int8(x)
    u = U[torch.bfloat16] if ON_GPU else 2 * U[torch.bfloat16]  # interpreter truncates
    assert_within_rounding(out, ref, x_q.double() * x_s.double(), _dequant64(w_q, scales, g), u)


def _bucket_ms(table):
    """One M inside each bucket of a config table: its m_max (the last bucket: one past)."""
    return [m_max if m_max is not None else table[-2][0] + 1 for m_max, _ in table]


def test_config_tables_are_ordered_and_end_open():
    w8, w16 = _api()
    from w4a8_kernels.triton_int8 import INT8_CONFIGS
    for table in (*w8.W4A8_CONFIGS.values(), *w16.W4A16_CONFIGS.values(), INT8_CONFIGS):
        bounds = [m for m, _ in table]
        assert bounds[-1] is None and bounds[:-1] == sorted(set(bounds[:-1]))
    from w4a8_kernels.triton_runtime import table_config
    with pytest.raises(KernelInputError, match="last bucket"):
        table_config(((16, TileConfig(16, 16, 16)),), 17)



def test_w4a16_variant_is_named_flags_held_as_an_int():
    _, w16 = _api()
    V = w16.W4A16Variant
    cfg = TileConfig(16, 16, 16, variant=V.INT_DQ | V.TWO_ACC)
    assert type(cfg.variant) is int and cfg.variant == 6 and "variant=6" in repr(cfg)
    assert V(cfg.variant) == V.INT_DQ | V.TWO_ACC and w16.INT_DQ is V.INT_DQ
    grouped_prefill = w16.W4A16_CONFIGS["group"][-1][1]
    assert V(grouped_prefill.variant) is V.SCALE_MUL

@pytest.mark.parametrize("g", [-1, 128])
def test_tuned_tables_compute_the_same_in_every_bucket(layer_factory, x_factory, g):
    """The default config of every M bucket, W4A8 and W4A16, per-channel and grouped.

    Pre-quantized activations for W4A8: the interpreter runs the quantizer a row at a time."""
    w8, w16 = _api()
    kind = "channel" if g == -1 else "group"
    w_q, scales, _ = layer_factory(40, 256, g)
    packed = w8.prepare_w4a8(w_q, scales, g, device=DEVICE)
    w64 = _dequant64(w_q, scales, g)
    for m in sorted(set(_bucket_ms(w8.W4A8_CONFIGS[kind]) + _bucket_ms(w16.W4A16_CONFIGS[kind]))):
        print(f"M = {m}: W4A8 {w8.w4a8_config(m, packed)}, W4A16 {w16.w4a16_config(m, packed)}")
        x = x_factory(m, 256, seed=m, dtype=torch.float16)
        x_q, x_s = quantize_per_token_int8(x)
        out = w8.w4a8_matmul_quantized(x_q.to(DEVICE), x_s.to(DEVICE), packed, torch.float16)
        assert_within_rounding(out, w4a8_reference(x, w_q, scales, g), x_q.double() * x_s.double(),
                               w64, U[torch.float16])
        out = w16.w4a16_matmul(x.to(DEVICE), packed)
        u = U[torch.float16]
        assert_within_rounding(out, w4a16_reference(x, w_q, scales, g), x.double(), w64, u, u_w=u)


@pytest.mark.parametrize("m, n, k, g", W4A8_CASES)
@pytest.mark.parametrize("cfg_name", ["nt", "swap", "swap_split2", "nt_v1", "swap_v2_split2", "nt_v3"])
def test_w4a16_equals_reference_to_rounding(layer_factory, x_factory, m, n, k, g, cfg_name):
    _, w16 = _api()
    w_q, scales, _ = layer_factory(n, k, g, seed=m + n)
    x = x_factory(m, k, seed=k, dtype=torch.float16)
    packed = w16.prepare_w4a16(w_q, scales, g, device=DEVICE)
    cfg = CONFIGS[cfg_name]
    if cfg.variant & 1 and packed.per_channel:  # the scale multiply is for grouped weights
        with pytest.raises(KernelInputError, match="is for grouped weights"):
            w16.w4a16_matmul(x.to(DEVICE), packed, config=cfg)
        return
    if cfg.variant & 1 and cfg.block_k > g:
        cfg = _for_group(cfg, packed)  # the scale multiply takes one group per step
    out = w16.w4a16_matmul(x.to(DEVICE), packed, config=cfg)
    assert out.dtype == torch.float16
    ref = w4a16_reference(x, w_q, scales, g)
    u = U[torch.float16]
    assert_within_rounding(out, ref, x.double(), _dequant64(w_q, scales, g), u, u_w=u)


@pytest.mark.parametrize("m, n, k", [(5, 96, 512), (3, 40, 100)])
@pytest.mark.parametrize("cfg_name", ["nt", "swap", "swap_split2"])
def test_w4a16_exact_integer_path_per_channel(layer_factory, x_factory, m, n, k, cfg_name):
    """int_dequant: integers into the dot, scale on the fp32 accumulator: no weight term."""
    _, w16 = _api()
    w_q, scales, _ = layer_factory(n, k, -1, seed=m + n)
    x = x_factory(m, k, seed=k, dtype=torch.float16)
    packed = w16.prepare_w4a16(w_q, scales, -1, device=DEVICE)
    out = w16.w4a16_matmul(x.to(DEVICE), packed, CONFIGS[cfg_name], int_dequant=True)
    ref = w4a16_reference(x, w_q, scales, -1)
    assert_within_rounding(out, ref, x.double(), _dequant64(w_q, scales, -1), U[torch.float16])


@pytest.mark.skipif(not ON_GPU, reason="the Triton interpreter cannot run a bf16 tl.dot")
@pytest.mark.parametrize("g", [-1, 64, 128])
def test_w4a16_bf16_on_gpu(layer_factory, x_factory, g):
    _, w16 = _api()
    w_q, scales, _ = layer_factory(96, 1024, g)
    x = x_factory(33, 1024, dtype=torch.bfloat16)
    packed = w16.prepare_w4a16(w_q, scales, g, device=DEVICE)
    out = w16.w4a16_matmul(x.to(DEVICE), packed)
    ref = w4a16_reference(x, w_q, scales, g)
    u = U[torch.bfloat16]
    assert_within_rounding(out, ref, x.double(), _dequant64(w_q, scales, g), u, u_w=u)


def test_split_k_is_deterministic_and_resets_its_counters(layer_factory, x_factory):
    w8, w16 = _api()
    w_q, scales, _ = layer_factory(24, 256, 32)
    x = x_factory(3, 256, dtype=torch.float16).to(DEVICE)
    packed = w8.prepare_w4a8(w_q, scales, 32, device=DEVICE)
    cfg = TileConfig(16, 16, 32, split_k=4, swap_ab=True)  # 4 K steps: one per split
    a = w8.w4a8_matmul(x, packed, config=cfg)
    b = w8.w4a8_matmul(x, packed, config=cfg)
    c = w16.w4a16_matmul(x, packed, config=cfg)
    d = w16.w4a16_matmul(x, packed, config=cfg)
    assert torch.equal(a, b) and torch.equal(c, d)
    from w4a8_kernels import triton_runtime
    locks = triton_runtime._LOCKS[torch.device(DEVICE) if DEVICE == "cpu" else a.device]
    assert int(locks.abs().sum()) == 0, "split-K counters were left non-zero"
    # The split result equals the unsplit one up to float32 summation order.
    e = w8.w4a8_matmul(x, packed, config=TileConfig(16, 16, 32, swap_ab=True))
    torch.testing.assert_close(a.float(), e.float(), rtol=2 ** -10, atol=1e-6)


def test_kernels_reject_bad_inputs_by_name(layer_factory):
    w8, w16 = _api()
    w_q, scales, _ = layer_factory(32, 256, 128)
    packed = w8.prepare_w4a8(w_q, scales, 128, device=DEVICE)
    with pytest.raises(KernelInputError, match="K = 256"):
        w8.w4a8_matmul(torch.zeros(2, 128, dtype=torch.float16, device=DEVICE), packed)
    with pytest.raises(KernelInputError, match="x has dtype"):
        w16.w4a16_matmul(torch.zeros(2, 256, dtype=torch.float32, device=DEVICE), packed)
    with pytest.raises(KernelInputError, match="block_k == 128"):
        w8.w4a8_matmul(torch.ones(2, 256, dtype=torch.float16, device=DEVICE), packed,
                       config=TileConfig(16, 32, 64))
    x_q = torch.ones(2, 256, dtype=torch.int8, device=DEVICE)
    with pytest.raises(KernelInputError, match="x_scale"):
        w8.w4a8_matmul_quantized(x_q, torch.ones(3, device=DEVICE), packed)
    with pytest.raises(KernelInputError, match="accepts 0 and 2"):
        w8.w4a8_matmul_quantized(x_q, torch.ones(2, device=DEVICE), packed,
                                 config=TileConfig(16, 32, 128, variant=1))
    with pytest.raises(KernelInputError, match="needs block_k <= group_size"):
        w16.w4a16_matmul(torch.ones(2, 256, dtype=torch.float16, device=DEVICE), packed,
                         config=TileConfig(16, 32, 256, variant=1))
    per_channel = w16.prepare_w4a16(*layer_factory(32, 256, -1)[:2], -1, device=DEVICE)
    with pytest.raises(KernelInputError, match="two accumulators"):
        w16.w4a16_matmul(torch.ones(2, 256, dtype=torch.float16, device=DEVICE), per_channel,
                         config=TileConfig(16, 32, 32, split_k=2, num_warps=8, variant=6))


# %% integer rescale (vLLM Marlin W4A8-int8 numerics)

def test_marlin_int_scales_follow_vllm_process_scales(layer_factory):
    """marlin_utils.py:544-548: s / s.max() * 4096 in the scales' dtype, rounded; the factor
    max / 4096 in float32."""
    from w4a8_kernels.triton_pack import marlin_int_scales
    _, scales, _ = layer_factory(16, 512, 128)
    for dt in (torch.bfloat16, torch.float16):
        s = scales.to(dt)
        int_s, factor = marlin_int_scales(scales, dt)
        assert torch.equal(int_s, (s / s.max() * 4096).round().float())
        assert int_s.max() == 4096 and factor == s.max().float().item() / 4096
    with pytest.raises(KernelInputError, match="scale_dtype"):
        marlin_int_scales(scales, torch.float32)
    with pytest.raises(KernelInputError, match="positive"):
        marlin_int_scales(-scales, torch.bfloat16)


@pytest.mark.parametrize("m, n, k, g", [(5, 40, 320, 32), (9, 48, 448, 64), (17, 64, 512, 128),
                                        (4, 32, 512, 256)])
@pytest.mark.parametrize("cfg_name", ["nt", "swap", "swap_split2"])
def test_w4a8_int_rescale_equals_its_emulation(layer_factory, x_factory, m, n, k, g, cfg_name):
    """Unsplit: bit for bit the int32 arithmetic of Marlin's W4A8-int8 path; split-K sums
    float32 partials, so there to float32 rounding of the partial sums."""
    w8, _ = _api()
    from w4a8_kernels.triton_pack import marlin_int_scales
    w_q, scales, _ = layer_factory(n, k, g, seed=m + n)
    x_q, x_s = quantize_per_token_int8(x_factory(m, k, seed=k, dtype=torch.float16))
    packed = w8.prepare_w4a8_int_rescale(w_q, scales, g, device=DEVICE)
    cfg = _for_group(CONFIGS[cfg_name], packed)
    out = w8.w4a8_matmul_quantized(x_q.to(DEVICE), x_s.to(DEVICE), packed, torch.float16, cfg)
    int_s, factor = marlin_int_scales(scales)
    emu = w8.w4a8_int_rescale_emulated(x_q, x_s, w_q, int_s, factor, g, torch.float16)
    if cfg.split_k == 1:
        assert torch.equal(out.cpu(), emu)
    else:
        torch.testing.assert_close(out.cpu().float(), emu.float(), rtol=2 ** -10, atol=1e-6)


def test_int_rescale_error_against_float64_reference(layer_factory, x_factory):
    """The integer scales (about 12 bits below max(s), rounded) add error the fp32 path does
    not have: measured here, and held well under a percent."""
    w8, _ = _api()
    from w4a8_kernels.triton_pack import marlin_int_scales
    w_q, scales, _ = layer_factory(64, 1024, 128)
    scales = scales.to(torch.bfloat16).float()  # the checkpoint's bf16 scales, for both paths
    x_q, x_s = quantize_per_token_int8(x_factory(8, 1024, dtype=torch.float16))
    ref = (x_q.double() * x_s.double()) @ _dequant64(w_q, scales, 128).t()
    int_s, factor = marlin_int_scales(scales)
    emu = w8.w4a8_int_rescale_emulated(x_q, x_s, w_q, int_s, factor, 128, torch.float32)
    rel = ((emu.double() - ref).norm() / ref.norm()).item()
    assert 1e-6 < rel < 5e-3, rel  # nonzero: the integer scales are not the checkpoint's


def test_int_rescale_weight_is_refused_where_it_does_not_apply(layer_factory):
    w8, w16 = _api()
    w_q, scales, _ = layer_factory(32, 256, -1)
    with pytest.raises(KernelInputError, match="grouped weights"):
        w8.prepare_w4a8_int_rescale(w_q, scales, -1)
    w_q, scales, _ = layer_factory(32, 256, 128)
    packed = w8.prepare_w4a8_int_rescale(w_q, scales, 128, device=DEVICE)
    with pytest.raises(KernelInputError, match="only the W4A8 kernel"):
        w16.w4a16_matmul(torch.ones(2, 256, dtype=torch.float16, device=DEVICE), packed)
