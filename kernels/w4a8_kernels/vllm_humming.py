"""What the pinned vLLM runs for a Humming layer on CUDA, built as vLLM builds it.

The `humming` package (humming-kernels 0.1.19, the version vLLM pins in requirements/cuda.txt)
is imported only when a CUDA path is prepared: `humming_available()` says whether it can be.

Public API (CUDA only):

    ok, why = humming_available()
    prepared = prepare_humming(w_q, scales, group_size, zeros, activations="bf16")  # or "int8"
    out = humming_linear(x, prepared)     # x bf16 [M, K] on the GPU -> bf16 [M, N]

The layer is the one `CompressedTensorsWNA8Int.create_weights` registers (pack-quantized,
compressed_tensors_wNa8.py:151-252): `weight_packed` int32 [N, K / 8] holding u = q + 8
(uint4b8; asymmetric: raw u with `weight_zero_point` int32 [N / 8, G] packed along N), and
`weight_scale` bf16 [N, G]. `activations="int8"` hands Humming the int8 dynamic per-token input
config that scheme builds (`_build_input_quant_config`, :114-132, set on the layer at :168-170);
"bf16" hands none (the W4A16 schemes). Every step below cites the sdist file:line it repeats.

Humming may run another format than the one handed to it: symmetric uint4 weights that never
use code 0 (q in [-7, 7]) become sign-magnitude float4e0m3 (`convert_symmetric_integer_weight`),
and vLLM's input-schema check may replace int8 activations with bf16 (groupwise weights:
"prefer wna16", schema.py:354-357). `HummingPrepared` records what was handed and what runs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib.util import find_spec
from typing import Any

import torch

from w4a8_kernels._checks import check_weight
from w4a8_kernels.errors import KernelInputError, KernelUnavailableError
from w4a8_kernels.packing import pack_int4_ct, pack_int4_gptq_zeros

__all__ = ["HUMMING_PIN", "ACTIVATIONS", "humming_available", "HummingPrepared", "prepare_humming",
           "humming_linear", "int8_input_quant_config", "humming_quant_config",
           "humming_compute_config", "check_and_fallback_input_schema"]

HUMMING_PIN = "humming-kernels[cu13]==0.1.19"  # the pinned vLLM requirements/cuda.txt
ACTIVATIONS = ("bf16", "int8")
# prepare_humming_linear_layer_config pads as vLLM calls it (utils/humming/linear.py:141-142).
PAD_N, PAD_K = 256, 128


def humming_available() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    if find_spec("humming") is None:
        return False, f"humming is not installed (pip install '{HUMMING_PIN}', as vLLM pins it)"
    try:
        import humming  # noqa: F401  (import-time side effects: registers its torch ops)
    except Exception as exc:  # a broken install names itself, it does not sink the run
        return False, f"humming does not import: {type(exc).__name__}: {exc}"
    return True, ""


# -- the configs vLLM builds (pure values: tested without a GPU) ------------------------------

def humming_quant_config(group_size: int, k: int, has_zero_point: bool) -> dict:
    """HummingLinearKernel.process_weights_after_loading's quant_config (humming.py:50-61):
    "int" + the weight type's size_bits, group size 0 for channelwise (-1 in vLLM)."""
    g = -1 if group_size in (-1, k) else group_size
    return {"quant_method": "humming", "dtype": "int4", "group_size": 0 if g == -1 else g,
            "has_zero_point": has_zero_point}


def int8_input_quant_config() -> dict:
    """CompressedTensorsWNA8Int._build_input_quant_config for an int8 symmetric dynamic
    per-token input (compressed_tensors_wNa8.py:114-132)."""
    return {"num_bits": 8, "type": "int", "strategy": "token", "symmetric": True,
            "dynamic": True, "group_size": 0, "quant_method": "compressed-tensors",
            "format": "int-quantized"}


def humming_compute_config() -> str:
    """get_humming_linear_compute_config (utils/humming/linear.py:160-167) with vLLM's defaults:
    VLLM_BATCH_INVARIANT and VLLM_HUMMING_USE_F16_ACCUM both off (envs.py)."""
    return json.dumps({"use_batch_invariant": False, "use_f16_accum": False, "gemm_type": "dense"})


# -- vLLM's input-schema check, run on humming's own schema objects ---------------------------

def check_and_fallback_input_schema(weight_schema: Any, input_schema: Any, param_dtype: torch.dtype,
                                    allow_fallback: bool, sm_version: int) -> Any:
    """vLLM's check_and_fallback_input_schema (utils/humming/schema.py:261-400), repeated on the
    real humming schemas so the layer runs what vLLM would run (vLLM reads sm_version from
    current_platform, :269-271; here the caller's device gives it). The rule set models the
    same decision for traces; this copy only exists to build the kernel vLLM builds, and
    tests/dispatch/test_humming_input.py holds the two to the same answer on every input."""
    from humming import dtypes as hd
    from humming.config import InputQuantizationMode
    from humming.schema import HummingInputSchema

    order = {  # dtype_fallback_order_map, :278-312
        hd.float8e5m2: (hd.float8e4m3, hd.float8e3m4, hd.int8),
        hd.float8e4m3: (hd.float8e3m4, hd.int8),
        hd.float8e3m4: (hd.float8e4m3, hd.int8),
        hd.float4e2m1: (hd.float8e4m3, hd.float8e3m4, hd.int8),
        hd.float4e0m3: (hd.int4, hd.float8e4m3, hd.float8e3m4, hd.int8),
        hd.int8: (hd.float8e4m3, hd.float8e3m4),
        hd.int4: (hd.int8, hd.float8e4m3, hd.float8e3m4),
    }
    weight_schema = weight_schema.to_humming_schema(param_dtype)  # :314-315
    input_schema = input_schema.to_humming_schema(param_dtype)
    if input_schema.a_dtype in (hd.float6e2m3, hd.float6e3m2):  # :316-318
        input_schema.a_dtype = hd.float8e4m3
    a_dtype = input_schema.a_dtype
    input_bits = a_dtype.num_bits if a_dtype is not None else 16
    weight_group_size = weight_schema.weight_scale_group_size
    input_group_size = input_schema.input_scale_group_size

    def is_deprecated(dtype) -> bool:  # :325-334
        if dtype is None or dtype.num_bits == 16:
            return False
        return ((dtype == hd.int4 and sm_version >= 90)
                or (dtype == hd.int8 and 103 <= sm_version < 110)
                or (dtype.num_bits < 16 and 100 <= sm_version < 120))

    if input_schema.is_compatible_with(weight_schema, param_dtype):  # :336-359
        if not allow_fallback or a_dtype is None or a_dtype.num_bits == 16:
            return input_schema
        if not is_deprecated(a_dtype):
            is_mxfp8 = (a_dtype.is_floating_point_type and a_dtype.num_bits == 8
                        and input_group_size == 32
                        and input_schema.input_scale_dtype == hd.float8e8m0 and sm_version >= 120)
            if input_bits == 8 and (input_group_size > 0 or weight_group_size > 0) and not is_mxfp8:
                return HummingInputSchema()  # "prefer wna16 for groupwise weight or groupwise input"
            return input_schema
    if allow_fallback:  # :361-394
        for dtype in (a_dtype, *order.get(a_dtype, ()), hd.DataType.from_any(param_dtype)):
            if dtype is None or is_deprecated(dtype):
                continue
            group, scale_dtype, mode = 0, hd.float32, InputQuantizationMode.DynamicToken
            if dtype.num_bits == 16:
                scale_dtype, mode = None, InputQuantizationMode.Disabled
            elif dtype in (hd.float8e4m3, hd.float8e3m4):
                mx = weight_group_size == 32 and weight_schema.bs_dtype == hd.float8e8m0
                if sm_version >= 120 and (weight_group_size == 0 or mx):
                    group, scale_dtype, mode = 32, hd.float8e8m0, InputQuantizationMode.DynamicGroup
            candidate = HummingInputSchema(a_dtype=dtype, input_scale_group_size=group,
                                           input_scale_dtype=scale_dtype, input_quant_mode=mode)
            if candidate.is_compatible_with(weight_schema, param_dtype):
                return candidate
    raise ValueError(f"No compatible Humming input schema for {input_schema} with "  # :396-400
                     f"weight schema {weight_schema} on SM{sm_version} ({allow_fallback=})")


# -- the layer -------------------------------------------------------------------------------

@dataclass(eq=False)
class HummingPrepared:
    n: int
    k: int
    layer_config: Any  # humming.config.LayerConfig
    compute_config: str
    locks: torch.Tensor
    tensors: dict[str, torch.Tensor]
    hadamard_block_size: int
    requested: str  # "bf16" | "int8": what the scheme handed Humming
    activation: str  # what runs: "bf16" or the input dtype humming quantizes to
    weight_format: str  # the weight dtype humming runs (uint4, or float4e0m3 after conversion)
    allow_fallback: bool
    vllm_path: bool  # False for a forced schema vLLM would not run (allow_fallback=False)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def summary(self) -> str:
        return (f"{self.weight_format} weights, {self.activation} activations"
                + ("" if self.vllm_path else " (forced: not a vLLM path)"))


def _layer_tensors(w_q: torch.Tensor, scales: torch.Tensor, g: int,
                   zeros: torch.Tensor | None, device: str) -> dict[str, torch.Tensor]:
    """The checkpoint parameters after convert_linear_layer_to_humming_standard
    (utils/humming/linear.py:20-57): `weight_packed` [N, K/8] -> `weight` viewed as int32,
    `weight_scale` [N, G] kept (output_dim 0), `weight_zero_point` -> `zero_point` int32.
    `weight_shape` (an int64 [2] record, compressed_tensors_wNa8.py:246-252) is no operand."""
    n, k = w_q.shape
    if zeros is None:
        packed = pack_int4_ct(w_q)  # u = q + 8 (uint4b8), low nibble first along K
    else:  # asymmetric: raw unsigned nibbles, the zero points packed along N
        packed = pack_int4_ct((w_q.to(torch.int16) - 8).to(torch.int8))
    t = {"weight": packed.view(n, -1).view(torch.int32),
         "weight_scale": scales.to(torch.bfloat16).reshape(n, -1)}
    if zeros is not None:
        t["zero_point"] = pack_int4_gptq_zeros(zeros.to(torch.int8)).t().contiguous()
    return {name: v.to(device).contiguous() for name, v in t.items()}


def _dtype_name(dtype: Any) -> str:
    return "bf16" if dtype is None or dtype.num_bits == 16 else str(dtype)


def prepare_humming(w_q: torch.Tensor, scales: torch.Tensor, group_size: int,
                    zeros: torch.Tensor | None = None, *, activations: str = "bf16",
                    allow_fallback: bool = True, device: str = "cuda") -> HummingPrepared:
    """HummingLinearKernel.process_weights_after_loading (kernels/linear/mixed_precision/
    humming.py:39-75) on a pack-quantized layer, step by step. Runs humming's CUDA kernels
    (weight conversion and repacking are JIT-compiled on the first call)."""
    if activations not in ACTIVATIONS:
        raise KernelInputError(f"activations: one of {ACTIVATIONS}, got {activations!r}")
    ok, why = humming_available()
    if not ok:
        raise KernelUnavailableError(f"vllm_humming cannot run here: {why}")
    from humming.schema import BaseInputSchema, BaseWeightSchema, HummingInputSchema
    from humming.transform import prepare_and_transform_humming_tensors
    from humming.forward import humming_forward  # noqa: F401  (fail here, not at the first call)

    n, k, g, scales = check_weight(w_q, scales, group_size, zeros)
    params_dtype = torch.bfloat16
    source = _layer_tensors(w_q, scales, g, zeros, device)
    quant_config = humming_quant_config(g, k, zeros is not None)          # humming.py:50-61
    weight_schema = BaseWeightSchema.from_config(quant_config)             # linear.py:75
    input_config = int8_input_quant_config() if activations == "int8" else None
    input_schema = (BaseInputSchema.from_config(input_config) if input_config is not None
                    else HummingInputSchema())                             # linear.py:76-80
    shape_n_stacks, shape_k_stacks = [n], [k]                              # linear.py:86-91
    weight_schema, tensors = weight_schema.convert_humming(                # linear.py:95-100
        tensors=source, shape_n_stacks=shape_n_stacks, shape_k_stacks=shape_k_stacks,
        param_dtype=params_dtype)  # convert_symmetric_integer_weight=True, humming's default
    input_schema, input_tensors = input_schema.convert_humming(            # linear.py:101-106
        tensors=source, shape_n_stacks=shape_n_stacks, shape_k_stacks=shape_k_stacks,
        param_dtype=params_dtype)
    if (weight_schema.has_zero_point and input_schema.a_dtype is not None  # linear.py:108-119
            and weight_schema.b_dtype.num_bits == input_schema.a_dtype.num_bits):
        raise KernelInputError("Humming does not support asymmetric (zero_point) weights when "
                               "weight and activation bit widths are equal")
    tensors.update(input_tensors)
    sm = torch.cuda.get_device_capability(torch.device(device))
    input_schema = check_and_fallback_input_schema(                        # linear.py:123-128
        weight_schema, input_schema, params_dtype, allow_fallback, sm[0] * 10 + sm[1])
    for name in ("input_scale", "input_scale_2"):                          # linear.py:129-132
        if name != input_schema.static_tensor_scale_name:
            tensors.pop(name, None)
            input_tensors.pop(name, None)
    config, tensors = prepare_and_transform_humming_tensors(               # linear.py:135-146
        tensors=tensors, shape_n=n, shape_k=k, weight_schema=weight_schema,
        input_schema=input_schema, pad_n_to_multiple=PAD_N, pad_k_to_multiple=PAD_K,
        has_bias=False, torch_dtype=params_dtype, device=tensors["weight"].device)
    tensors.update(input_tensors)                                          # linear.py:147
    # create_humming_locks (vllm/utils/humming.py:100-109): SMs x 8 int32 zeros.
    sms = torch.cuda.get_device_properties(torch.device(device)).multi_processor_count
    locks = torch.zeros(sms * 8, dtype=torch.int32, device=device)
    requested_bits = 8 if activations == "int8" else 16
    ran = input_schema.a_dtype
    notes = []
    if requested_bits == 8 and (ran is None or ran.num_bits == 16):
        notes.append("vLLM's input-schema check replaced int8 activations with bf16 "
                     "(utils/humming/schema.py:354-357)")
    if str(weight_schema.b_dtype) != "uint4":
        notes.append(f"humming converted the symmetric int4 weight to {weight_schema.b_dtype} "
                     "(no code 0: q in [-7, 7])")
    return HummingPrepared(
        n=n, k=k, layer_config=config, compute_config=humming_compute_config(), locks=locks,
        tensors=tensors, hadamard_block_size=weight_schema.hadamard_block_size,
        requested=activations, activation=_dtype_name(ran),
        weight_format=str(config.b_dtype), allow_fallback=allow_fallback,
        vllm_path=allow_fallback,
        notes=(f"ran {config.b_dtype} weights, {_dtype_name(ran)} activations", *notes))


def humming_linear(x: torch.Tensor, prepared: HummingPrepared) -> torch.Tensor:
    """apply_humming_linear (utils/humming/linear.py:170-201) without a bias: x bf16 [M, K]
    on the GPU -> bf16 [M, N]. No tuning config: humming's heuristics pick the kernel, as in vLLM."""
    from humming.forward import humming_forward

    if x.dim() != 2 or x.shape[1] != prepared.k:
        raise KernelInputError(f"x: [M, {prepared.k}] expected, got {list(x.shape)}")
    t = prepared.tensors
    mode = prepared.layer_config.input_quant_mode                          # linear.py:181-185
    out = humming_forward(                                                 # linear.py:187-200
        prepared.layer_config, inputs=x.reshape(-1, x.size(-1)), weight=t["weight"],
        weight_scale=t.get("weight_scale"), zero_point=t.get("zero_point"), bias=None,
        weight_scale_2=t.get("weight_scale_2"),
        input_scale=t.get("input_scale") if mode.should_quantize else None,
        input_scale_2=t.get("input_scale_2") if mode.has_secondary_scale else None,
        hadamard_block_size=prepared.hadamard_block_size, locks=prepared.locks,
        compute_config=prepared.compute_config)
    return out[:, :prepared.n] if out.shape[-1] != prepared.n else out
