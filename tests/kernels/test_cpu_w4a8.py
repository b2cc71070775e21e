"""W4A8 native against the float64 quantized reference, for every engine on this CPU."""
from __future__ import annotations

import pytest
import torch

from w4a8_kernels.cpu_w4a8 import prepare_w4a8, rank_engines, w4a8_native, w4a8_native_from_quantized
from w4a8_kernels.cpu_w4a8 import LARGE_M
from w4a8_kernels.int8_gemm import C_ENGINES, FP32_EXACT_MAX_TERMS, Int8Engine, engine_available
from w4a8_kernels.quant import quantize_per_token_int8
from w4a8_kernels.reference import w4a8_reference

ENGINES = [e for e in Int8Engine if engine_available(e)[0]]


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
@pytest.mark.parametrize("group_size", [-1, 32, 64, 128])
@pytest.mark.parametrize("m", [1, 7, 33])
def test_native_equals_quantized_reference(layer_factory, x_factory, engine, group_size, m):
    w_q, scales, _ = layer_factory(48, 256, group_size, seed=group_size + 11)
    x = x_factory(m, 256, seed=m)
    out = w4a8_native(x, prepare_w4a8(w_q, scales, group_size, engine=engine))
    assert out.dtype == torch.float32 and out.shape == (m, 48)
    assert rel(out, w4a8_reference(x, w_q, scales, group_size)) <= 1e-6


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
def test_native_asymmetric_odd_shapes_and_bf16_scales(layer_factory, x_factory, engine):
    # N not a multiple of 16, K not a multiple of 8, zeros, bf16 scales, bf16 activations
    w_q, scales, zeros = layer_factory(37, 68, 4, asym=True, scale_dtype=torch.bfloat16)
    x = x_factory(5, 68, dtype=torch.bfloat16)
    out = w4a8_native(x, prepare_w4a8(w_q, scales, 4, zeros, engine=engine))
    assert rel(out, w4a8_reference(x, w_q, scales, 4, zeros)) <= 1e-6


def test_auto_engine_and_group_size_not_multiple_of_four(layer_factory, x_factory):
    w_q, scales, _ = layer_factory(16, 36, 6)
    p = prepare_w4a8(w_q, scales, 6)
    assert p.engine is not Int8Engine.AVX2_U8S8  # needs g % 4 == 0: the next engine runs
    x = x_factory(3, 36)
    assert rel(w4a8_native(x, p), w4a8_reference(x, w_q, scales, 6)) <= 1e-6
    ranked = rank_engines(True)
    assert [name for name, _ in ranked] and all(t > 0 for _, t in ranked)


def test_extreme_codes_do_not_saturate(x_factory):
    # every code at +-127 against weights at -8 (and 15 - 0 with zeros): the largest
    # pair sums vpmaddubsw sees; int16 saturation would show up as a wrong result
    n, k = 32, 512
    w_q = torch.full((n, k), -8, dtype=torch.int8)
    scales = torch.ones(n, 4)
    x = torch.full((3, k), 5.0)
    x[1] = -5.0
    x[2, ::2] = -5.0
    for engine in ENGINES:
        out = w4a8_native(x, prepare_w4a8(w_q, scales, 128, engine=engine))
        assert torch.equal(out.double(), w4a8_reference(x, w_q, scales, 128).to(torch.float32).double())
    w_u = torch.full((n, k), 15, dtype=torch.int8)
    zeros = torch.zeros(n, 4, dtype=torch.int8)
    for engine in ENGINES:
        out = w4a8_native(x, prepare_w4a8(w_u, scales, 128, zeros, engine=engine))
        assert rel(out, w4a8_reference(x, w_u, scales, 128, zeros)) <= 1e-6


def test_fp32_exact_engine_chunks_long_dots():
    k = FP32_EXACT_MAX_TERMS + 136  # per-channel dot longer than one exact chunk
    k += (-k) % 8
    w_q = torch.full((8, k), 7, dtype=torch.int8)
    scales = torch.ones(8, 1)
    x = torch.full((2, k), 1.0)
    out = w4a8_native(x, prepare_w4a8(w_q, scales, -1, engine="fp32_exact"))
    assert out[0, 0].item() == 127 * 7 * k / 127.0 * 1.0 or rel(out, w4a8_reference(x, w_q, scales, -1)) <= 1e-6


def test_from_quantized_matches_full_call(layer_factory, x_factory):
    w_q, scales, _ = layer_factory(32, 128, 32)
    p = prepare_w4a8(w_q, scales, 32)
    x = x_factory(9, 128)
    x_q, x_s = quantize_per_token_int8(x)
    assert torch.equal(w4a8_native_from_quantized(x_q, x_s, p), w4a8_native(x, p))


def test_all_zero_rows_and_empty_batch(layer_factory):
    w_q, scales, _ = layer_factory(16, 64, 32)
    p = prepare_w4a8(w_q, scales, 32)
    x = torch.zeros(3, 64)
    x[1] = torch.linspace(-1, 1, 64)
    out = w4a8_native(x, p)
    assert torch.all(out[0] == 0) and torch.all(out[2] == 0) and torch.isfinite(out).all()
    assert w4a8_native(torch.empty(0, 64), p).shape == (0, 16)


def test_from_quantized_rejects_bad_codes(layer_factory):
    w_q, scales, _ = layer_factory(16, 64, 32)
    p = prepare_w4a8(w_q, scales, 32)
    from w4a8_kernels.errors import KernelInputError
    with pytest.raises(KernelInputError, match="int8"):
        w4a8_native_from_quantized(torch.zeros(2, 64), torch.ones(2, 1), p)
    with pytest.raises(KernelInputError, match="K = 63"):
        w4a8_native_from_quantized(torch.zeros(2, 63, dtype=torch.int8), torch.ones(2, 1), p)
    with pytest.raises(KernelInputError, match="x_scale"):
        w4a8_native_from_quantized(torch.zeros(2, 64, dtype=torch.int8), torch.ones(3, 1), p)


@pytest.mark.parametrize("variant", ["u4_avx2", "u4_vnni512"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("g, gp", [(777, 784), (7, 8), (111, 128)])
def test_c_quantizer_is_bit_exact_with_the_torch_one(variant, dtype, g, gp):
    # the one C quantizer every C engine takes its codes from: same codes and scales as
    # kernels.quant, each group placed at its padded offset, pads zero, exact group sums
    from w4a8_kernels import _native_lib
    from w4a8_kernels.quant import quantize_per_token_int8_codes
    if _native_lib.why_unavailable(variant):
        pytest.skip(_native_lib.why_unavailable(variant))
    lib = _native_lib.load(variant)
    gen = torch.Generator().manual_seed(11)
    x = (torch.randn(48, 777, generator=gen) * torch.logspace(-12, 4, 48).unsqueeze(1)).to(dtype)
    x[3] = 0
    x[5, ::2], x[5, 0] = 2.5, 127.0  # exact ties after scaling
    m, k = x.shape
    groups = k // g
    codes = torch.full((m, groups * gp), 99, dtype=torch.int8)
    codes.view(m, groups, gp)[:, :, g:] = 0
    asum, scale = torch.empty(m, groups, dtype=torch.int32), torch.empty(m)
    rc = lib.quantize(x.data_ptr(), int(dtype == torch.bfloat16), m, k, x.stride(0), g, gp,
                      codes.data_ptr(), codes.stride(0), asum.data_ptr(), scale.data_ptr())
    want, want_scale = quantize_per_token_int8_codes(x)
    got = codes.view(m, groups, gp)
    assert rc == 0 and torch.equal(scale, want_scale.reshape(-1))
    assert torch.equal(got[:, :, :g].reshape(m, k).float(), want)
    assert not got[:, :, g:].any()
    assert torch.equal(asum, want.view(m, groups, g).sum(-1).to(torch.int32))
    bad = torch.zeros(3, 8, dtype=dtype)
    bad[1, 2] = float("inf")
    keep, ks = torch.empty(3, 8, dtype=torch.int8), torch.empty(3, 1, dtype=torch.int32)
    assert lib.quantize(bad.data_ptr(), int(dtype == torch.bfloat16), 3, 8, 8, 8, 8, keep.data_ptr(), 8,
                        ks.data_ptr(), torch.empty(3).data_ptr()) == -2  # row 1


@pytest.mark.parametrize("variant", ["u4_avx2", "u4_vnni512"])
@pytest.mark.parametrize("g, gp", [(777, 784), (7, 8)])
def test_c_quantizer_without_group_sums(variant, g, gp):
    # asum NULL (the engines that read no sums): the same codes and scales, nothing else written
    from w4a8_kernels import _native_lib
    from w4a8_kernels.quant import quantize_per_token_int8_codes
    if _native_lib.why_unavailable(variant):
        pytest.skip(_native_lib.why_unavailable(variant))
    lib = _native_lib.load(variant)
    x = torch.randn(40, 777, generator=torch.Generator().manual_seed(3)) * 5
    m, k = x.shape
    codes, scale = torch.zeros(m, k // g * gp, dtype=torch.int8), torch.empty(m)
    assert lib.quantize(x.data_ptr(), 0, m, k, k, g, gp, codes.data_ptr(), codes.stride(0), None,
                        scale.data_ptr()) == 0
    want, want_scale = quantize_per_token_int8_codes(x)
    assert torch.equal(scale, want_scale.reshape(-1))
    assert torch.equal(codes.view(m, k // g, gp)[:, :, :g].reshape(m, k).float(), want)


@pytest.mark.parametrize("variant", ["u4_avx2", "u4_vnni512"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("threads", [1, 2])
def test_c_quantizer_over_threads_and_long_rows(variant, dtype, threads):
    # enough rows to split over threads, K past the 4096-float row buffer (bf16 rows then
    # widen into a heap copy): the torch quantizer's bits at every thread count, and the
    # first bad row is reported whichever thread meets it
    from w4a8_kernels import _native_lib
    from w4a8_kernels.quant import quantize_per_token_int8_codes
    if _native_lib.why_unavailable(variant):
        pytest.skip(_native_lib.why_unavailable(variant))
    lib = _native_lib.load(variant)
    m, k = 40, 4608
    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(5)) * 3).to(dtype)
    codes, asum, scale = torch.empty(m, k, dtype=torch.int8), torch.empty(m, 9, dtype=torch.int32), torch.empty(m)
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        args = (m, k, k, 512, 512, codes.data_ptr(), k, asum.data_ptr(), scale.data_ptr())
        rc = lib.quantize(x.data_ptr(), int(dtype == torch.bfloat16), *args)
        want, want_scale = quantize_per_token_int8_codes(x)
        assert rc == 0 and torch.equal(scale, want_scale.reshape(-1))
        assert torch.equal(codes.float(), want)
        assert torch.equal(asum, want.view(m, 9, 512).sum(-1).to(torch.int32))
        x[33, 100], x[7, 4600] = float("nan"), float("-inf")
        assert lib.quantize(x.data_ptr(), int(dtype == torch.bfloat16), *args) == -8  # row 7
    finally:
        torch.set_num_threads(prev)


@pytest.mark.parametrize("variant", ["u4_avx2", "u4_vnni512"])
@pytest.mark.parametrize("k", [64 * 3 + 5, 256, 29])
def test_c_quantizer_finds_the_row_max_and_bad_values_at_every_column(variant, k):
    # the |x| max runs in four vector chains and a scalar tail: row j's largest value sits at
    # column j, in each chain's lanes and the tail, and a NaN or Inf at any column is named
    from w4a8_kernels import _native_lib
    from w4a8_kernels.quant import quantize_per_token_int8_codes
    if _native_lib.why_unavailable(variant):
        pytest.skip(_native_lib.why_unavailable(variant))
    lib = _native_lib.load(variant)
    x = torch.rand(k, k, generator=torch.Generator().manual_seed(k)) - 0.5
    x.diagonal().copy_(torch.linspace(-3.0, 3.0, k) + torch.where(torch.arange(k) % 2 == 0, 4.0, -4.0))
    codes, scale = torch.empty(k, k, dtype=torch.int8), torch.empty(k)
    assert lib.quantize(x.data_ptr(), 0, k, k, k, k, k, codes.data_ptr(), k, None, scale.data_ptr()) == 0
    want, want_scale = quantize_per_token_int8_codes(x)
    assert torch.equal(scale, want_scale.reshape(-1)) and torch.equal(codes.float(), want)
    for j in range(k):
        row = torch.zeros(1, k)
        row[0, j] = float("nan") if j % 2 else float("-inf")
        assert lib.quantize(row.data_ptr(), 0, 1, k, k, k, k, codes.data_ptr(), k, None,
                            scale.data_ptr()) == -1, j


@pytest.mark.parametrize("variant", ["u4_avx2", "u4_vnni512"])
@pytest.mark.parametrize("k", [64 * 3 + 5, 29, 16 * 5 + 1])
def test_c_quantizer_widens_bf16_rows_of_any_length(variant, k):
    # bf16 rows widen to float32 a vector at a time and the rest in a scalar tail (K not a
    # multiple of the vector): the torch quantizer's bits either way
    from w4a8_kernels import _native_lib
    from w4a8_kernels.quant import quantize_per_token_int8_codes
    if _native_lib.why_unavailable(variant):
        pytest.skip(_native_lib.why_unavailable(variant))
    lib = _native_lib.load(variant)
    x = (torch.randn(7, k, generator=torch.Generator().manual_seed(k)) * 3).to(torch.bfloat16)
    x[:, -1] = torch.tensor([30.0, -30.0, 0.5, -0.25, 100.0, -3.0, 1e-3])  # rows 0, 1, 4: the max in the tail
    codes, scale = torch.empty(7, k, dtype=torch.int8), torch.empty(7)
    assert lib.quantize(x.data_ptr(), 1, 7, k, k, k, k, codes.data_ptr(), k, None, scale.data_ptr()) == 0
    want, want_scale = quantize_per_token_int8_codes(x)
    assert torch.equal(scale, want_scale.reshape(-1)) and torch.equal(codes.float(), want)


@pytest.mark.parametrize("engine", [e for e in ENGINES if e.value in C_ENGINES], ids=lambda e: e.value)
@pytest.mark.parametrize("threads", [1, 2])
def test_c_engines_over_row_blocks_and_threads(layer_factory, x_factory, engine, threads):
    # M = 301 rows at K = 4096 spans several of the kernel's row blocks (144 rows), with a
    # ragged last block and tile; N = 77 leaves a partial column tile for every thread
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for g in (-1, 128):
            w_q, scales, zeros = layer_factory(77, 4096, g, asym=g == 128, seed=3)
            x = x_factory(301, 4096, seed=4)
            out = w4a8_native(x, prepare_w4a8(w_q, scales, g, zeros, engine=engine))
            assert rel(out, w4a8_reference(x, w_q, scales, g, zeros)) <= 1e-6
    finally:
        torch.set_num_threads(prev)


def test_auto_runs_the_large_m_engine_from_large_m(layer_factory, x_factory):
    # where the decode and the many-token rankings differ (AMX hosts), calls of LARGE_M
    # tokens or more run the second engine on its own layout; both give the reference
    w_q, scales, zeros = layer_factory(48, 512, 128, asym=True, seed=5)
    p = prepare_w4a8(w_q, scales, 128, zeros)
    for m in (1, LARGE_M - 1, LARGE_M, 3 * LARGE_M + 5):
        x = x_factory(m, 512, seed=m)
        expected = p.large_m.engine if p.large_m is not None and m >= LARGE_M else p.engine
        assert p.engine_for(m) is expected
        assert rel(w4a8_native(x, p), w4a8_reference(x, w_q, scales, 128, zeros)) <= 1e-6
        x_q, x_scale = quantize_per_token_int8(x)
        assert rel(w4a8_native_from_quantized(x_q, x_scale, p), w4a8_reference(x, w_q, scales, 128, zeros)) <= 1e-6


def test_native_out_of_memory_is_named_with_the_shapes():
    # the guard's message is built only once the call fails: it still names the shapes
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import resource, torch
        from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native
        from w4a8_kernels.errors import KernelMemoryError
        p = prepare_w4a8(torch.ones(8192, 64, dtype=torch.int8), torch.ones(8192, 1), -1)
        x = torch.ones(100000, 64)
        vm = [l for l in open('/proc/self/status') if l.startswith('VmSize')][0].split()[1]
        resource.setrlimit(resource.RLIMIT_AS, (int(vm) * 1024 + 300 * 2**20, resource.RLIM_INFINITY))
        try:
            w4a8_native(x, p); print("no error")
        except KernelMemoryError as e:
            print("named:", e)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("named: out of memory running W4A8 on x (100000, 64) x a 8192 x 64"), proc.stdout


@pytest.mark.parametrize("k,g", [(1, -1), (2, -1), (7, -1), (9, -1), (16, 1), (9, 1)])
def test_int_mm_held_to_its_envelope_and_exact(monkeypatch, k, g):
    """torch._int_mm returned unset memory at K = 1 on oneDNN hosts: it only ever sees K >= 16,
    a multiple of 8 (zero-padded), and the int_mm engine and int8_mm path match float64."""
    import torch as _torch

    from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native
    from w4a8_kernels.reference import w4a8_reference
    from w4a8_kernels.registry import Int4Weight, get_path

    seen = []
    real = _torch._int_mm
    monkeypatch.setattr(_torch, "_int_mm", lambda a, b: seen.append(a.shape[1]) or real(a, b))
    gen = _torch.Generator().manual_seed(3)
    w = _torch.randint(-8, 8, (32, k), generator=gen, dtype=_torch.int8)
    gs = k if g == -1 else g
    s = _torch.rand(32, k // gs, generator=gen) + 0.1
    x = _torch.randn(5, k, generator=gen)
    ref = w4a8_reference(x, w, s, g)
    out = w4a8_native(x, prepare_w4a8(w, s, g, engine="int_mm"))
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-6
    if g == -1:
        path = get_path("int8_mm")
        prep = path.prepare(Int4Weight(w, s, g))
        inp = path.make_input(x, prep)
        out = path.finish(path.run(inp, prep), inp, prep)
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-6
    assert seen and all(kk >= 16 and kk % 8 == 0 for kk in seen), seen
