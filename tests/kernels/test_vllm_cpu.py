"""vLLM's own CPU int4 ops (w4a8_kernels.vllm_cpu), built from the pinned sdist and run here.

Everywhere: which CPU runs which op, where the sdist comes from, what a refusal says, and
that a crashing self-test becomes a named verdict. Where the ops are built and admitted (or
$W4A8_VLLM_SDIST / $WORKBENCH_VLLM_SRC lets this session build them, minutes the first time):
the ops against the float64 reference and against this project's emulation, awkward shapes
too, and the shapes vLLM's can_implement accepts but the op cannot compute.
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import textwrap

import pytest
import torch

from w4a8_kernels import vllm_cpu as V
from w4a8_kernels.engine_paths import prepare_int4_scaled_mm as prepare_emulation
from w4a8_kernels.engine_paths import vllm_int4_scaled_mm as emulation
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError
from w4a8_kernels.quant import dequantize_groupwise, quantize_per_token_uint8_zp128
from w4a8_kernels.reference import w4a8_reference_from_quantized, w4a16_reference
from w4a8_kernels.registry import Int4Weight, get_path

C_FLAGS = frozenset("avx2 fma avx512f avx512bw avx512vl avx512dq avx512_bf16 avx512_vnni".split())


# -- where each op runs (no build) -------------------------------------------------------

@pytest.mark.parametrize("flags,int4,wna16", [
    (C_FLAGS, "", ""),  # vLLM loads _C: both ops
    (C_FLAGS - {"avx512_bf16"}, "CPU lacks avx512_bf16", ""),  # _C_AVX512: cpu_gemm_wna16 only
    (frozenset({"avx2", "fma"}), "CPU lacks avx512f", "_C_AVX2 has no cpu_gemm_wna16"),
])
def test_which_library_vllm_loads_decides_which_op_exists(monkeypatch, flags, int4, wna16):
    monkeypatch.setattr(V, "cpu_flags", lambda: flags)
    monkeypatch.setattr(V.platform, "machine", lambda: "x86_64")
    monkeypatch.delenv("W4A8_KERNELS_MAX_ISA", raising=False)
    for kernel, want in (("int4_scaled_mm", int4), ("cpu_gemm_wna16", wna16)):
        got = V.cpu_requirement(kernel)
        assert (want in got) if want else got == ""
        if want:  # the path's probe says the same, by name
            path = get_path(f"vllm_{kernel}")
            assert path.probe() == (False, got)


def test_the_isa_cap_and_other_architectures_are_named(monkeypatch):
    monkeypatch.setattr(V, "cpu_flags", lambda: C_FLAGS)
    monkeypatch.setenv("W4A8_KERNELS_MAX_ISA", "avx2")
    assert "_C_AVX2" in V.cpu_requirement("cpu_gemm_wna16")
    monkeypatch.delenv("W4A8_KERNELS_MAX_ISA")
    monkeypatch.setattr(V.platform, "machine", lambda: "aarch64")
    assert "x86-64 only" in V.cpu_requirement("int4_scaled_mm")
    assert "x86-64 only" in get_path("vllm_int4_scaled_mm").probe()[1]
    with pytest.raises(KernelInputError, match="unknown vLLM CPU kernel"):
        V.cpu_requirement("int8_scaled_mm")


def test_a_bad_sdist_is_refused_by_name(monkeypatch, tmp_path):
    monkeypatch.delenv(V.SRC_ENV, raising=False)
    monkeypatch.setenv(V.SDIST_ENV, str(tmp_path / "missing.tar.gz"))
    assert V.locate_sdist() == (None, f"{V.SDIST_ENV} or {V.SRC_ENV} = {tmp_path / 'missing.tar.gz'}: "
                                      "no such file or folder")
    monkeypatch.setenv(V.SDIST_ENV, str(tmp_path))
    assert "holds no vLLM sources" in V.locate_sdist()[1]
    # a folder of other sources (another release, or edited ones)
    src = tmp_path / "vllm-other"
    (src / "csrc" / "cpu" / "sgl-kernels").mkdir(parents=True)
    (src / "csrc" / "cpu" / "sgl-kernels" / "gemm_int4.cpp").write_text("")
    (src / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: vllm\nVersion: 9.9.9\n")
    assert "holds vLLM 9.9.9 sources that are not the pinned release's" in V.locate_sdist()[1]
    # a tarball that is not the pinned sdist: its digest is named
    tarball = tmp_path / "vllm-other.tar.gz"
    with tarfile.open(tarball, "w:gz") as tf:
        data = b"not vllm"
        info = tarfile.TarInfo("vllm-other/PKG-INFO")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    monkeypatch.setenv(V.SDIST_ENV, str(tarball))
    monkeypatch.setenv("W4A8_WORKBENCH_CACHE", str(tmp_path / "cache"))
    assert V.locate_sdist() == (tarball, "")
    with pytest.raises(KernelUnavailableError, match="is not the pinned vLLM sdist: sha256"):
        V.sdist_root()


@pytest.mark.skipif(not os.environ.get(V.SDIST_ENV) and not os.environ.get(V.SRC_ENV),
                    reason="no vLLM sdist at hand ($W4A8_VLLM_SDIST or $WORKBENCH_VLLM_SRC)")
def test_the_pinned_sources_are_the_ones_at_hand():
    """The pinned digest of the sources is the one of the pinned release's sdist."""
    root = V.sdist_root()
    assert V._sources_digest(root) == V.SOURCES_SHA256


def test_can_implement_and_the_ops_own_limits_are_named():
    # CPUWNA16LinearKernel.can_implement (cpu.py:28-58), byte for byte
    assert V.layer_refused(64, 100, -1) == ("Input size (100) not supported by CPUWNA16, "
                                            "supported sizes are multiples of 32")
    assert V.layer_refused(48, 64, -1) == ("Output size (48) not supported by CPUWNA16, "
                                           "supported sizes are multiples of 32")
    assert "Group size (3)" in V.layer_refused(64, 96, 3)
    # accepted by can_implement, beyond what int4_scaled_mm_cpu computes (measured below)
    for k, g in ((160, -1), (384, 192), (64, 2), (96, 6)):
        assert V.layer_refused(32, k, g) is None
        assert V.op_refused("int4_scaled_mm", 32, k, g)
        assert V.op_refused("cpu_gemm_wna16", 32, k, g) is None
    for k, g in ((96, -1), (640, -1), (384, 128), (768, 384), (96, 12), (64, 4)):
        assert V.op_refused("int4_scaled_mm", 32, k, g) is None
    w = Int4Weight(torch.zeros(32, 160, dtype=torch.int8), torch.ones(32, 1), -1)
    ok, why = get_path("vllm_int4_scaled_mm").supports(w)
    assert not ok and "fails at load" in why
    with pytest.raises(KernelInputError, match="blocks K by 128"):
        V.prepare_int4_scaled_mm(w.w_q, w.scales, -1)


def test_vllms_int32_packing_is_reproduced():
    """quant_utils.py's pack/unpack along either dim, against this project's GPTQ packers."""
    from w4a8_kernels.packing import pack_int4_gptq, pack_int4_gptq_zeros
    gen = torch.Generator().manual_seed(3)
    u = torch.randint(0, 16, (64, 96), generator=gen, dtype=torch.int8)  # [N, K]
    assert torch.equal(V._pack_int32(u.t().to(torch.int32), 0), pack_int4_gptq(u))
    assert torch.equal(V._pack_int32(u.to(torch.int32), 1), pack_int4_gptq_zeros(u.t().contiguous()))
    assert torch.equal(V._unpack_int32(pack_int4_gptq(u), 0), u.t().to(torch.int32))
    assert V._pack_int32(torch.full((1, 8), 8), 1).item() == V._FAKE_ZP  # 0x88888888


def test_a_crashing_self_test_is_a_named_verdict_and_the_process_goes_on(monkeypatch, tmp_path):
    monkeypatch.setattr(V, "cpu_requirement", lambda kernel: "")
    monkeypatch.setattr(V, "_current_tag", lambda kernel: None)  # nothing cached
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    monkeypatch.setattr(V, "_child_argv", lambda kernel: [sys.executable, "-c", crash])
    v = V.self_test("int4_scaled_mm")
    assert not v.ok and v.why == "vllm int4_scaled_mm: self-test died with SIGSEGV"
    hang = "import time; time.sleep(30)"
    monkeypatch.setattr(V, "_child_argv", lambda kernel: [sys.executable, "-c", hang])
    v = V.self_test("cpu_gemm_wna16", timeout_s=1)
    assert not v.ok and "self-test hung" in v.why
    wrong = 'import json; print(json.dumps({"ok": False, "why": "wrong numbers at M=1", "tag": "", "checks": []}))'
    monkeypatch.setattr(V, "_child_argv", lambda kernel: [sys.executable, "-c", wrong])
    assert V.self_test("int4_scaled_mm").why == "wrong numbers at M=1"
    monkeypatch.setattr(V, "_LOADED", {})
    with pytest.raises(KernelUnavailableError, match="wrong numbers at M=1"):
        V._admit("int4_scaled_mm")


# -- the ops themselves ------------------------------------------------------------------

def _needs(kernel: str):
    """Runs where the op is built, or can be from an sdist at hand (minutes, once); the probe
    says why not elsewhere (no AVX-512, no sdist: CI on a clean clone fetches nothing)."""
    ok, why = V.probe(kernel)
    return pytest.mark.skipif(not ok, reason=why)


needs_int4 = _needs("int4_scaled_mm")
needs_wna16 = _needs("cpu_gemm_wna16")


def _layer(n, k, g, asym, seed=0, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(seed)
    gg = k if g == -1 else g
    w_q = (torch.randint(0, 16, (n, k), generator=gen) if asym
           else torch.randint(-8, 8, (n, k), generator=gen)).to(torch.int8)
    zeros = torch.randint(0, 16, (n, k // gg), generator=gen).to(torch.int8) if asym else None
    # scales the model's dtype holds exactly: the reference reads what the op reads
    scales = (torch.rand(n, k // gg, generator=gen) * 0.02 + 0.001).to(dtype).float()
    return w_q, scales, zeros


def _ulp(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The last place of `dtype` at |ref| (float64)."""
    bits = 8 if dtype == torch.bfloat16 else 11  # significant bits
    e = torch.floor(torch.log2(ref.double().abs().clamp_min(1e-30)))
    return torch.pow(2.0, e - (bits - 1))


@needs_int4
def test_int4_scaled_mm_self_test_passes_here():
    v = V.self_test("int4_scaled_mm")
    assert v.ok, v.why
    assert len(v.checks) == 24  # M 1, 4 (AVX-512 VNNI kernel), 5, 33 (brgemm) x 3 layers x 2 dtypes


INT4_SHAPES = [  # (M, N, K, group, asym): small-M kernel (M <= 4) and brgemm (M > 4),
    (1, 32, 32, -1, False),  # the smallest layer CPUWNA16 takes
    (3, 96, 96, -1, True),  # per-channel K under 128: one block of 96
    (4, 64, 640, -1, False),  # per-channel K = 5 blocks of 128
    (5, 64, 256, 32, True),
    (17, 160, 384, 384, False),  # group over 128: 3 blocks a group
    (33, 64, 192, 12, True),  # group of 12: blocks of 12
    (129, 32, 128, 64, False),  # M > 128: the op splits M over threads
    (200, 96, 256, 128, True),
]


@needs_int4
@pytest.mark.parametrize("m,n,k,g,asym", INT4_SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_int4_scaled_mm_against_the_float64_reference_and_the_emulation(m, n, k, g, asym, dtype):
    w_q, scales, zeros = _layer(n, k, g, asym, seed=m)
    bias = torch.randn(n, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16).float()
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(k)).to(dtype)
    out = V.int4_scaled_mm(x, V.prepare_int4_scaled_mm(w_q, scales, g, zeros, bias))
    assert out.dtype == dtype and out.shape == (m, n)
    x_u8, x_s = quantize_per_token_uint8_zp128(x)
    ref = w4a8_reference_from_quantized((x_u8.to(torch.int16) - 128).to(torch.int8), x_s,
                                        w_q, scales, g, zeros) + bias.double()
    # one rounding of the float32 sum to x's dtype: within half an ulp, plus float32's
    # accumulation over the K blocks (a few ulps of float32, relative to the largest output)
    acc = ref.abs().max() * 2.0 ** -18
    assert bool(((out.double() - ref).abs() <= 0.5 * _ulp(ref, dtype) + acc).all())
    # the emulation quantizes to the same codes and rounds its own float32 sum once: within an
    # ulp of the op (compared without the bias, which the emulation does not take)
    plain = V.int4_scaled_mm(x, V.prepare_int4_scaled_mm(w_q, scales, g, zeros)).double()
    emu = emulation(x, prepare_emulation(w_q, scales, g, zeros)).double()
    assert bool(((plain - emu).abs() <= _ulp(emu, dtype) + acc).all())


@needs_int4
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_int4_scaled_mm_quantizes_activations_as_the_emulation_does(dtype):
    """A one-hot weight reads each activation's code back through the op: the codes of its
    vec.h quantizer are the emulation's, ties and the single-rounded 127 / amax included."""
    k = n = 32
    w_q = torch.eye(n, k, dtype=torch.int8)
    scales = torch.ones(n, 1)
    x = torch.tensor([[3.265625, 1.6328125, -1.6328125, 0.5, -0.5, 2.5 * 3.265625 / 127,
                       -2.5 * 3.265625 / 127, 0.0] * 4]).to(dtype)
    x = torch.cat([x, torch.randn(7, k, generator=torch.Generator().manual_seed(5)).to(dtype)])
    out = V.int4_scaled_mm(x, V.prepare_int4_scaled_mm(w_q, scales, -1)).double()
    x_u8, x_s = quantize_per_token_uint8_zp128(x)
    codes = torch.round(out / x_s.double())  # exact for |codes| <= 127 in bf16 and fp16
    assert torch.equal(codes.to(torch.int16), x_u8.to(torch.int16) - 128)


@needs_int4
@pytest.mark.parametrize("k,g", [(160, -1), (384, 192), (64, 2), (96, 6)])
def test_the_layers_the_op_cannot_compute_fail_when_forced(k, g):
    """What op_refused names, measured on the op in a child process (a read past the
    layer's end may crash): an error at load, or numbers nowhere near the reference."""
    code = textwrap.dedent(f"""
        import torch
        from w4a8_kernels import vllm_cpu as V
        from w4a8_kernels.reference import w4a8_reference_from_quantized
        from w4a8_kernels.quant import quantize_per_token_uint8_zp128
        V.op_refused = lambda *a: None  # force the layer through
        gen = torch.Generator().manual_seed(0)
        gg = {k} if {g} == -1 else {g}
        w = torch.randint(-8, 8, (32, {k}), generator=gen).to(torch.int8)
        s = (torch.rand(32, {k} // gg, generator=gen) * 0.02 + 0.001).to(torch.bfloat16).float()
        x = torch.randn(8, {k}, generator=gen).to(torch.bfloat16)
        try:
            out = V.int4_scaled_mm(x, V.prepare_int4_scaled_mm(w, s, {g}))
        except RuntimeError as exc:
            print("error", str(exc).splitlines()[0]); raise SystemExit(0)
        u, xs = quantize_per_token_uint8_zp128(x)
        ref = w4a8_reference_from_quantized((u.to(torch.int16) - 128).to(torch.int8), xs, w, s, {g})
        print("rel", float((out.double() - ref).norm() / ref.norm()))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    if proc.returncode < 0:
        return  # the op crashed: refused rightly
    words = proc.stdout.split()
    assert words, proc.stderr[-500:]
    if words[0] == "rel":
        rel = float(words[1])
        assert not rel < 0.5, f"the op computed k={k} g={g} after all (rel {rel})"
    else:
        assert words[0] == "error" and g == -1


@needs_wna16
def test_cpu_gemm_wna16_self_test_passes_here():
    v = V.self_test("cpu_gemm_wna16")
    assert v.ok, v.why


WNA16_SHAPES = [(1, 32, 32, -1, False), (3, 96, 160, -1, True), (7, 64, 384, 192, True),
                (16, 32, 64, 2, False), (40, 128, 256, 128, True), (130, 64, 96, 6, False)]


@needs_wna16
@pytest.mark.parametrize("m,n,k,g,asym", WNA16_SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cpu_gemm_wna16_against_the_float64_reference(m, n, k, g, asym, dtype):
    w_q, scales, zeros = _layer(n, k, g, asym, seed=m, dtype=dtype)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(k)).to(dtype)
    h = V.prepare_cpu_gemm_wna16(w_q, scales, g, zeros, dtype=dtype)
    assert h.isa_hint == V.isa_hint(dtype)
    out = V.cpu_gemm_wna16(x, h)
    assert out.dtype == dtype and out.shape == (m, n)
    ref = w4a16_reference(x, w_q, scales, g, zeros)
    # Dequantizer4b rounds each (w - z) * s to x's dtype, then the GEMM sums in float32 and
    # rounds once: |err| <= half an ulp of the output + half an ulp of every weight's product
    half = 2.0 ** (-9 if dtype == torch.bfloat16 else -12)
    w_abs = dequantize_groupwise(w_q, scales, g, zeros, dtype=torch.float64).abs()
    bound = (ref.abs() + x.double().abs() @ w_abs.t()) * 2 * half + ref.abs().max() * 2.0 ** -18
    assert bool(((out.double() - ref).abs() <= bound).all())


@needs_wna16
def test_cpu_gemm_wna16_rounds_the_dequantized_weight_to_the_model_dtype():
    """The op's W4A16 is bf16 weights x bf16 activations: a scale bf16 cannot hold exactly
    is rounded before the product (what sets it apart from the float64 W4A16 reference)."""
    n = k = 32
    w_q = torch.full((n, k), 7, dtype=torch.int8)
    scales = torch.full((n, 1), 1.0 / 3.0)
    x = torch.zeros(1, k, dtype=torch.bfloat16)
    x[0, 0] = 1.0
    out = V.cpu_gemm_wna16(x, V.prepare_cpu_gemm_wna16(w_q, scales, -1))
    s16 = torch.tensor(1.0 / 3.0).to(torch.bfloat16).float()
    assert out[0, 0].item() == (7 * s16).to(torch.bfloat16).item()


def test_the_registered_paths_say_what_they_are():
    i4, wna16, emu = (get_path(p) for p in ("vllm_int4_scaled_mm", "vllm_cpu_gemm_wna16",
                                            "vllm_int4_scaled_mm_emulated"))
    assert (i4.computes, wna16.computes, emu.computes) == ("w4a8", "w4a16", "w4a8")
    assert not i4.emulated and not wna16.emulated and emu.emulated
    assert i4.adds_bias and wna16.adds_bias and i4.jit and wna16.jit
    for path, kernel in ((i4, "int4_scaled_mm"), (wna16, "cpu_gemm_wna16")):
        ok, why = path.probe()
        assert why, "a probe always says what it found (built, to be built, or why not)"
        if V.cpu_requirement(kernel):
            assert (ok, why) == (False, V.cpu_requirement(kernel))
        elif V.admitted(kernel):
            assert ok and why.startswith("vLLM's own op, built from its sdist, self-test passed")
            assert ("selects it only with AMX" in why) == (
                kernel == "int4_scaled_mm" and "amx_tile" not in V.cpu_flags())
