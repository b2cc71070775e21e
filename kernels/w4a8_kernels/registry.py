"""Every runnable kernel path, by name, with its availability probe.

A path is prepared once per weight (`prepare`), fed activations made outside the timed
region (`make_input`), and run (`run`); `finish` turns a path's raw output into the
float32 [M, N] the metrics read (outside the timed region too). `probe()` says whether
the path can run on this machine at all, `supports(weight)` whether it can run this
layer; both return (ok, why), and a path that cannot run says why instead of failing.

vLLM's own CPU ops (`vllm_int4_scaled_mm`, `vllm_cpu_gemm_wna16`) are built from its sdist
when first prepared (w4a8_kernels.vllm_cpu) and admitted after a child-process self-test.

CUDA paths (`triton_w4a8`, `triton_w4a16`, `cublas_bf16`, and the kernels vLLM itself runs:
`vllm_humming*`, `vllm_machete`) are listed here for every machine; their probe answers "no
CUDA device" on a CPU host, and nothing imports triton or humming until one is prepared.

Paths whose policy is a dispatch rule (INC's per-call token threshold) are composed by the
caller that holds the rule, from the functions in `engine_paths`; they are not listed here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

import torch

from w4a8_kernels import cpu_dense, cpu_w4a8, cpu_w4a16, engine_paths
from w4a8_kernels._checks import check_weight
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError
from w4a8_kernels.cpu_w4a8 import rank_engines
from w4a8_kernels.int8_gemm import Int8Engine, engine_available, fbgemm_pack, int_mm
from w4a8_kernels.quant import (center_int4, dequantize_groupwise, quantize_per_token_int8,
                                quantize_per_token_int8_codes)

__all__ = ["Int4Weight", "Computes", "KernelPath", "PATHS", "get_path", "path_names", "probe_all"]


@dataclass(frozen=True, eq=False)
class Int4Weight:
    """One int4 layer in the project convention (see kernels.quant)."""

    w_q: torch.Tensor
    scales: torch.Tensor
    group_size: int
    zeros: torch.Tensor | None = None
    bias: torch.Tensor | None = None

    @property
    def n(self) -> int:
        return self.w_q.shape[0]

    @property
    def k(self) -> int:
        return self.w_q.shape[1]

    @property
    def effective_group(self) -> int:
        return self.k if self.group_size in (-1, self.k) else self.group_size


class Computes(str, Enum):
    """What a path computes: the quantized reference it is judged by (prints as its value)."""

    W4A8 = "w4a8"
    """int8 per-token activations x int4 weights, group scales applied: `reference.w4a8_reference`."""
    W4A16 = "w4a16"
    """16-bit activations x int4 weights dequantized: `reference.w4a16_reference`."""
    INT8 = "int8"
    """The integer GEMM alone on already-quantized operands (a speed bound; no group scales)."""
    DENSE = "dense"
    """A float GEMM on the dequantized weight (a baseline)."""

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__


def _always() -> tuple[bool, str]:
    return True, ""


def _any_layer(w: Int4Weight) -> tuple[bool, str]:
    return True, ""


def _identity(x: torch.Tensor, prepared: Any) -> torch.Tensor:
    return x


def _as_float(out: Any, inputs: Any, prepared: Any) -> torch.Tensor:
    return out.to(torch.float32)


@dataclass(frozen=True)
class KernelPath:
    """A named way to compute y = x W^T for an int4 layer on this machine."""

    name: str
    summary: str
    computes: Computes
    prepare: Callable[[Int4Weight], Any]
    run: Callable[[Any, Any], Any]
    probe: Callable[[], tuple[bool, str]] = _always
    supports: Callable[[Int4Weight], tuple[bool, str]] = _any_layer
    make_input: Callable[[torch.Tensor, Any], Any] = _identity
    finish: Callable[[Any, Any, Any], torch.Tensor] = _as_float
    activation_dtype: torch.dtype | None = None  # None: run on the caller's dtype
    adds_bias: bool = False  # the op takes Int4Weight.bias (as vLLM hands it); others give x W^T
    emulated: bool = False  # same numerics as an op that does not exist here, not its speed
    device: str = "cpu"
    tags: tuple[str, ...] = field(default_factory=tuple)
    jit: bool = False  # the first preparation in a process compiles CUDA kernels (NVRTC)

    def __post_init__(self):
        object.__setattr__(self, "computes", Computes(self.computes))

    def availability(self, weight: Int4Weight | None = None) -> tuple[bool, str]:
        ok, why = self.probe()
        if not ok or weight is None:
            return ok, why
        ok2, why2 = self.supports(weight)
        return (ok2, why2 if not ok2 else why)


# -- W4A8 ------------------------------------------------------------------------------

def _prep_native(w: Int4Weight) -> cpu_w4a8.W4A8Prepared:
    return cpu_w4a8.prepare_w4a8(w.w_q, w.scales, w.group_size, w.zeros)


def _group_loop_engine() -> Int8Engine | None:
    """The fastest engine that runs one integer GEMM per group (the naive blocking)."""
    for name, _ in rank_engines(True):
        if name != Int8Engine.AVX2_U8S8.value:
            return Int8Engine(name)
    return None


def _prep_group_loop(w: Int4Weight) -> cpu_w4a8.W4A8Prepared:
    engine = _group_loop_engine()
    if engine is None:
        raise KernelUnavailableError("no per-group integer engine is available")
    return cpu_w4a8.prepare_w4a8(w.w_q, w.scales, w.group_size, w.zeros, engine=engine)


# -- W4A16 -----------------------------------------------------------------------------

def _prep_w4a16(w: Int4Weight) -> cpu_w4a16.W4A16Prepared:
    return cpu_w4a16.prepare_w4a16(w.w_q, w.scales, w.group_size, w.zeros)


def _tinygemm_supports(w: Int4Weight) -> tuple[bool, str]:
    return cpu_w4a16.tinygemm_supports(w.n, w.k, w.effective_group)


def _tinygemm_probe() -> tuple[bool, str]:
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        return False, f"torch {torch.__version__} has no aten._weight_int4pack_mm_for_cpu"
    return True, ""


# -- baselines -------------------------------------------------------------------------

@dataclass(eq=False)
class _Int8Alone:
    w: Any  # int8 [N, K] (int_mm) or an FBGEMM packed weight
    scales: torch.Tensor  # float32 [N, G]
    per_channel: bool


def _prep_int8_mm(w: Int4Weight) -> _Int8Alone:
    n, k, g, s = check_weight(w.w_q, w.scales, w.group_size, w.zeros, device="cpu")
    wc = center_int4(w.w_q, w.zeros, g)
    return _Int8Alone(wc, s.to(torch.float32), g == k)


def _prep_int8_fbgemm(w: Int4Weight) -> _Int8Alone:
    alone = _prep_int8_mm(w)
    alone.w = fbgemm_pack(alone.w)
    return alone


def _quantized_input(x: torch.Tensor, prepared: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_per_token_int8(x)


def _quantized_input_f32(x: torch.Tensor, prepared: Any):
    return quantize_per_token_int8_codes(x)


def _run_int8_mm(inputs, prepared: _Int8Alone) -> torch.Tensor:
    return int_mm(inputs[0], prepared.w)


def _run_int8_fbgemm(inputs, prepared: _Int8Alone) -> torch.Tensor:
    return torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
        inputs[0], 1.0, 128, prepared.w)


def _finish_int8(out, inputs, prepared: _Int8Alone) -> torch.Tensor:
    """Scale the integer result. Only per-channel layers give the W4A8 result this way:
    the integer GEMM alone ignores group boundaries (it is the speed bound, not a kernel)."""
    y = out.to(torch.float32) * inputs[1].to(torch.float32)
    return y * prepared.scales[:, 0] if prepared.per_channel else y


def _fbgemm_probe() -> tuple[bool, str]:
    return engine_available(Int8Engine.FBGEMM)


def _int_mm_probe() -> tuple[bool, str]:
    ok, why = engine_available(Int8Engine.INT_MM)
    if not ok:
        return ok, why
    vnni = getattr(torch.cpu, "_is_vnni_supported", lambda: False)()
    return True, ("" if vnni else "no AVX512-VNNI/AMX here: torch._int_mm is far slower than "
                  "on VNNI hosts (int8_fbgemm is this CPU's int8 bound)")


def _dequant_bf16_probe() -> tuple[bool, str]:
    return cpu_w4a16.bf16_is_native()


def _prep_fastest_dense(w: Int4Weight) -> cpu_dense.DensePrepared:
    return cpu_dense.prepare_dense(dequantize_groupwise(w.w_q, w.scales, w.group_size, w.zeros))


def _prep_dense(w: Int4Weight) -> torch.Tensor:
    return dequantize_groupwise(w.w_q, w.scales, w.group_size, w.zeros).to(torch.bfloat16)


def _bf16_input(x: torch.Tensor, prepared: Any) -> torch.Tensor:
    return x.to(torch.bfloat16).contiguous()


def _run_dense(x: torch.Tensor, w_bf16: torch.Tensor) -> torch.Tensor:
    return x @ w_bf16.t()


# -- engine paths ----------------------------------------------------------------------

def _prep_dyn4(w: Int4Weight):
    return engine_paths.prepare_dynamic4bit(w.w_q, w.scales, w.group_size, w.zeros, w.bias)


def _dyn4_supports(w: Int4Weight) -> tuple[bool, str]:
    if w.zeros is not None:
        return False, "Dynamic4bitLinearKernel takes symmetric int4 (no zero points)"
    if w.k % 2:
        return False, f"two nibbles per byte need an even K, got {w.k}"
    g = w.effective_group
    if g != w.k and g % 32:
        return False, (f"torch's reference _dyn_quant_matmul_4bit takes group sizes that are "
                       f"multiples of 32 (or K), got {g}")
    return True, ""


def _i4smm_probe() -> tuple[bool, str]:
    return True, ("emulated: int4_scaled_mm_cpu's numerics, our integer GEMM "
                  "(vllm_int4_scaled_mm runs the op itself where it builds)")


# -- vLLM's own CPU ops, built from its sdist (imported only when probed or prepared) -------

def _vllm_cpu_probe(kernel: str) -> Callable[[], tuple[bool, str]]:
    def probe() -> tuple[bool, str]:
        from w4a8_kernels.vllm_cpu import probe as vllm_cpu_probe
        return vllm_cpu_probe(kernel)
    return probe


def _vllm_cpu_supports(kernel: str) -> Callable[[Int4Weight], tuple[bool, str]]:
    def supports(w: Int4Weight) -> tuple[bool, str]:
        from w4a8_kernels.vllm_cpu import op_refused
        why = op_refused(kernel, w.n, w.k, w.group_size)
        return (False, why) if why else (True, "")
    return supports


def _prep_vllm_i4smm(w: Int4Weight):
    from w4a8_kernels.vllm_cpu import prepare_int4_scaled_mm
    return prepare_int4_scaled_mm(w.w_q, w.scales, w.group_size, w.zeros, w.bias)


def _run_vllm_i4smm(x, prepared):
    from w4a8_kernels.vllm_cpu import int4_scaled_mm
    return int4_scaled_mm(x, prepared)


def _prep_vllm_wna16(w: Int4Weight):
    from w4a8_kernels.vllm_cpu import prepare_cpu_gemm_wna16
    return prepare_cpu_gemm_wna16(w.w_q, w.scales, w.group_size, w.zeros, w.bias)


def _run_vllm_wna16(x, prepared):
    from w4a8_kernels.vllm_cpu import cpu_gemm_wna16
    return cpu_gemm_wna16(x, prepared)


# -- triton ----------------------------------------------------------------------------

def _triton_probe() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    from w4a8_kernels.triton_runtime import triton_available  # lazily: imports triton
    return triton_available()


def _triton_supports(w: Int4Weight) -> tuple[bool, str]:
    from w4a8_kernels.triton_pack import SUPPORTED_GROUPS
    g = w.group_size
    if g not in (-1, w.k) and g not in SUPPORTED_GROUPS:
        return False, f"Triton kernels take group sizes {SUPPORTED_GROUPS} or per-channel, got {g}"
    return True, ""


def _prep_triton_w4a8(w: Int4Weight):
    from w4a8_kernels import triton_w4a8
    return triton_w4a8.prepare_w4a8(w.w_q, w.scales, w.group_size, w.zeros, device="cuda")


def _prep_triton_w4a16(w: Int4Weight):
    from w4a8_kernels import triton_w4a16
    return triton_w4a16.prepare_w4a16(w.w_q, w.scales, w.group_size, w.zeros, device="cuda")


def _cuda_bf16_input(x: torch.Tensor, prepared: Any) -> torch.Tensor:
    return x.to(device="cuda", dtype=torch.bfloat16).contiguous()


def _run_triton_w4a8(x, prepared):
    from w4a8_kernels import triton_w4a8
    return triton_w4a8.w4a8_matmul(x, prepared)


def _run_triton_w4a16(x, prepared):
    from w4a8_kernels import triton_w4a16
    return triton_w4a16.w4a16_matmul(x, prepared)


def _cpu_float(out, inputs, prepared) -> torch.Tensor:
    return out.to(device="cpu", dtype=torch.float32)


# -- what vLLM runs on CUDA (its own kernels, imported only when prepared) -----------------

def _humming_probe() -> tuple[bool, str]:
    from w4a8_kernels.vllm_humming import humming_available
    return humming_available()


def _prep_humming(activations: str, allow_fallback: bool = True):
    def prepare(w: Int4Weight):
        from w4a8_kernels.vllm_humming import prepare_humming
        return prepare_humming(w.w_q, w.scales, w.group_size, w.zeros, activations=activations,
                               allow_fallback=allow_fallback)
    return prepare


def _run_humming(x, prepared):
    from w4a8_kernels.vllm_humming import humming_linear
    return humming_linear(x, prepared)


def _machete_probe() -> tuple[bool, str]:
    from w4a8_kernels.vllm_machete import machete_available
    return machete_available()


def _machete_supports(w: Int4Weight) -> tuple[bool, str]:
    if w.zeros is not None:
        return False, "the built Machete type is bf16 x uint4b8 (symmetric, no zero points)"
    from w4a8_kernels.machete_lib import layer_refused
    why = layer_refused(*w.w_q.shape, w.group_size)
    return (False, why) if why else (True, "")


def _prep_machete(w: Int4Weight):
    from w4a8_kernels.vllm_machete import prepare_machete
    return prepare_machete(w.w_q, w.scales, w.group_size, w.zeros)


def _run_machete(x, prepared):
    from w4a8_kernels.vllm_machete import machete_mm
    return machete_mm(x, prepared)


def _cuda_probe() -> tuple[bool, str]:
    return (True, "") if torch.cuda.is_available() else (False, "no CUDA device")


def _prep_cuda_dense(w: Int4Weight) -> torch.Tensor:
    return _prep_dense(w).to("cuda")


PATHS: dict[str, KernelPath] = {p.name: p for p in (
    KernelPath("w4a8_native", "W4A8 on this CPU: exact int8 x int4 dots, group scales in float32",
               Computes.W4A8, _prep_native, cpu_w4a8.w4a8_native, tags=("w4a8",)),
    KernelPath("w4a8_group_loop", "naive grouped W4A8: one integer GEMM per group, scaled and summed",
               Computes.W4A8, _prep_group_loop, cpu_w4a8.w4a8_native, tags=("w4a8",)),
    KernelPath("w4a16_fallback", "W4A16: the fastest for M of tinygemm, dequant + fp32 GEMM, "
               "dequant + bf16 GEMM (native bf16 only)",
               Computes.W4A16, _prep_w4a16, cpu_w4a16.w4a16_fallback, tags=("w4a16",)),
    KernelPath("w4a16_tinygemm", "torch _weight_int4pack_mm_for_cpu on bf16 activations",
               Computes.W4A16, _prep_w4a16, cpu_w4a16.w4a16_tinygemm, probe=_tinygemm_probe,
               supports=_tinygemm_supports, activation_dtype=torch.bfloat16, tags=("w4a16",)),
    KernelPath("w4a16_dequant", "dequantize W to float32 per call, then a float32 GEMM",
               Computes.W4A16, _prep_w4a16, cpu_w4a16.w4a16_dequant, tags=("w4a16",)),
    KernelPath("w4a16_dequant_bf16", "dequantize W to bf16 per call, then a bf16 GEMM (native bf16 only)",
               Computes.W4A16, _prep_w4a16, cpu_w4a16.w4a16_dequant_bf16, probe=_dequant_bf16_probe,
               tags=("w4a16",)),
    KernelPath("int8_mm", "torch._int_mm alone on already-quantized int8 inputs (int8 bound)",
               Computes.INT8, _prep_int8_mm, _run_int8_mm, probe=_int_mm_probe,
               make_input=_quantized_input, finish=_finish_int8, tags=("baseline",)),
    KernelPath("int8_fbgemm", "FBGEMM u8 x s8 alone on already-quantized inputs (this CPU's int8 bound)",
               Computes.INT8, _prep_int8_fbgemm, _run_int8_fbgemm, probe=_fbgemm_probe,
               make_input=_quantized_input_f32, finish=_finish_int8, tags=("baseline",)),
    KernelPath("dense", "the fastest dense float GEMM here (fp32, or bf16 where native), per M",
               Computes.DENSE, _prep_fastest_dense, cpu_dense.dense, tags=("baseline",)),
    KernelPath("bf16_dense", "plain bf16 GEMM on the dequantized weight",
               Computes.DENSE, _prep_dense, _run_dense, make_input=_bf16_input,
               activation_dtype=torch.bfloat16, tags=("baseline",)),
    KernelPath("vllm_dynamic4bit", "vLLM Dynamic4bitLinearKernel: torch _dyn_quant_matmul_4bit",
               Computes.W4A8, _prep_dyn4, engine_paths.vllm_dynamic4bit,
               probe=engine_paths.dynamic4bit_available, supports=_dyn4_supports,
               activation_dtype=torch.bfloat16, adds_bias=True, tags=("engine",)),
    KernelPath("vllm_int4_scaled_mm_emulated", "vLLM CPUWNA16 W4A8 route's numerics "
               "(int4_scaled_mm_cpu, AMX hosts) on our integer GEMM",
               Computes.W4A8, lambda w: engine_paths.prepare_int4_scaled_mm(w.w_q, w.scales, w.group_size, w.zeros),
               engine_paths.vllm_int4_scaled_mm, probe=_i4smm_probe,
               activation_dtype=torch.bfloat16, emulated=True, tags=("engine",)),
    KernelPath("vllm_int4_scaled_mm", "vLLM's int4_scaled_mm_cpu (CPUWNA16 W4A8 route), built from "
               "the sdist", Computes.W4A8, _prep_vllm_i4smm, _run_vllm_i4smm,
               probe=_vllm_cpu_probe("int4_scaled_mm"), supports=_vllm_cpu_supports("int4_scaled_mm"),
               activation_dtype=torch.bfloat16, adds_bias=True, jit=True, tags=("w4a8", "engine")),
    KernelPath("vllm_cpu_gemm_wna16", "vLLM's cpu_gemm_wna16 (CPUWNA16 W4A16 route), built from "
               "the sdist", Computes.W4A16, _prep_vllm_wna16, _run_vllm_wna16,
               probe=_vllm_cpu_probe("cpu_gemm_wna16"), supports=_vllm_cpu_supports("cpu_gemm_wna16"),
               activation_dtype=torch.bfloat16, adds_bias=True, jit=True, tags=("w4a16", "engine")),
    KernelPath("triton_w4a8", "Triton W4A8 on int8 tensor cores", Computes.W4A8,
               _prep_triton_w4a8, _run_triton_w4a8, probe=_triton_probe, supports=_triton_supports,
               make_input=_cuda_bf16_input, finish=_cpu_float, activation_dtype=torch.bfloat16,
               device="cuda", tags=("w4a8", "gpu")),
    KernelPath("triton_w4a16", "Triton W4A16", Computes.W4A16,
               _prep_triton_w4a16, _run_triton_w4a16, probe=_triton_probe, supports=_triton_supports,
               make_input=_cuda_bf16_input, finish=_cpu_float, activation_dtype=torch.bfloat16,
               device="cuda", tags=("w4a16", "gpu")),
    KernelPath("cublas_bf16", "cuBLAS bf16 GEMM on the dequantized weight (torch matmul on the GPU)",
               Computes.DENSE, _prep_cuda_dense, _run_dense, probe=_cuda_probe,
               make_input=_cuda_bf16_input, finish=_cpu_float, activation_dtype=torch.bfloat16,
               device="cuda", tags=("baseline", "gpu")),
    KernelPath("vllm_humming", "vLLM's HummingLinearKernel, W4A16 (humming, as vLLM builds the layer)",
               Computes.W4A16, _prep_humming("bf16"), _run_humming, probe=_humming_probe,
               make_input=_cuda_bf16_input, finish=_cpu_float, activation_dtype=torch.bfloat16,
               device="cuda", jit=True, tags=("w4a16", "gpu", "engine")),
    KernelPath("vllm_humming_int8", "vLLM's HummingLinearKernel handed int8 per-token activations "
               "(CompressedTensorsWNA8Int); vLLM's check may run bf16 instead",
               Computes.W4A8, _prep_humming("int8"), _run_humming, probe=_humming_probe,
               make_input=_cuda_bf16_input, finish=_cpu_float, activation_dtype=torch.bfloat16,
               device="cuda", jit=True, tags=("w4a8", "gpu", "engine")),
    KernelPath("vllm_humming_int8_forced", "Humming with int8 activations forced "
               "(allow_fallback=False): not a vLLM path at group sizes vLLM runs in bf16",
               Computes.W4A8, _prep_humming("int8", allow_fallback=False), _run_humming,
               probe=_humming_probe, make_input=_cuda_bf16_input, finish=_cpu_float,
               activation_dtype=torch.bfloat16, device="cuda", jit=True, tags=("w4a8", "gpu", "demo")),
    KernelPath("vllm_machete", "vLLM's MacheteLinearKernel (bf16 x uint4b8), built from the sdist",
               Computes.W4A16, _prep_machete, _run_machete, probe=_machete_probe,
               supports=_machete_supports, make_input=_cuda_bf16_input, finish=_cpu_float,
               activation_dtype=torch.bfloat16, device="cuda", jit=True, tags=("w4a16", "gpu", "engine")),
)}


def path_names() -> list[str]:
    return list(PATHS)


def get_path(name: str) -> KernelPath:
    try:
        return PATHS[name]
    except KeyError:
        raise KernelInputError(f"unknown kernel path {name!r}; known: {', '.join(PATHS)}") from None


def probe_all() -> dict[str, tuple[bool, str]]:
    """(ok, why) for every path on this machine."""
    return {name: p.probe() for name, p in PATHS.items()}
