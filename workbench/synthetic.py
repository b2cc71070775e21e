"""Synthetic quantized layers: a seeded float weight, quantized round-to-nearest.

`quantize_rtn` is llm-compressor's RTN (compressed-tensors `calculate_qparams` then
`quantize`, the `memoryless_minmax` observer): per group, the range always includes 0;
symmetric scale = max|w| / 7.5 (half of the 15-step int4 range), asymmetric scale =
(max - min) / 15 with zero point clamp(-8 - min / scale) rounded; a zero scale becomes
float32 eps; values are round(w / scale + zp) clamped to [-8, 7], computed in float32
against the scale as stored (cast to the model dtype first, as llm-compressor stores it).
The result is returned in the project convention: signed int4 without zeros, unsigned
[0, 15] with zeros (the compressed-tensors signed values and zero points shifted by 8).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.errors import InvalidInputError
from workbench.layer import CheckpointFormat, Provenance, QuantizedLayer, WeightPacking, dtype_name
from workbench.limits import MAX_DIM, check_int, check_positive, shown
from workbench.memory import check_fits
from workbench.quant_args import QuantArgs

__all__ = ["quantize_rtn", "quant_args", "SyntheticSpec", "synthetic_weight", "synthetic_layer",
           "layer_from_weight", "SCHEMES", "DISTRIBUTIONS"]

DISTRIBUTIONS = ("normal", "uniform", "laplace", "student_t")
# Activation schemes a synthetic or trained layer can carry, as compressed-tensors args.
SCHEMES = ("W4A8", "W4A8_ASYM_INPUT", "W4A16", "W4AFP8")

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _torch_dtype(name: str, field: str) -> torch.dtype:
    if not isinstance(name, str) or name not in _DTYPES:
        raise InvalidInputError(f"{field}: {shown(name)}; accepted: {', '.join(_DTYPES)}")
    return _DTYPES[name]


def _check_group(group_size, k: int) -> int:
    """The group length along K: -1 (one group per channel) or a positive divisor of K."""
    g = group_size
    if isinstance(g, bool) or not isinstance(g, int) or g == 0 or g < -1 or (g > 0 and k % g):
        raise InvalidInputError(f"group_size: {shown(g)} does not divide in_features = {k}; "
                                "accepted: -1 (per channel) or a positive divisor of K")
    return k if g == -1 else g


def _check_bool(field: str, value) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{field}: {shown(value)}; accepted: True or False")
    return value


def quantize_rtn(
    weight: torch.Tensor,
    *,
    num_bits: int = 4,
    group_size: int = 128,
    symmetric: bool = True,
    scale_dtype: torch.dtype = torch.bfloat16,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Round-to-nearest quantization of a float [N, K] weight, group-wise along K.

    Returns (w_q int8 [N, K], scales [N, K // g] in scale_dtype, zeros int8 [N, K // g]
    or None). group_size -1 means one group per output channel.
    """
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not weight.is_floating_point():
        raise InvalidInputError("weight: expected a 2-D floating tensor [N, K]")
    if weight.numel() == 0 or weight.is_meta:
        raise InvalidInputError(f"weight: {'a meta tensor' if weight.is_meta else 'empty'} "
                                f"{list(weight.shape)}; accepted: a [N, K] tensor with data, N, K >= 1")
    if isinstance(num_bits, bool) or num_bits != 4 or not isinstance(num_bits, int):
        raise InvalidInputError(f"num_bits: {shown(num_bits)}; accepted: 4")
    symmetric = _check_bool("symmetric", symmetric)
    if scale_dtype not in _DTYPES.values():
        raise InvalidInputError(f"scale_dtype: {shown(scale_dtype)}; accepted: torch.bfloat16, "
                                "torch.float16, torch.float32")
    n, k = weight.shape
    g = _check_group(group_size, k)
    if not torch.isfinite(weight).all():  # a NaN or Inf has no scale: every group it is in is lost
        raise InvalidInputError("weight: holds NaN or Inf; accepted: finite values")
    w = weight.to(torch.float32).reshape(n, k // g, g)
    lo = torch.clamp(w.amin(dim=-1), max=0.0)
    hi = torch.clamp(w.amax(dim=-1), min=0.0)
    q_min, q_max = -(1 << (num_bits - 1)), (1 << (num_bits - 1)) - 1
    eps = torch.finfo(torch.float32).eps
    if symmetric:
        scale = torch.maximum(lo.abs(), hi) / ((q_max - q_min) / 2)
        zp = None
    else:
        scale = (hi - lo) / (q_max - q_min)
        zp = torch.clamp(q_min - lo / scale, q_min, q_max)
    scale = torch.where(scale == 0, torch.tensor(eps), scale)
    if zp is not None:
        zp = torch.round(zp.nan_to_num(0.0))  # 0/0 of an all-zero group: zp 0 like CT's clamp
    stored = scale.to(scale_dtype)
    if not torch.isfinite(stored).all():
        raise InvalidInputError(f"weight: a group's scale ({scale.max().item():.3g}) overflows "
                                f"{str(scale_dtype).removeprefix('torch.')}; accepted: weights "
                                "whose scales the scale dtype can hold")
    v = w / stored.to(torch.float32).unsqueeze(-1)
    if zp is not None:
        v = v + zp.unsqueeze(-1)
    q = torch.clamp(torch.round(v), q_min, q_max).to(torch.int8).reshape(n, k)
    if zp is None:
        return q, stored, None
    # compressed-tensors keeps both signed; the project convention is unsigned nibbles.
    offset = 1 << (num_bits - 1)
    return (q.to(torch.int16) + offset).to(torch.int8), stored, (zp.to(torch.int16) + offset).to(torch.int8)


def quant_args(scheme: str, *, group_size: int = 128, symmetric: bool = True) -> tuple[QuantArgs, QuantArgs | None]:
    """compressed-tensors QuantizationArgs (weights, input) for a named scheme."""
    if not isinstance(scheme, str) or scheme not in SCHEMES:
        raise InvalidInputError(f"scheme: {shown(scheme)}; accepted: {', '.join(SCHEMES)}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or not (
            group_size == -1 or group_size > 0):
        raise InvalidInputError(f"group_size: {shown(group_size)}; accepted: -1 (per channel) or "
                                "a positive integer")
    _check_bool("symmetric", symmetric)
    weights = QuantArgs(num_bits=4, type="int", symmetric=symmetric,
                        strategy="channel" if group_size == -1 else "group",
                        group_size=None if group_size == -1 else group_size, dynamic=False,
                        observer="memoryless_minmax")
    if scheme == "W4A16":
        return weights, None
    act = QuantArgs(num_bits=8, type="float" if scheme == "W4AFP8" else "int",
                    symmetric=scheme != "W4A8_ASYM_INPUT", strategy="token", dynamic=True)
    return weights, act


def _ct_format(scheme: str) -> str:
    # What compressed-tensors 0.17.0 infers: INT weights with an input scheme are
    # int-quantized, weight-only INT is pack-quantized (W4AFP8 is written pack-quantized
    # by llm-compressor's W4A8-FP8 example, which vLLM's W4A8Fp8 scheme expects).
    return "pack-quantized" if scheme in ("W4A16", "W4AFP8") else "int-quantized"


def layer_from_weight(
    weight: torch.Tensor,
    *,
    name: str,
    scheme: str = "W4A8",
    group_size: int = 128,
    symmetric: bool = True,
    params_dtype: str = "bfloat16",
    source: str = "memory",
    bias: torch.Tensor | None = None,
    notes: tuple[str, ...] = (),
) -> QuantizedLayer:
    """Quantize a float [N, K] weight with RTN into a QuantizedLayer (int8 packing)."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"name: {shown(name)}; accepted: a non-empty string")
    dt = _torch_dtype(params_dtype, "params_dtype")
    weights_args, input_args = quant_args(scheme, group_size=group_size, symmetric=symmetric)
    w_q, scales, zeros = quantize_rtn(weight, group_size=group_size, symmetric=symmetric, scale_dtype=dt)
    n, k = weight.shape
    return QuantizedLayer(
        name=name, in_features=k, out_features=n, num_bits=4, group_size=group_size,
        symmetric=symmetric, format=CheckpointFormat.SYNTHETIC, weight_args=weights_args,
        input_args=input_args, ct_format=_ct_format(scheme), params_dtype=params_dtype,
        scale_dtype=dtype_name(scales.dtype), provenance=Provenance(source), notes=notes,
        qweight=w_q, packing=WeightPacking.INT8, scales=scales, zeros=zeros, bias=bias,
        source_weight=weight,
    )


# Peak memory of synthetic_layer per weight element (the float weight, its draws, the RTN
# temporaries, the layer's copies): 20-46 B measured over every distribution, symmetric and
# asymmetric, group 32 / 128 / per-channel, bfloat16 / float16 / float32 (peak RSS, 2048 x 2048).
BYTES_PER_ELEMENT = 56


@dataclass(frozen=True)
class SyntheticSpec:
    """What a synthetic layer looks like; checked on construction, its size against the
    memory available here (so a 10^9 x 10^9 spec is refused before anything is drawn)."""

    out_features: int = 4096
    in_features: int = 4096
    group_size: int = 128
    symmetric: bool = True
    distribution: str = "normal"
    std: float = 0.02
    outlier_channels: int = 0  # input columns (K) scaled up, like activation-outlier features
    outlier_scale: float = 8.0
    scheme: str = "W4A8"
    params_dtype: str = "bfloat16"
    seed: int = 0

    def __post_init__(self) -> None:
        for f in ("out_features", "in_features"):
            check_int(f, getattr(self, f), 1, MAX_DIM)
        _check_group(self.group_size, self.in_features)
        _check_bool("symmetric", self.symmetric)
        for f, names in (("distribution", DISTRIBUTIONS), ("scheme", SCHEMES),
                         ("params_dtype", tuple(_DTYPES))):
            v = getattr(self, f)
            if not isinstance(v, str) or v not in names:
                raise InvalidInputError(f"{f}: {shown(v)}; accepted: {', '.join(names)}")
        check_int("outlier_channels", self.outlier_channels, 0, self.in_features)
        check_int("seed", self.seed, 0, 2**63 - 1)
        check_positive("std", self.std), check_positive("outlier_scale", self.outlier_scale)
        n, k = self.out_features, self.in_features
        check_fits(n * k * BYTES_PER_ELEMENT, f"a synthetic {n} x {k} layer",
                   "use smaller out_features / in_features")


def synthetic_weight(spec: SyntheticSpec) -> torch.Tensor:
    """The float32 [N, K] weight of a spec: seeded, so the same spec gives the same weight."""
    gen = torch.Generator().manual_seed(spec.seed)
    n, k = spec.out_features, spec.in_features
    if spec.distribution == "normal":
        w = torch.randn(n, k, generator=gen)
    elif spec.distribution == "uniform":
        w = (torch.rand(n, k, generator=gen) * 2 - 1) * 3 ** 0.5  # unit variance
    elif spec.distribution == "laplace":
        u = torch.rand(n, k, generator=gen).clamp(1e-7, 1 - 1e-7) - 0.5
        w = -torch.sign(u) * torch.log1p(-2 * u.abs()) / 2 ** 0.5  # unit variance
    else:  # student_t with 3 degrees of freedom: heavy tails, as trained weights have
        z = torch.randn(n, k, generator=gen)
        chi2 = torch.randn(n, k, 3, generator=gen).pow(2).sum(-1)
        w = z / torch.sqrt(chi2 / 3) / 3 ** 0.5
    w = w * spec.std
    if spec.outlier_channels:
        cols = torch.randperm(k, generator=gen)[: spec.outlier_channels]
        w[:, cols] *= spec.outlier_scale
    # The model holds weights in its dtype; quantize what the model would hold.
    w = w.to(_torch_dtype(spec.params_dtype, "params_dtype")).to(torch.float32)
    if not torch.isfinite(w).all():  # std x outlier_scale past the dtype's range: inf weights
        raise InvalidInputError(
            f"std = {spec.std:g} with outlier_scale = {spec.outlier_scale:g}: weights overflow "
            f"{spec.params_dtype} (largest {torch.finfo(_DTYPES[spec.params_dtype]).max:g}); "
            "accepted: a std whose draws stay finite in params_dtype")
    return w


def synthetic_layer(spec: SyntheticSpec | None = None, *, name: str = "synthetic", **kwargs) -> QuantizedLayer:
    """A QuantizedLayer from a SyntheticSpec (or its fields as keyword arguments)."""
    if spec is None:
        unknown = sorted(set(kwargs) - set(SyntheticSpec.__dataclass_fields__))
        if unknown:
            raise InvalidInputError(f"synthetic_layer: unknown field(s) {unknown}; accepted: "
                                    f"{', '.join(SyntheticSpec.__dataclass_fields__)}")
        spec = SyntheticSpec(**kwargs)
    elif not isinstance(spec, SyntheticSpec) or kwargs:
        raise InvalidInputError(f"synthetic_layer: expected a SyntheticSpec or its fields as "
                                f"keywords, got {type(spec).__name__}"
                                + (f" and {sorted(kwargs)}" if kwargs else ""))
    w = synthetic_weight(spec)
    desc = (f"synthetic {spec.distribution} std={spec.std} seed={spec.seed}"
            + (f", {spec.outlier_channels} outlier input channels x{spec.outlier_scale}"
               if spec.outlier_channels else ""))
    return layer_from_weight(w, name=name, scheme=spec.scheme, group_size=spec.group_size,
                             symmetric=spec.symmetric, params_dtype=spec.params_dtype,
                             source=desc)

