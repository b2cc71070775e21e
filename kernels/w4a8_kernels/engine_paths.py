"""Engine-faithful paths: what the pinned vLLM runs for a W4A8 layer, reproduced on this CPU.

- `vllm_dynamic4bit`: `Dynamic4bitLinearKernel` (CPU, every arch), the kernel vLLM
  selects for `CompressedTensorsW4A8Int` on x86. It packs the int8 weight + 8 two
  nibbles a byte (even column low), casts scales to float32 [N, 1] when per-channel or
  bfloat16 when grouped, calls `torch.ops.aten._dyn_quant_pack_4bit_weight`, and at
  apply time `torch.ops.aten._dyn_quant_matmul_4bit` on activations upcast to float32
  when grouped-bf16 or fp16. Without KleidiAI (every x86 build) torch runs its
  reference loop, which quantizes activations per row *asymmetrically* (min/max,
  zero point), not vLLM's symmetric per-token int8.
- `inc_xpu_w4a8` (emulated here): INC's `INCXPUW4A8LinearMethod` policy. Below
  `min_tokens` (the caller passes the rule's threshold) every call falls back to the W4A16
  path; from there on, activations are quantized by
  `dynamic_per_token_int8_quant_ref` (scale = amax / 127 clamped >= 1e-5, cast to the
  activation dtype, ties to even), both scale tensors are passed as float16, the int8
  GEMM runs and its float16 output is cast to the activation dtype. The integer GEMM is
  ours (the XPU op does not exist here); the rounding steps are INC's. Which layers INC
  accepts (shard alignment, group sizes, symmetry) is the caller's rule to check, not this
  module's: the path computes any layer it is handed.
- `vllm_int4_scaled_mm` (emulated here): `CPUWNA16LinearKernel`'s W4A8 route
  (`int4_scaled_mm_cpu`, taken only on AMX hosts with bf16 models): activations as
  uint8 with zero point 128 (scale = max(amax, 1e-7) / 127), weights (u - zp) int8,
  float32 group scales, bf16 output.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from w4a8_kernels._checks import all_finite, check_activations, check_finite_rows, check_weight
from w4a8_kernels.cpu_w4a8 import W4A8Prepared, prepare_w4a8, w4a8_native_from_quantized
from w4a8_kernels.cpu_w4a16 import W4A16Prepared, prepare_w4a16, w4a16_fallback
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError
from w4a8_kernels.packing import pack_int4_pairs_uint8
from w4a8_kernels.quant import quantize_per_token_uint8_zp128

__all__ = [
    "dynamic4bit_available", "Dynamic4bitPrepared", "prepare_dynamic4bit", "vllm_dynamic4bit",
    "IncXpuW4A8Prepared", "prepare_inc_xpu_w4a8", "inc_xpu_w4a8",
    "inc_quantize_per_token_int8", "bf16_bits_read_as_fp16",
    "Int4ScaledMMPrepared", "prepare_int4_scaled_mm", "vllm_int4_scaled_mm",
    "kleidiai_enabled",
]

def kleidiai_enabled() -> bool:
    """Whether this torch build has KleidiAI (Arm only): the fast `_dyn_quant_*` kernels."""
    backends = getattr(torch.backends, "kleidiai", None)
    return bool(backends and backends.is_available())


def dynamic4bit_available() -> tuple[bool, str]:
    for op in ("_dyn_quant_pack_4bit_weight", "_dyn_quant_matmul_4bit"):
        if not hasattr(torch.ops.aten, op):
            return False, f"torch {torch.__version__} has no aten.{op}"
    if kleidiai_enabled():
        return True, "KleidiAI kernels (Arm)"
    return True, "torch's reference loop: this build has no KleidiAI (x86 never does)"


@dataclass(eq=False)
class Dynamic4bitPrepared:
    n: int
    k: int
    group_size: int
    packed: torch.Tensor


def prepare_dynamic4bit(w_q: torch.Tensor, scales: torch.Tensor, group_size: int,
                        zeros: torch.Tensor | None = None,
                        bias: torch.Tensor | None = None) -> Dynamic4bitPrepared:
    """Dynamic4bitLinearKernel.process_weights_after_loading, step for step."""
    ok, why = dynamic4bit_available()
    if not ok:
        raise KernelUnavailableError(f"vllm_dynamic4bit cannot run here: {why}")
    n, k, g, scales = check_weight(w_q, scales, group_size, zeros)
    if zeros is not None:
        raise KernelInputError("Dynamic4bitLinearKernel takes signed int4 weights only "
                               "(scalar_types.int4, no zero points); this layer has zeros")
    uint8_packed = pack_int4_pairs_uint8(w_q)
    if g == k:  # channelwise: float32 scales [-1, 1] (and float32 bias)
        s = scales.to(torch.float32).view(-1, 1)
        b = bias.to(torch.float32) if bias is not None else None
    else:  # groupwise: bfloat16 scales
        s = scales.to(torch.bfloat16)
        b = bias
    packed = torch.ops.aten._dyn_quant_pack_4bit_weight(uint8_packed, s, b, g, k, n)
    return Dynamic4bitPrepared(n=n, k=k, group_size=g, packed=packed)


def vllm_dynamic4bit(x: torch.Tensor, prepared: Dynamic4bitPrepared) -> torch.Tensor:
    """Dynamic4bitLinearKernel.apply_weights: x [M, K] -> float32 [M, N] (x's dtype rounding)."""
    check_activations(x, prepared.k)
    m = x.shape[0]
    if m == 0:
        return torch.empty(0, prepared.n)
    if not all_finite(x):
        raise KernelInputError("x holds Inf or NaN; the activation quantizer would turn whole rows to NaN")
    is_groupwise = prepared.group_size != prepared.k
    dtype = x.dtype
    run_dtype = torch.float32 if ((is_groupwise and dtype == torch.bfloat16)
                                  or dtype in (torch.float16, torch.float64)) else dtype
    try:
        out = torch.ops.aten._dyn_quant_matmul_4bit(
            x.to(run_dtype).contiguous(), prepared.packed, prepared.group_size, prepared.k,
            prepared.n)
    except RuntimeError as exc:  # torch's own refusal (e.g. a group size not a multiple of 32)
        raise KernelUnavailableError(f"_dyn_quant_matmul_4bit refused this layer: {exc}") from exc
    return out.to(dtype if dtype != torch.float64 else torch.float32).to(torch.float32)


# -- INC on XPU ------------------------------------------------------------------------

def inc_quantize_per_token_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`xpu_ops.dynamic_per_token_int8_quant_ref(x, True, 8)` (vllm/_xpu_ops.py).

    scale = max(|min|, |max|) / 127 in float32, clamped >= 1e-5, then cast to x's dtype;
    x_q = clamp(round(x / scale), -128, 127) with torch.round (ties to even).
    Returns (x_q int8 [M, K], scale [M, 1] in x's dtype).
    """
    check_activations(x)
    mn = x.amin(dim=-1, keepdim=True).to(torch.float32) if x.shape[0] else x.new_zeros(0, 1).float()
    mx = x.amax(dim=-1, keepdim=True).to(torch.float32) if x.shape[0] else x.new_zeros(0, 1).float()
    check_finite_rows(torch.maximum(mn.abs(), mx.abs()))
    scale = (torch.maximum(mn.abs(), mx.abs()) / 127).clamp(min=1e-5).to(x.dtype)
    q = torch.clamp(torch.round(x / scale.to(torch.float32)), -128, 127).to(torch.int8)
    return q, scale


def bf16_bits_read_as_fp16(scales: torch.Tensor) -> torch.Tensor:
    """What `int4_gemm_w4a8` sees when handed bf16 scales: the same 16 bits read as fp16.

    INC keeps a separate `scales_fp16` because the XPU kernel reads both scale tensors
    as float16 whatever the activation dtype; this shows the error that copy prevents.
    """
    return scales.to(torch.bfloat16).contiguous().view(torch.float16)


@dataclass(eq=False)
class IncXpuW4A8Prepared:
    n: int
    k: int
    min_tokens: int
    w4a16: W4A16Prepared
    w4a8: W4A8Prepared
    misread_bf16_scales: bool


def prepare_inc_xpu_w4a8(w_q: torch.Tensor, scales: torch.Tensor, group_size: int,
                         zeros: torch.Tensor | None = None, *, min_tokens: int,
                         misread_bf16_scales: bool = False,
                         engine: str = "auto") -> IncXpuW4A8Prepared:
    """Both of INC's weights: the W4A16 parent's and the fp16 scale copy (or its misreading).

    `min_tokens`: the batch size from which a call runs the int8 GEMM (INC's
    `_MIN_TOKENS_FOR_INT8`, handed in by the caller that holds the rule).
    """
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0:
        raise KernelInputError(f"min_tokens: a token count >= 0, got {min_tokens!r}")
    n, k, g, scales = check_weight(w_q, scales, group_size, zeros)
    s16 = bf16_bits_read_as_fp16(scales) if misread_bf16_scales else scales.to(torch.float16)
    if not bool(torch.isfinite(s16).all()):
        # bf16 bit patterns can be fp16 Inf/NaN; keep them finite-free for the GEMM check
        s16 = torch.nan_to_num(s16, nan=0.0, posinf=65504.0, neginf=-65504.0)
    return IncXpuW4A8Prepared(
        n=n, k=k, min_tokens=min_tokens, w4a16=prepare_w4a16(w_q, scales, group_size, zeros),
        w4a8=prepare_w4a8(w_q, s16.to(torch.float32), group_size, zeros, engine=engine),
        misread_bf16_scales=misread_bf16_scales)


def inc_xpu_w4a8(x: torch.Tensor, prepared: IncXpuW4A8Prepared) -> torch.Tensor:
    """INCXPUW4A8LinearMethod.apply_weights: x bf16/fp16 [M, K] -> float32 [M, N]."""
    check_activations(x, prepared.k)
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise KernelInputError(f"INC w4a8 takes bf16 or fp16 activations, got {x.dtype}")
    m = x.shape[0]
    if m < prepared.min_tokens:  # per-call fallback to the W4A16 parent
        return w4a16_fallback(x, prepared.w4a16).to(x.dtype).to(torch.float32)
    x_q, x_scale = inc_quantize_per_token_int8(x)
    out = w4a8_native_from_quantized(x_q, x_scale.to(torch.float16).to(torch.float32), prepared.w4a8)
    # int4_gemm_w4a8 produces float16; the method casts to x's dtype.
    return out.to(torch.float16).to(x.dtype).to(torch.float32)


# -- CPUWNA16 W4A8 route (int4_scaled_mm_cpu) --------------------------------------------

@dataclass(eq=False)
class Int4ScaledMMPrepared:
    n: int
    k: int
    w4a8: W4A8Prepared


def prepare_int4_scaled_mm(w_q: torch.Tensor, scales: torch.Tensor, group_size: int,
                           zeros: torch.Tensor | None = None, *,
                           engine: str = "auto") -> Int4ScaledMMPrepared:
    """Weights as `convert_weight_packed_scale_zp` leaves them: (u - zp) int8, fp32 scales.

    Symmetric layers get vLLM's fake zero point 8 (0x88888888 per packed word), so the
    integer weight is u - 8 = w: the same values.
    """
    n, k, g, scales = check_weight(w_q, scales, group_size, zeros)
    return Int4ScaledMMPrepared(n=n, k=k, w4a8=prepare_w4a8(
        w_q, scales.to(torch.float32), group_size, zeros, engine=engine))


def vllm_int4_scaled_mm(x: torch.Tensor, prepared: Int4ScaledMMPrepared) -> torch.Tensor:
    """int4_scaled_mm_cpu's numerics: x bf16/fp16 [M, K] -> float32 [M, N] (x's dtype rounding)."""
    check_activations(x, prepared.k)
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise KernelInputError("int4_scaled_mm_cpu_with_quant: expect A to be bfloat16 or half "
                               f"(got {x.dtype})")
    x_u8, x_scale = quantize_per_token_uint8_zp128(x)
    x_q = (x_u8.view(torch.int8) ^ -128)  # u8 - 128 as int8: flip the sign bit
    out = w4a8_native_from_quantized(x_q, x_scale, prepared.w4a8)
    return out.to(x.dtype).to(torch.float32)
