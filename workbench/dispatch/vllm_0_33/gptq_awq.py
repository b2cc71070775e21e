"""AutoGPTQ and AutoAWQ in vLLM 0.33.0: config checks, the VllmConfig gate, the linear methods.

Models, in `vllm/model_executor/layers/quantization/`: `auto_gptq.py` (`AutoGPTQConfig`,
`AutoGPTQLinearMethod`), `auto_awq.py` (`AutoAWQConfig`, `AutoAWQMarlinLinearMethod`,
`AutoAWQLinearMethod`), `utils/marlin_utils.py` (`_check_marlin_supported`) and
`utils/gptq_utils.py` (`normalize_and_validate_gptq_desc_act`). INC builds these methods
itself (`inc/schemes/inc_wna16_linear.py`), so it shares them but never reads
`VLLM_MARLIN_INPUT_DTYPE` (the `input_dtype` only `get_quant_method` sets stays None).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from workbench.dispatch.env import Env, EnvChoiceError
from workbench.dispatch.trace import Level, Stage, Trace
from workbench.dispatch.types import (ST, DType, MPConfig, Runtime, ScalarType, activation_name,
                                      dtype)
from workbench.dispatch.vllm_0_33.config_gate import config_gate
from workbench.dispatch.vllm_0_33.errors import VllmError
from workbench.dispatch.versions import takes_rules
from workbench.dispatch.vllm_0_33.marlin_input import MarlinInputError
from workbench.dispatch.vllm_0_33.mp_kernels import (MARLIN_SUPPORTED_GROUP_SIZES, W4A16_PATH,
                                                     marlin_types)
from workbench.errors import InvalidInputError
from workbench.platforms import Platform

GPTQ_TYPES = {(4, True): "uint4b8", (8, True): "uint8b128"}  # AutoGPTQConfig.TYPE_MAP
AWQ_TYPES = {4: "uint4"}  # AutoAWQConfig.TYPE_MAP: 8-bit AWQ needs the Marlin backend
QUANT_DIR = "model_executor/layers/quantization/"
# The modules a layer input may name: vLLM's model files build linears as LinearBase and the
# checkpoint's lm_head as ParallelLMHead (llama.py:503).
MODULES = ("LinearBase", "ParallelLMHead")


# --------------------------------------------------------------------------- shared checks


def check_marlin_supported(quant_type: ScalarType, group_size: int | None, has_zp: bool,
                           p: Platform) -> tuple[bool, str | None]:
    """`_check_marlin_supported` (utils/marlin_utils.py:119-151) with its exact texts."""
    cap = p.capability if p.capability is not None else -1
    types = marlin_types(has_zp, p)
    if quant_type not in types:
        return False, (f"Marlin does not support weight_bits = {quant_type}. Only types = "
                       f"{types!r} are supported (for group_size = {group_size}, "
                       f"device_capability = {cap}, zp = {has_zp}).")
    if group_size is None or group_size not in MARLIN_SUPPORTED_GROUP_SIZES:
        return False, (f"Marlin does not support group_size = {group_size}. Only group_sizes = "
                       f"{MARLIN_SUPPORTED_GROUP_SIZES} are supported.")
    return True, None


def verify_marlin_supported(quant_type: ScalarType, group_size: int, has_zp: bool,
                            p: Platform) -> None:
    ok, why = check_marlin_supported(quant_type, group_size, has_zp, p)
    if not ok:
        raise VllmError("ValueError", why)


# --------------------------------------------------------------------------- the layer


@dataclass(frozen=True)
class Layer:
    """The shapes and dtype of one Linear layer, as `create_weights` receives them.

    Its defaults (4096 x 4096, bfloat16, a down_proj name) describe the workbench's stand-in
    layer, not a checkpoint's quantization config: vLLM's `from_config` invents none."""

    in_features: int
    out_features: int
    input_size_per_partition: int
    output_size_per_partition: int
    params_dtype: str
    layer_name: str
    module: str = "LinearBase"  # the vLLM module it is: a LinearBase, or the ParallelLMHead

    @property
    def is_lm_head(self) -> bool:
        return self.module == "ParallelLMHead"

    @classmethod
    def from_json(cls, data: dict, where: str) -> "Layer":
        dims = {}
        for key in ("in_features", "out_features"):
            dims[key] = _positive(data.get(key, 4096), f"{where}.{key}")
        for key, full in (("input_size_per_partition", "in_features"),
                          ("output_size_per_partition", "out_features")):
            dims[key] = _positive(data.get(key, dims[full]), f"{where}.{key}")
        module = data.get("module", "LinearBase")
        if module not in MODULES:
            raise InvalidInputError(f"{where}.module: {module!r}; accepted: {', '.join(MODULES)} "
                                    "(the recorded cases build a LinearBase)")
        return cls(**dims, params_dtype=dtype(data.get("params_dtype", "bfloat16"),
                                              f"{where}.params_dtype").name,
                   layer_name=str(data.get("layer_name", "model.layers.0.mlp.down_proj")),
                   module=module)

    def mp_config(self, weight_type: str, act: DType, group: int, zp: bool) -> MPConfig:
        return MPConfig((self.in_features, self.out_features),
                        (self.input_size_per_partition, self.output_size_per_partition),
                        ST[weight_type], act, group, zp)


def _positive(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInputError(f"{field}: expected a positive integer, got {value!r}")
    return value


def _int(data: dict, key: str, default: Any, where: str) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{where}.{key}: expected an integer, got {value!r}")
    return value


def get_from_keys(config: dict, keys: list[str], *default: Any) -> Any:
    """`QuantizationConfig.get_from_keys` / `get_from_keys_or` (base_config.py:185-200)."""
    for key in keys:
        if key in config:
            return config[key]
    if default:
        return default[0]
    raise VllmError("ValueError", f"Cannot find any of {keys} in the model's quantization config.")


def typed(value: Any, kind: type, field: str) -> Any:
    """A config value of the JSON type its field takes (an int is never a bool here), else a
    named error: a list or string would reach the set lookups and arithmetic below."""
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        name = "true or false" if kind is bool else "an integer"
        raise InvalidInputError(f"{field}: expected {name}, got {value!r}")
    return value


# vLLM's from_config hands the JSON values to __init__ unconverted, so Python decides what
# they mean: 1 == True finds the same TYPE_MAP entry, and desc_act counts by its truth value.
# The readers below give each field that meaning; what vLLM's own arithmetic or lookups would
# choke on (a float size fails torch in create_weights) stays a named error, or vLLM's error
# where vLLM names the value.


def integral(value: Any, field: str, *, keep_bool: bool = False) -> Any:
    """An int field. `keep_bool`: true stays True (bits: `32 // True` works, then TYPE_MAP
    refuses bits=True with vLLM's message). A float such as 4.0 passes vLLM's config but
    fails its create_weights in torch (sizes must be ints): refused here by name."""
    if isinstance(value, bool) and keep_bool:
        return value
    return typed(value, int, field)


def truth(value: Any) -> bool:
    """A flag vLLM reads only by its truth value (`if desc_act`, gptq_utils.py:29-33)."""
    return bool(value)


def flag(value: Any, field: str) -> bool:
    """A flag vLLM passes on as written (zero_point reaches MPLinearLayerConfig): 1 and 0 equal
    True and False there; any other non-bool is refused by name."""
    if not isinstance(value, bool) and isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    return typed(value, bool, field)


def pack_factor(bits: Any) -> None:
    """`self.pack_factor = 32 // weight_bits`, the first thing both __init__s compute
    (auto_gptq.py:146, auto_awq.py:196): bits 0 divides by zero there."""
    try:
        32 // bits
    except ZeroDivisionError as exc:  # Python's own text
        raise VllmError("ZeroDivisionError", str(exc)) from None


def type_key(value: Any) -> Any:
    """`sym` as a TYPE_MAP key: 1 and 0 (or 1.0, 0.0) equal True and False; any other value
    is kept as written, so the lookup fails with vLLM's message naming it."""
    if isinstance(value, (list, dict)):
        raise VllmError("TypeError", f"unhashable type: '{type(value).__name__}'")
    if not isinstance(value, bool) and isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    return value


def quant_config(data: dict, where: str) -> dict:
    """The checkpoint's quantization config: `quantization_config` (the recorder's form), or
    the layer object itself carrying its fields (the short form)."""
    qc = data.get("quantization_config", data)
    if not isinstance(qc, dict):
        raise InvalidInputError(f"{where}.quantization_config: expected a JSON object, got "
                                f"{type(qc).__name__}")
    return qc


def _env_input_dtype(R, env: Env, p: Platform) -> DType | None:
    """`get_marlin_input_dtype` as `get_quant_method` calls it; vLLM's ValueErrors."""
    try:
        return R.marlin_input_act_type(env, p)
    except (EnvChoiceError, MarlinInputError) as exc:
        raise VllmError("ValueError", str(exc)) from None


def linear_method(t: Trace, method: str, **found) -> Trace:
    """`t` once `get_quant_method` has returned `method` (and what else was `found`): its
    `create_weights` runs from here, so vLLM's recorder holds a `kernel` record."""
    return replace(t, method=method, reached=Stage.CREATE_WEIGHTS, **found)


def _select(R, t: Trace, layer: Layer, config: MPConfig, p: Platform, env: Env,
            packing: str) -> Trace:
    t = R.choose_mp_linear_kernel(config, p, env, t)
    if not t.ok:
        return t
    return replace(t, runtime_detail=R.kernel_runtime(t.selected, config, p, env, packing,
                                                      model_dtype=dtype(layer.params_dtype)))


# --------------------------------------------------------------------------- AutoGPTQ


@takes_rules
def gptq_linear(R, bits: int, sym: bool, group: int, layer: Layer, p: Platform, env: Env, t: Trace,
                *, reads_env: bool, method: str = "AutoGPTQLinearMethod") -> Trace:
    """`AutoGPTQLinearMethod(...)` then `create_weights` (auto_gptq.py:311-349).

    `reads_env`: the method came from `AutoGPTQConfig.get_quant_method`, which sets
    `input_dtype` from `VLLM_MARLIN_INPUT_DTYPE` after construction (auto_gptq.py:264).
    `method`: what `get_quant_method` hands back (INC wraps it in its `INCLinearMethod`).
    """
    quant_type = ST[GPTQ_TYPES[(bits, sym)]]
    verify_marlin_supported(quant_type, group, False, p)  # __init__, auto_gptq.py:317
    input_dtype = _env_input_dtype(R, env, p) if reads_env else None  # still get_quant_method
    t = linear_method(t, method, scheme="AutoGPTQLinearMethod")
    act = input_dtype or dtype(layer.params_dtype)
    return _select(R, t, layer, layer.mp_config(str(quant_type), act, group, False), p, env,
                   "gptq")


@takes_rules
def trace_gptq_layer(R, data: Any, p: Platform, env: Env, gate: bool = True,
                     quantization: str = "auto_gptq") -> Trace:
    """A GPTQ checkpoint's Linear layer (`quant_method: gptq`, loaded as `auto_gptq`).

    Input: the layer's `in_features`, `out_features`, `input/output_size_per_partition`,
    `params_dtype`, `layer_name`, and the checkpoint's `quantization_config` (`bits`,
    `group_size`, `desc_act`, `sym`, optional `dynamic`, `modules_in_block_to_quantize`); the
    short form puts those fields on the layer object itself. Like vLLM, neither form has a
    default for `bits`, `group_size`, `desc_act` or `sym` (see `gptq_from_config`).
    `gate=False` skips the VllmConfig gate (traced on its own at the config-gate level).
    """
    layer, qc = _layer_case(data, "gptq")
    t = Trace(level=Level.GPTQ)
    try:
        bits, group, desc_act, sym, dynamic = gptq_from_config(qc, "gptq")
        if gate:
            config_gate(quantization, p, layer.params_dtype)
        # get_linear_quant_method (utils/gptq_utils.py:172-201), by the policy the checkpoint
        # reader lists layers with.
        from workbench.checkpoints.overrides import gptq_layer

        blocks = _flatten(get_from_keys(qc, ["modules_in_block_to_quantize"], None) or [])
        lm_head = get_from_keys(qc, ["lm_head"], False)  # AutoGPTQConfig (auto_gptq.py:198)
        quant = gptq_layer(layer.layer_name, lm_head=layer.is_lm_head,
                           lm_head_quantized=bool(lm_head), base=(bits, group, sym),
                           dynamic=dynamic, blocks=blocks, match=_dynamic_match)
        if quant is None:
            # The ParallelLMHead left unquantized keeps its embedding method (:179-195, and
            # vocab_parallel_embedding.py:320-321 when no method is returned).
            return _unquantized(t, layer, "UnquantizedEmbeddingMethod" if layer.is_lm_head
                                else "UnquantizedLinearMethod")
        bits, group, sym = quant
        _gptq_type(bits, sym)  # override_config's TYPE_MAP check (utils/gptq_utils.py:76-80)
        return R.gptq_linear(bits, sym, group, layer, p, env, t, reads_env=True)
    except VllmError as exc:
        return t.failed(exc.error_type, exc.message)


def gptq_from_config(qc: dict, where: str = "gptq") -> tuple:
    """`AutoGPTQConfig.from_config` and `__init__` (auto_gptq.py:195-211, 116, 151-154): bits,
    group size, desc_act, sym, dynamic. bits, group_size, desc_act and sym have no default:
    `get_from_keys` raises vLLM's ValueError for the first one missing, in this order, before
    any value is checked (base_config.py:185-192); `dynamic` defaults to {} (None too)."""
    dynamic = get_from_keys(qc, ["dynamic"], {})
    dynamic = {} if dynamic is None else dynamic
    raw = [get_from_keys(qc, [key]) for key in ("bits", "group_size", "desc_act", "sym")]
    bits = integral(raw[0], f"{where}.bits", keep_bool=True)
    group = integral(raw[1], f"{where}.group_size")
    desc_act, sym = truth(raw[2]), type_key(raw[3])  # auto_gptq.py:116, :152
    if not isinstance(dynamic, dict):
        raise InvalidInputError(f"{where}.dynamic: expected a JSON object of rules, got "
                                f"{dynamic!r}")
    from workbench.checkpoints.patterns import check_pattern_count  # the readers' bound, at call time

    check_pattern_count(len(dynamic), f"{where}.dynamic")
    _desc_act(desc_act, group, dynamic)
    pack_factor(bits)
    _gptq_type(bits, sym)
    return bits, group, desc_act, sym, dynamic


def _gptq_type(bits: Any, sym: Any) -> None:
    """`AutoGPTQConfig.TYPE_MAP`'s check, in `__init__` and `override_config`
    (auto_gptq.py:151-154, utils/gptq_utils.py:76-80)."""
    if (bits, sym) not in GPTQ_TYPES:
        raise VllmError("ValueError", f"Unsupported quantization config: bits={bits}, sym={sym}")


def awq_from_config(qc: dict, where: str = "awq") -> tuple:
    """`AutoAWQConfig.from_config` and `__init__` (auto_awq.py:237-260, 204-211): bits, group
    size, zero_point, modules_to_not_convert. The first three have no default: `get_from_keys`
    raises vLLM's ValueError for the first one missing (base_config.py:185-192)."""
    raw = [get_from_keys(qc, keys) for keys in (["w_bit", "bits"],
                                                ["q_group_size", "group_size"], ["zero_point"])]
    bits = integral(raw[0], f"{where}.bits", keep_bool=True)
    group = integral(raw[1], f"{where}.group_size")
    zero_point = flag(raw[2], f"{where}.zero_point")  # auto_awq.py:198
    skip = get_from_keys(qc, ["modules_to_not_convert"], None) or []
    pack_factor(bits)
    awq_config(bits)
    return bits, group, zero_point, skip


def _desc_act(desc_act: Any, group: Any, dynamic: dict) -> None:
    """`normalize_and_validate_gptq_desc_act` (utils/gptq_utils.py:23-50)."""
    base = desc_act
    if desc_act and group == -1:
        desc_act = False
    if desc_act:
        raise VllmError("ValueError", (
            "GPTQ group activation ordering (desc_act=True) is no longer supported. Use a "
            "checkpoint with static activation ordering or desc_act=False."))
    for pattern, overrides in dynamic.items():
        if pattern.startswith("-:") or not isinstance(overrides, dict):
            continue
        if overrides.get("desc_act", base) and overrides.get("group_size", group) != -1:
            raise VllmError("ValueError", (
                "GPTQ group activation ordering (desc_act=True) is no longer supported, but is "
                f"enabled by dynamic rule {pattern!r}. Use a checkpoint with static activation "
                "ordering or desc_act=False."))


def _dynamic_match(pattern: str, name: str) -> bool:
    """`re.match(pattern, layer_name)` with the `regex` package vLLM imports as `re`
    (utils/gptq_utils.py:8), in bounded time; a pattern regex rejects raises its error there."""
    # The checkpoint package imports this rule set: imported here, not at module load.
    from workbench.checkpoints.errors import PatternSyntaxError
    from workbench.checkpoints.patterns import compile_pattern

    try:
        return compile_pattern(pattern, "gptq.dynamic").match(name)
    except PatternSyntaxError as exc:
        if exc.library_error is None:
            raise
        raise VllmError("error", exc.library_error) from None


def _flatten(items: Any) -> list:
    out: list = []
    for item in items if isinstance(items, list) else [items]:
        out.extend(_flatten(item) if isinstance(item, list) else [item])
    return out


def _layer_case(data: Any, where: str) -> tuple[Layer, dict]:
    """A GPTQ / AWQ layer input: its shapes, and the quantization config it carries."""
    if not isinstance(data, dict):
        raise InvalidInputError(f"{where}: expected a JSON object, got {type(data).__name__}")
    return Layer.from_json(data, where), quant_config(data, where)


def _unquantized(t: Trace, layer: Layer, method: str = "UnquantizedLinearMethod") -> Trace:
    """A layer the checkpoint leaves unquantized: `UnquantizedLinearMethod`, or for GPTQ's
    ParallelLMHead `UnquantizedEmbeddingMethod`."""
    return linear_method(t, method, selected=method, scheme=method,
                         runtime_detail=unquantized_runtime(layer, method))


# Where each unquantized method is chosen and computes (F.linear on the layer's weight).
_UNQUANTIZED_SOURCE = {"UnquantizedLinearMethod": "model_executor/layers/linear.py",
                       "UnquantizedEmbeddingMethod": "model_executor/layers/vocab_parallel_embedding.py:320"}


def unquantized_runtime(layer: Layer, method: str = "UnquantizedLinearMethod") -> Runtime:
    return Runtime(method, activation_name(dtype(layer.params_dtype)),
                   layer.params_dtype, "F.linear", _UNQUANTIZED_SOURCE[method],
                   emulation="bf16_dense")


# --------------------------------------------------------------------------- AutoAWQ


def awq_config(bits: int) -> None:
    """`AutoAWQConfig.__init__` (auto_awq.py:204-211): only 4-bit without Marlin."""
    if bits not in AWQ_TYPES:
        supported = ", ".join(str(k) for k in AWQ_TYPES)
        raise VllmError("ValueError", (
            f"Unsupported num_bits = {bits}. Supported: {supported}. For 8-bit AWQ, use Marlin "
            "backend by setting backend='awq:marlin' or backend='marlin'."))


def awq_marlin_linear(R, group: int, zero_point: bool, layer: Layer, p: Platform, env: Env,
                      t: Trace, *, input_dtype: DType | None,
                      method: str = "AutoAWQMarlinLinearMethod") -> Trace:
    """`AutoAWQMarlinLinearMethod` (auto_awq.py:404-470): verify off CPU/XPU, then select."""
    if not (p.is_cpu() or p.is_xpu()):
        verify_marlin_supported(ST["uint4"], group, zero_point, p)
    t = linear_method(t, method, scheme="AutoAWQMarlinLinearMethod")
    act = input_dtype or dtype(layer.params_dtype)
    return _select(R, t, layer, layer.mp_config("uint4", act, group, zero_point), p, env, "awq")


def awq_triton_linear(bits: int, group: int, layer: Layer, t: Trace,
                      method: str = "AutoAWQLinearMethod") -> Trace:
    """`AutoAWQLinearMethod` (auto_awq.py:800-911): the Triton AWQ GEMM, weight-only."""
    t = linear_method(t, method, scheme="AutoAWQLinearMethod")
    g = group if group != -1 else layer.in_features
    if g == 0:  # create_weights takes the group size modulo as given (auto_awq.py:819)
        return t.failed("ZeroDivisionError", "integer modulo by zero")
    if layer.input_size_per_partition % g != 0 or layer.output_size_per_partition % (32 // bits):
        which = "input" if layer.input_size_per_partition % g != 0 else "output"
        return t.failed("ValueError", (
            f"The {which} size is not aligned with the quantized weight shape. This can be "
            "caused by too large tensor parallel size."))
    runtime = Runtime("AutoAWQLinearMethod", activation_name(dtype(layer.params_dtype)),
                      f"uint{bits}", "ops.awq_gemm (ops.awq_dequantize + matmul from 256 tokens)",
                      QUANT_DIR + "auto_awq.py:904", emulation=W4A16_PATH)
    return replace(t, selected="AutoAWQLinearMethod", runtime_detail=runtime)


@takes_rules
def trace_awq_layer(R, data: Any, p: Platform, env: Env, gate: bool = True,
                    quantization: str | None = None) -> Trace:
    """An AWQ checkpoint's Linear layer (`quant_method: awq`).

    Input: the layer fields of `trace_gptq_layer` and the checkpoint's `quantization_config`
    (`w_bit` or `bits`, `q_group_size` or `group_size`, `zero_point`, optional
    `modules_to_not_convert`); the short form puts them on the layer. Neither form has a
    default for the bits, the group size or `zero_point` (see `awq_from_config`).
    """
    layer, qc = _layer_case(data, "awq")
    t = Trace(level=Level.AWQ)
    try:
        bits, group, zero_point, skip = awq_from_config(qc, "awq")
        if gate:  # off CPU `override_quantization_method` names it auto_awq (auto_awq.py:263-286)
            config_gate(quantization or ("awq" if p.is_cpu() else "auto_awq"), p,
                        layer.params_dtype)
        # get_quant_method (auto_awq.py:288-335); is_layer_skipped matches by substring.
        if any(m in layer.layer_name for m in skip):
            return _unquantized(t, layer)
        if p.is_cpu() or p.is_xpu():  # auto_awq.py:307-308
            return awq_marlin_linear(R, group, zero_point, layer, p, env, t, input_dtype=None)
        use_marlin = (not env.batch_invariant and p.is_cuda()
                      and check_marlin_supported(ST["uint4"], group, zero_point, p)[0])
        # check_marlin_supports_layer, asked only once Marlin is supported (auto_awq.py:320-322):
        # only a group straddling the shard is refused.
        whole = use_marlin and (group == -1 or group >= layer.in_features
                                or layer.input_size_per_partition % group == 0)
        if use_marlin and whole:
            return awq_marlin_linear(R, group, zero_point, layer, p, env, t,
                                     input_dtype=_env_input_dtype(R, env, p))
        if use_marlin:
            t = t.noted(f"Layer '{layer.layer_name}' is not supported by AutoAWQMarlin. "
                        "Falling back to unoptimized AWQ kernels.")
        return awq_triton_linear(bits, group, layer, t)
    except VllmError as exc:
        return t.failed(exc.error_type, exc.message)
