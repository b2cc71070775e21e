"""Predicted cost of a fused-MoE layer: the per-expert GEMMs its routing implies, summed.

A layer of E experts, top-k, hidden H and (per-rank) intermediate I run on T tokens makes
T*k token-expert slots; an expert that gets m of them runs two GEMMs, w13 (N = 2I, K = H) and
w2 (N = H, K = I), on m rows. Each GEMM is costed by `workbench.perf.predict.predict` for the
path that stands in for what vLLM selects (its trace decides; a refused layer has no cost),
and the layer's figure is their sum, its band the sum of the bands, its basis the weakest of
theirs. Loads: "uniform" spreads the slots as evenly as routing can (no expert gets more than
T, one slot per token); "skewed" gives expert e a share proportional to 1/(e+1) (Zipf, s = 1),
capped at T, so a few hot experts run large GEMMs and many cold ones run small or none.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from workbench.dispatch.moe import MoELayer, trace_moe
from workbench.errors import InvalidInputError

__all__ = ["LOADS", "expert_loads", "MoECost", "moe_layer_cost", "selected_moe_cost",
           "STAND_INS", "moe_model_report"]

LOADS = ("uniform", "skewed")
# What the project's paths stand in for, per experts class vLLM selects: the integer-activation
# experts by the W4A8 kernels, the 16-bit-activation ones by the W4A16 kernels.
STAND_INS = {
    "CPUExpertsInt4": "w4a8_native",  # dynamic_4bit_int_moe (Arm) / fused_experts_cpu (AMX)
    "CutlassExpertsW4A8Fp8": "w4a8_native",  # fp8 activations: an 8-bit stand-in, flagged
    "MarlinExperts": "w4a16_fallback", "TritonWNA16Experts": "w4a16_fallback",
    "HummingIndexedExperts": "w4a16_fallback", "XPUExpertsWNA16": "w4a16_fallback",
}
_BASIS_ORDER = ("measured", "scaled", "scaled across CPU classes", "published", "roofline")


def expert_loads(tokens: int, top_k: int, experts: int, load: str = "uniform") -> tuple[int, ...]:
    """Token rows per expert: T*k slots, at most T per expert (a token picks k distinct ones)."""
    for name, v in (("tokens", tokens), ("top_k", top_k), ("experts", experts)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidInputError(f"{name}: expected a positive integer, got {v!r}")
    if top_k > experts:
        raise InvalidInputError(f"top_k: {top_k} is more than the {experts} experts")
    if load not in LOADS:
        raise InvalidInputError(f"load: {load!r}; accepted: {', '.join(LOADS)}")
    slots = tokens * top_k
    if load == "uniform":
        base, extra = divmod(slots, experts)
        return tuple(base + (e < extra) for e in range(experts))
    share = [1.0 / (e + 1) for e in range(experts)]
    out = [0] * experts
    left = slots
    while left:  # water-filling: hand slots by share to experts below the cap
        open_ = [e for e in range(experts) if out[e] < tokens]
        total = sum(share[e] for e in open_)
        given = 0
        for e in open_:
            add = min(tokens - out[e], max(1, int(left * share[e] / total)), left - given)
            out[e] += add
            given += add
            if given == left:
                break
        left -= given
    return tuple(out)


@dataclass(frozen=True)
class MoECost:
    """One MoE layer's predicted time on a platform, or why there is none."""

    platform: str
    path: str | None
    tokens: int
    load: str
    loads: tuple[int, ...]
    us: float | None = None
    low_us: float | None = None
    high_us: float | None = None
    basis: str | None = None
    gemms: int = 0
    refused: str | None = None  # vLLM's error where it does not load the layer
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def moe_layer_cost(platform: str, layer: MoELayer, tokens: int, load: str = "uniform",
                   path: str = "w4a8_native") -> MoECost:
    """The sum of the per-expert GEMM predictions of `path` for the routed load."""
    loads = expert_loads(tokens, layer.top_k, layer.num_experts, load)
    g = layer.group_size
    h, i = layer.hidden_size, layer.intermediate_size
    us = lo = hi = 0.0
    bases, n = [], 0
    cache: dict[int, tuple] = {}
    for m in loads:
        if m == 0:
            continue
        if m not in cache:
            cache[m] = (_padded(platform, path, m, 2 * i, h, g),
                        _padded(platform, path, m, h, i, g))
        for p in cache[m]:
            if p.predicted_us is None:
                return MoECost(platform, path, tokens, load, loads,
                               refused=f"no prediction for {path} at M {m}: {p.note}")
            us += p.predicted_us
            lo += p.low_us if p.low_us is not None else p.predicted_us
            hi += p.high_us if p.high_us is not None else p.predicted_us
            bases.append(p.basis)
            n += 1
    basis = max(bases, key=lambda b: _BASIS_ORDER.index(b) if b in _BASIS_ORDER else 99)
    return MoECost(platform, path, tokens, load, loads, us, lo, hi, basis, n)


_PAD_LIMIT = 4096


def _padded(platform: str, path: str, m: int, n: int, k: int, g: int):
    """The prediction at m rows, or at a larger power of two where that is predicted faster:
    a GEMM on m rows can always run padded to more, so its cost never exceeds theirs (and the
    layer's figure never falls as its load grows)."""
    from workbench.perf.predict import predict
    best = predict(platform, path, m, n, k, g)
    p2 = 1 << max(0, (m - 1).bit_length())
    while p2 <= _PAD_LIMIT:
        if p2 > m:
            q = predict(platform, path, p2, n, k, g)
            if (q.predicted_us is not None and best.predicted_us is not None
                    and q.predicted_us < best.predicted_us):
                from dataclasses import replace
                best = replace(q, m=m, note=(q.note + f"; costed padded to M {p2}").lstrip("; "))
        p2 <<= 1
    return best


def selected_moe_cost(platform: str, layer: MoELayer, tokens: int, load: str = "uniform",
                      version: str | None = None) -> MoECost:
    """What vLLM selects for the layer on `platform`, costed by its stand-in path; a layer
    vLLM refuses carries the refusal and no figure."""
    t = trace_moe(layer, platform, version=version)
    loads = expert_loads(tokens, layer.top_k, layer.num_experts, load)
    if not t.ok:
        return MoECost(platform, None, tokens, load, loads,
                       refused=f"{t.error_type}: {t.error}")
    path = STAND_INS.get(t.experts)
    if path is None:
        return MoECost(platform, None, tokens, load, loads,
                       refused=f"{t.experts}: no project path stands in for it")
    cost = moe_layer_cost(platform, layer, tokens, load, path)
    note = (f"vLLM runs {t.experts}; costed by this project's {path} kernels, one call per "
            "expert GEMM (a stand-in, not the kernel itself; a fused MoE kernel launches once "
            "per layer, so each call's floor overstates small loads)")
    if t.experts == "CutlassExpertsW4A8Fp8":
        note += "; its fp8 activations are costed as int8"
    from dataclasses import replace
    return replace(cost, notes=cost.notes + (note,))


def moe_model_report(model: str, platform: str, scheme: str = "w4a8-int8", tokens: int = 1,
                     load: str = "uniform", tp: int = 1, version: str | None = None) -> dict:
    """The MoE part of a model's report: one MoE layer's cost times its MoE layers, or the
    refusal that keeps vLLM from loading the model (then no total is shown)."""
    from workbench.moe_models import get_moe_model, moe_layer
    m = get_moe_model(model)
    layer = moe_layer(m, scheme, tp)
    try:
        cost = selected_moe_cost(platform, layer, tokens, load, version)
    except InvalidInputError as exc:  # a gate the trace does not model: no figure
        return {"model": model, "platform": platform, "scheme": scheme, "moe_layers": m.moe_layers,
                "per_layer": None, "total_us": None, "refused": None, "not_modelled": str(exc)}
    total = None if cost.us is None else cost.us * m.moe_layers
    band = None if cost.us is None else (cost.low_us * m.moe_layers, cost.high_us * m.moe_layers)
    return {"model": model, "platform": platform, "scheme": scheme, "tokens": tokens,
            "load": load, "tp": tp, "moe_layers": m.moe_layers, "per_layer": cost.to_json(),
            "total_us": total, "total_band_us": band, "basis": cost.basis,
            "refused": cost.refused, "not_modelled": None}


# the Model report's scheme names -> the MoE layer's (workbench.moe_models.SCHEMES)
_REPORT_SCHEME = {"w4a8-int": "w4a8-int8", "w4a16": "w4a16", "w4a8-fp8": "w4a8-fp8"}


def moe_report_row(row, model: str, platform, tp: int, version: str | None, scheme: str = "w4a8-int"):
    """A Model report row of a preset's expert GEMMs (`experts.w13` / `experts.w2`), decided as
    vLLM loads the experts: by the MoE trace, not as Linear layers. Where vLLM refuses the MoE
    layer the row is refused (no kernel, vLLM's error: the model has no total); where it loads,
    the row names the experts class vLLM runs and keeps its cost. A preset without MoE rules
    for its routing is refused by name too (no figure the trace cannot back)."""
    from dataclasses import replace

    from workbench.dispatch.moe import trace_moe
    from workbench.moe_models import MOE_MODELS, moe_layer
    if model not in MOE_MODELS:
        return row
    try:
        t = trace_moe(moe_layer(model, _REPORT_SCHEME.get(scheme, scheme), tp), platform, version=version)
    except InvalidInputError as exc:
        return replace(row, kernel=None, scheme=None, computes="none",
                       error=f"MoE layer not modelled: {exc}")
    if not t.ok:
        return replace(row, kernel=None, scheme=t.method, computes="none",
                       error=f"{t.error_type}: {t.error}", decode_us=None, decode_low_us=None,
                       decode_high_us=None, prefill_us=None, prefill_low_us=None,
                       prefill_high_us=None)
    return replace(row, scheme=t.method, kernel=t.experts, runtime=t.runs or row.runtime)
