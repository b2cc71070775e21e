"""Which activations Humming computes with: vLLM 0.33.0's `check_and_fallback_input_schema`.

`HummingLinearKernel.process_weights_after_loading` (kernels/linear/mixed_precision/humming.py:
47-73) builds a weight schema and an input schema, and `prepare_humming_linear_layer_config`
(layers/quantization/utils/humming/linear.py:75-128) hands both to
`check_and_fallback_input_schema` (utils/humming/schema.py:261-399), which keeps the input
schema, drops it to 16-bit activations, or walks a fallback order. The compatibility test it
asks at each step is the `humming` package's (`is_humming_schema_compatible`, humming-kernels
0.1.19 `humming/schema/humming.py:473-604`), modelled here from the wheel's source, with the
helpers it calls (`humming/config/mma.py`).

Paths: `schema.py` and `linear.py` are vLLM's `model_executor/layers/quantization/utils/humming/`;
`humming/...` are files of the humming-kernels 0.1.19 wheel.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from workbench.dispatch.vllm_0_33.errors import VllmError

VLLM_SCHEMA = "model_executor/layers/quantization/utils/humming/schema.py"
VLLM_LINEAR = "model_executor/layers/quantization/utils/humming/linear.py"
VLLM_KERNEL = "model_executor/kernels/linear/mixed_precision/humming.py"
HUMMING_VERSION = "0.1.19"


@dataclass(frozen=True)
class HDType:
    """A `humming.dtypes.DataType`; equal by its text, as humming compares them (dtypes.py:65)."""

    name: str
    num_bits: int
    is_int: bool
    exponent_bits: int = 0
    mantissa_bits: int = 0

    def __eq__(self, other) -> bool:
        return isinstance(other, HDType) and self.name == other.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return not self.is_int


def _int(bits: int, signed: bool = True) -> HDType:
    return HDType(("" if signed else "u") + f"int{bits}", bits, True)


def _float(bits: int, e: int, m: int) -> HDType:
    """humming/dtypes.py:154-163: `float{bits}e{e}m{m}`, with float16 / bfloat16 / float32."""
    name = {(16, 5, 10): "float16", (16, 8, 7): "bfloat16", (32, 8, 23): "float32"}.get(
        (bits, e, m), f"float{bits}e{e}m{m}")
    return HDType(name, bits, False, e, m)


INT4, INT8 = _int(4), _int(8)
FLOAT16, BFLOAT16, FLOAT32 = _float(16, 5, 10), _float(16, 8, 7), _float(32, 8, 23)
E4M3, E5M2, E3M4, E8M0 = _float(8, 4, 3), _float(8, 5, 2), _float(8, 3, 4), _float(8, 8, 0)
E2M1, E0M3 = _float(4, 2, 1), _float(4, 0, 3)
E2M3, E3M2 = _float(6, 2, 3), _float(6, 3, 2)
PARAM_DTYPES = {"float16": FLOAT16, "bfloat16": BFLOAT16}

# InputQuantizationMode (humming/config/enum.py:4-10): value -> member name.
MODES = {"none": "Disabled", "static_tensor": "StaticTensor", "dynamic_token": "DynamicToken",
         "dynamic_group": "DynamicGroup",
         "static_tensor_dynamic_group": "StaticTensorDynamicGroup",
         "dynamic_group_token": "DynamicGroupToken"}
SCALE_TYPES = {"group": "GROUP", "block": "BLOCK", "channel": "CHANNEL", "tensor": "TENSOR"}


@dataclass(frozen=True)
class WeightSchema:
    """`HummingWeightSchema` (humming/schema/humming.py:21-31), the fields the decision reads."""

    b_dtype: HDType
    bs_dtype: HDType | None = None
    group_size: int = 0
    group_size_n: int = 0
    scale_type: str = "channel"
    has_zero_point: bool = False

    def __repr__(self) -> str:  # the dataclass repr humming prints in vLLM's error
        st = SCALE_TYPES[self.scale_type]
        return (f"HummingWeightSchema(quant_method='humming', b_dtype={self.b_dtype!r}, "
                f"bs_dtype={self.bs_dtype!r}, weight_scale_group_size={self.group_size}, "
                f"weight_scale_group_size_n={self.group_size_n}, "
                f"weight_scale_type=<WeightScaleType.{st}: '{self.scale_type}'>, "
                f"weight_scale_2_type=<WeightScale2Type.NONE: 'none'>, "
                f"has_zero_point={self.has_zero_point}, is_fp_zero_point=False, "
                f"hadamard_block_size=0)")


@dataclass(frozen=True)
class InputSchema:
    """`HummingInputSchema` (humming/schema/humming.py:395-400): a_dtype None is 16-bit."""

    a_dtype: HDType | None = None
    group_size: int = 0
    scale_dtype: HDType | None = None
    mode: str | None = None  # an InputQuantizationMode value

    @property
    def bits(self) -> int:
        return 16 if self.a_dtype is None else self.a_dtype.num_bits

    def __repr__(self) -> str:
        mode = "None" if self.mode is None else f"<InputQuantizationMode.{MODES[self.mode]}: '{self.mode}'>"
        return (f"HummingInputSchema(quant_method='humming', a_dtype={self.a_dtype!r}, "
                f"input_scale_group_size={self.group_size}, "
                f"input_scale_dtype={self.scale_dtype!r}, input_quant_mode={mode})")


@dataclass(frozen=True)
class InputConfig:
    """The compressed-tensors input config `CompressedTensorsWNA8Int` / `WNA4Int` attach as
    `layer._humming_input_quant_config` (compressed_tensors_wNa8.py:114-132, 168-170)."""

    num_bits: int
    type: str = "int"
    group_size: int = 0  # `iq.group_size or 0`
    dynamic: bool | str = True
    symmetric: bool = True


@dataclass(frozen=True)
class InputDecision:
    """What `check_and_fallback_input_schema` returned, and which of its branches did."""

    schema: InputSchema
    branch: str  # one of BRANCHES
    source: str  # vLLM file:line of that branch
    requested: InputSchema
    warning: str | None = None


BRANCHES = ("16-bit", "kept", "groupwise-to-16-bit", "kept-no-fallback", "fallback")


# --------------------------------------------------------------------------- the schemas


def weight_schema(bits: int, group_size: int, zero_points: bool) -> WeightSchema:
    """humming.py:50-56's quant_config through `HummingWeightSchema` (humming/schema/humming.py:
    42-59): "int{bits}" becomes "uint{bits}"; group 0 (vLLM's -1) is channelwise.

    `convert_humming` (humming/schema/base.py:102-122) then keeps it for these group and channel
    scales (humming.py:372-379: bs_dtype stays None), except `convert_symmetric_integer_weight`
    (humming/schema/humming.py:295-323): symmetric weights with no zero code become
    float{bits}e0m{bits-1}. That depends on the weight values; `weight_schema(...)` is the
    schema for weights holding a zero code, and `sign_magnitude(...)` the other one. The
    decision below is the same for both (tests/dispatch/test_humming_input.py holds it).
    """
    g = 0 if group_size == -1 else group_size
    return WeightSchema(_int(bits, signed=False), None, g, 0, "channel" if g == 0 else "group",
                        zero_points)


def sign_magnitude(w: WeightSchema) -> WeightSchema:
    """convert_symmetric_integer_weight's result for weights with no zero code (:320-323)."""
    bits = w.b_dtype.num_bits
    return replace(w, b_dtype=_float(bits, 0, bits - 1))


def act_type_schema(act: str) -> InputSchema | None:
    """humming.py:17-21, 66-67: an int8 / fp8 act_type is per-token dynamic quantization
    (`quant_key_to_input_schema(kInt8DynamicTokenSym)`, schema.py:228-258: float32 scales)."""
    a = {"int8": INT8, "float8_e4m3fn": E4M3}.get(act)
    return None if a is None else InputSchema(a, 0, FLOAT32, "dynamic_token")


def config_schema(c: InputConfig) -> InputSchema:
    """`CompressedTensorsInputSchema.to_humming_schema` (humming/schema/compressed_tensors.py:
    349-378), the config built as `BaseInputSchema.from_config` reads it (linear.py:78)."""
    a = {("float", 8): E4M3, ("float", 4): E2M1, ("int", 8): INT8, ("int", 4): INT4}.get(
        (c.type, c.num_bits))
    if a is None:
        raise VllmError("ValueError", f"unsupported {c.type}{c.num_bits}")
    static = c.dynamic is False or c.dynamic == "local"
    if c.group_size > 0:
        mode = "static_tensor_dynamic_group" if static else "dynamic_group"
    else:
        mode = "static_tensor" if static else "dynamic_token"
    return InputSchema(a, c.group_size, None, mode)


# --------------------------------------------------------------------------- humming's test


def _dtype_compatibility_error(a: HDType, c: HDType, bs: HDType) -> bool:
    """humming/config/mma.py:49-69 (True where it returns an error text)."""
    if c not in (FLOAT16, BFLOAT16):
        return True
    if a.num_bits == 16 and a != c:
        return True
    if a == E5M2 and c != BFLOAT16:
        return True
    return a.num_bits == 16 and bs.num_bits == 16 and bs != a


def _supports_undocumented(sm: int, cubin_patch: bool) -> bool:
    """mma.py:72-73, 46: E3M4 / E0M3 run on SM 100, 103, 120, 121 with cubin patching (on
    unless HUMMING_DISABLE_PATCH_CUBIN=1, humming/utils/cubin.py:34-35)."""
    return cubin_patch and sm in (100, 103, 120, 121)


def _uses_undocumented(a: HDType, b: HDType) -> bool:
    """mma.py:76-79."""
    raw = b in (E3M4, E0M3) and b.num_bits == a.num_bits
    return a in (E3M4, E0M3) or raw


def _mma_b_dtype(a: HDType, b: HDType, zp: bool, sm: int, cubin_patch: bool) -> HDType:
    """mma.py:82-111: the tensor-core operand the weights are converted to."""
    fp8, fp4 = (E4M3, E5M2, E3M4), (E2M1, E0M3)
    if (a in fp8 and b in fp8) or (a in fp4 and b in fp4):
        return b
    if a not in fp8 or b.num_bits >= a.num_bits:
        return a
    candidates = (a, E4M3) + ((E3M4,) if _supports_undocumented(sm, cubin_patch) else ())
    for t in candidates:
        if b.is_int:
            if b.num_bits <= t.mantissa_bits + (1 if zp else 2):
                return t
        elif (b.mantissa_bits - (b.exponent_bits == 0) <= t.mantissa_bits
              and b.exponent_bits <= t.exponent_bits):
            return t
    return a


_MIN_SM = {FLOAT16: 75, BFLOAT16: 80, INT8: 75, INT4: 75, E4M3: 89, E5M2: 89, E3M4: 100,
           E2M1: 100, E0M3: 100}


def is_compatible(i: InputSchema, w: WeightSchema, param: HDType, sm: int,
                  cubin_patch: bool = True) -> bool:
    """`is_humming_schema_compatible` (humming/schema/humming.py:473-604), line for line."""
    if param not in (FLOAT16, BFLOAT16):  # :484-485
        return False
    a = i.a_dtype or param  # :487-490
    b = w.b_dtype
    bs = w.bs_dtype or param
    if _dtype_compatibility_error(a, param, bs):  # :491-493
        return False
    zp = w.has_zero_point
    if a.is_int and b.is_float and b.exponent_bits == 0:  # :496-498: e0m weights as signed ints
        b = _int(b.num_bits)
    mma_b = _mma_b_dtype(a, b, zp, sm, cubin_patch)
    if sm < _MIN_SM.get(a, 9999):  # :501-514
        return False
    if _uses_undocumented(a, mma_b) and not _supports_undocumented(sm, cubin_patch):  # :516
        return False
    if b.num_bits > min(8, a.num_bits):  # :519
        return False
    mxfp4 = b == E2M1 and bs == E8M0 and w.group_size == 32  # :522-523
    if a == INT4:  # :525-529
        if not b.is_int or b.num_bits > 4:
            return False
        if b in (INT4, _int(4, False)) and zp:
            return False
    elif a == INT8:  # :530-534
        if not mxfp4 and (not b.is_int or b.num_bits > 8):
            return False
        if b in (INT8, _int(8, False)) and zp:
            return False
    elif b.is_int:  # :535-539
        if b.num_bits >= mma_b.num_bits or b.num_bits > mma_b.mantissa_bits + 2:
            return False
        if zp and b.num_bits > mma_b.mantissa_bits + 1:
            return False
    else:  # :540-549
        if b.exponent_bits == 0:
            if b != mma_b and b.mantissa_bits > mma_b.mantissa_bits + 1:
                return False
        elif b.mantissa_bits > mma_b.mantissa_bits or b.exponent_bits > mma_b.exponent_bits:
            return False
    ig, wg = i.group_size, w.group_size
    if sm // 10 in (10, 11):  # :553-568
        if E3M4 in (a, mma_b):
            mx_in = ig == 0 or (ig == 32 and i.scale_dtype in (None, E8M0))
            mx_w = wg == 0 or (wg == 32 and bs == E8M0)
            if not mx_in or not mx_w or w.scale_type == "block":
                return False
        if E0M3 in (a, mma_b) and (ig or wg or 16) != 16:
            return False
    fp8_gs128_mxfp4 = (sm == 90 and a == E4M3 and mxfp4 and ig == 128  # :570-579
                       and i.scale_dtype in (None, FLOAT32))
    if ig > 0 and wg > 0 and ig != wg:  # :580-586
        if not mxfp4 or sm >= 120:
            return False
        if a.num_bits == 8 and not (i.scale_dtype == bs or fp8_gs128_mxfp4):
            return False
    fp4_weights = b in (E2M1, E0M3)  # :588-602
    if 0 < wg < 16:
        return False
    if a.num_bits == 8 and (0 < wg < 32 or 0 < ig < 32):
        return False
    if a == INT4 and (0 < wg < 64 or 0 < ig < 64):
        return False
    if a.num_bits == 4 and wg > 0 and fp4_weights:
        as_dtype = i.scale_dtype or bs
        if bs not in (E8M0, E4M3):
            return False
        if ig > 0 and (as_dtype not in (E8M0, E4M3) or as_dtype != bs):
            return False
    return True


# --------------------------------------------------------------------------- vLLM's decision

# schema.py:278-312
FALLBACK_ORDER = {E5M2: (E4M3, E3M4, INT8), E4M3: (E3M4, INT8), E3M4: (E4M3, INT8),
                  E2M1: (E4M3, E3M4, INT8), E0M3: (INT4, E4M3, E3M4, INT8),
                  INT8: (E4M3, E3M4), INT4: (INT8, E4M3, E3M4)}


def is_deprecated(d: HDType | None, sm: int) -> bool:
    """schema.py:325-334: int4 on SM >= 90, int8 on SM 103-109, and every sub-16-bit type on
    SM 100-119 (written for FP8, whose fast path Humming lacks there; int8 and int4 included)."""
    if d is None or d.num_bits == 16:
        return False
    return ((d == INT4 and sm >= 90) or (d == INT8 and 103 <= sm < 110)
            or (d.num_bits < 16 and 100 <= sm < 120))


def cubin_patch_enabled(env_raw: dict | None = None) -> bool:
    """humming/utils/cubin.py:34-35, read from the simulated env (else this process's)."""
    env = os.environ if env_raw is None else env_raw
    return env.get("HUMMING_DISABLE_PATCH_CUBIN", "0") != "1"


def check_and_fallback_input_schema(w: WeightSchema, i: InputSchema, param_dtype: str,
                                    sm: int | None,
                                    allow_fallback: bool = True,
                                    cubin_patch: bool = True) -> InputDecision:
    """schema.py:261-400. `param_dtype` is the layer's params dtype ("bfloat16", ...); `sm` the
    device capability, None where the platform reports none."""
    if sm is None:  # :269-270: `assert capability is not None`, before anything else
        raise VllmError("AssertionError", "")
    if param_dtype not in PARAM_DTYPES:  # :276 asserts next
        raise VllmError("AssertionError", "")
    param = PARAM_DTYPES[param_dtype]
    if i.a_dtype in (E2M3, E3M2):  # :316-318
        i = replace(i, a_dtype=E4M3)
    requested = i
    a = i.a_dtype
    at = f"{VLLM_SCHEMA}:"
    if is_compatible(i, w, param, sm, cubin_patch):  # :336
        if not allow_fallback:  # :337-341
            warning = (f"Humming {a} activation is slow on SM{sm} now."
                       if is_deprecated(a, sm) else None)
            return InputDecision(i, "kept-no-fallback", at + "337", requested, warning)
        if a is None or a.num_bits == 16:  # :343-344
            return InputDecision(i, "16-bit", at + "343", requested)
        if not is_deprecated(a, sm):  # :346-359
            mxfp8 = (a.is_float and a.num_bits == 8 and i.group_size == 32
                     and i.scale_dtype == E8M0 and sm >= 120)
            groupwise = i.group_size > 0 or w.group_size > 0
            if i.bits == 8 and groupwise and not mxfp8:  # "prefer wna16 for groupwise weight"
                return InputDecision(InputSchema(), "groupwise-to-16-bit", at + "354",
                                     requested)
            return InputDecision(i, "kept", at + "359", requested)
    if allow_fallback:  # :361-394
        for d in (a, *FALLBACK_ORDER.get(a, ()), param):
            if d is None or is_deprecated(d, sm):
                continue
            group, scale, mode = 0, FLOAT32, "dynamic_token"
            if d.num_bits == 16:
                scale, mode = None, "none"
            elif d in (E4M3, E3M4):
                mx_weight = w.group_size == 32 and w.bs_dtype == E8M0
                if sm >= 120 and (w.group_size == 0 or mx_weight):
                    group, scale, mode = 32, E8M0, "dynamic_group"
            candidate = InputSchema(d, group, scale, mode)
            if is_compatible(candidate, w, param, sm, cubin_patch):
                return InputDecision(candidate, "fallback", at + "361", requested)
    raise VllmError("ValueError", (  # :396-400
        f"No compatible Humming input schema for {i!r} with weight schema {w!r} on SM{sm} "
        f"(allow_fallback={allow_fallback})"))


def zero_point_check(w: WeightSchema, i: InputSchema) -> None:
    """linear.py:108-119: asymmetric weights as wide as the activations are refused."""
    if w.has_zero_point and i.a_dtype is not None and w.b_dtype.num_bits == i.a_dtype.num_bits:
        raise VllmError("ValueError", (
            "Humming does not support asymmetric (zero_point) weights when weight and "
            f"activation bit widths are equal (W{w.b_dtype.num_bits}A{i.a_dtype.num_bits}). "
            "Use symmetric weights or a different activation bit width."))


def humming_layer_input(bits: int, group_size: int, zero_points: bool, act_type: str,
                        input_config: InputConfig | None, param_dtype: str, sm: int | None,
                        cubin_patch: bool = True) -> InputDecision:
    """What `HummingLinearKernel.process_weights_after_loading` settles on (humming.py:47-73,
    linear.py:75-128): an 8-bit act_type wins over the scheme's input config, which wins over
    none (16-bit activations); then the zero-point check and vLLM's decision."""
    w = weight_schema(bits, group_size, zero_points)
    i = act_type_schema(act_type)
    if i is None:
        i = config_schema(input_config) if input_config is not None else InputSchema()
    zero_point_check(w, i)
    return check_and_fallback_input_schema(w, i, param_dtype, sm, True, cubin_patch)
