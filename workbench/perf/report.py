"""The whole-model report: every linear layer's scheme, kernel, what runs, and its predicted
time at a decode M and a prefill M on a platform and TP size, with totals.

A source is a model preset (`workbench.models`, quantized as llm-compressor's W4A8 preset:
int4 weights in groups of 128, int8 dynamic per-token activations) or a checkpoint folder
(each layer's own scheme, read from its headers). Per-rank shapes: TP splits N of column-
parallel layers and K of row-parallel ones, as vLLM builds them. Every layer is traced with the
rule set of the vLLM version asked for (the default one when None); the report names it.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workbench.errors import InvalidInputError
from workbench.limits import MAX_M
from workbench.results import rows_csv

__all__ = ["LayerCost", "ModelReport", "model_report", "DECODE_M", "PREFILL_M", "CHECKPOINT", "twin"]

DECODE_M = 1
PREFILL_M = 2048


@dataclass(frozen=True)
class LayerCost:
    layer: str
    count: int  # how many times the model runs this GEMM per forward (decoder layers, experts)
    k: int  # per rank
    n: int
    group_size: int
    parallel: str
    scheme: str | None
    kernel: str | None
    runtime: str  # the trace's runtime sentence (rendered from the structured value)
    computes: str  # "w4a8", "w4a16", "w4a8-fp8", "none"
    decode_us: float | None
    decode_low_us: float | None
    decode_high_us: float | None
    prefill_us: float | None
    prefill_low_us: float | None
    prefill_high_us: float | None
    basis: str
    native_decode_us: float | None  # this project's native W4A8 at the same shapes
    native_prefill_us: float | None
    error: str | None = None
    fails_at: str | None = None  # "load" / "forward": vLLM selects a kernel and then fails
    activation: str | None = None  # the precision the GEMM reads its activations in (int8: real W4A8)


@dataclass(frozen=True)
class ModelReport:
    source: str
    platform: str
    tp: int
    decode_m: int
    prefill_m: int
    layers: tuple[LayerCost, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    vllm_version: str = ""  # the rule set every layer was traced with
    scheme: str = ""  # a SCHEMES name, or "checkpoint": each layer as saved

    def refused(self) -> tuple[LayerCost, ...]:
        """The layers vLLM selects no kernel for here, or whose kernel fails at load or at the
        first forward: the model does not run."""
        return tuple(r for r in self.layers if r.kernel is None or r.fails_at)

    def totals(self, loaded_only: bool = False) -> dict | None:
        """Sum over layers x count (per rank, one forward). None where a layer is refused (a
        model that does not load has no time), unless `loaded_only`: then over the layers
        that load, and labelled so."""
        refused = self.refused()
        if refused and not loaded_only:
            return None
        out = {}
        for key in ("decode_us", "decode_low_us", "decode_high_us", "prefill_us", "prefill_low_us",
                    "prefill_high_us", "native_decode_us", "native_prefill_us"):
            vals = [(getattr(r, key), r.count) for r in self.layers if r not in refused]
            out[key] = round(sum(v * c for v, c in vals if v is not None), 3)
        out["unpredicted_layers"] = sum(1 for r in self.layers if r not in refused and r.decode_us is None)
        out["over"] = (f"the {len(self.layers) - len(refused)} of {len(self.layers)} layers that load "
                       f"(refused, left out: {', '.join(r.layer for r in refused)}; the model does not load)"
                       ) if refused else "every layer"
        return out

    def to_json(self) -> dict:
        return {"source": self.source, "platform": self.platform, "vllm_version": self.vllm_version,
                "scheme": self.scheme, "tp": self.tp, "decode_m": self.decode_m,
                "prefill_m": self.prefill_m, "layers": [asdict(r) for r in self.layers],
                "totals": self.totals(), "totals_over_loaded_layers": self.totals(loaded_only=True),
                "refused": [{"layer": r.layer, "error": r.error} for r in self.refused()],
                "notes": list(self.notes)}

    def to_csv(self) -> str:
        return rows_csv(asdict(r) for r in self.layers)


def _cost(platform: str, trace, m_decode: int, m_prefill: int, n: int, k: int, g: int):
    from workbench.perf.predict import cost_of_runtime, predict

    rt = trace.runtime_detail
    d = cost_of_runtime(platform, rt, m_decode, n, k, g, selected=trace.selected, error=trace.error)
    p = cost_of_runtime(platform, rt, m_prefill, n, k, g, selected=trace.selected, error=trace.error)
    gg = g if g in (-1, 32, 64, 128, 256) else -1
    try:
        nd = predict(platform, "w4a8_native", m_decode, n, k, gg).predicted_us
        npf = predict(platform, "w4a8_native", m_prefill, n, k, gg).predicted_us
    except InvalidInputError:
        nd = npf = None
    return d, p, nd, npf


def _row(name: str, count: int, k: int, n: int, g: int, parallel: str, trace, platform: str,
         m_decode: int, m_prefill: int) -> LayerCost:
    d, p, nd, npf = _cost(platform, trace, m_decode, m_prefill, n, k, g)
    rt = trace.runtime_detail
    fails_at = rt.fails_at if rt is not None and trace.selected else None
    error = trace.error or (rt.error if fails_at else None) or (d.note if d.predicted_us is None else None)
    return LayerCost(name, count, k, n, g, parallel, trace.scheme, trace.selected, trace.runtime or "",
                     rt.computes if rt is not None else "none", d.predicted_us, d.low_us, d.high_us,
                     p.predicted_us, p.low_us, p.high_us, d.basis, nd, npf, error,
                     str(fails_at) if fails_at else None, rt.activation if rt is not None else None)


CHECKPOINT = "checkpoint"  # a checkpoint's layers as saved


def twin(spec, scheme: str):
    """A checkpoint layer as if saved under `scheme` (`workbench.perf.selected.SCHEMES`): the
    same weights and shape, its activation quantization as llm-compressor writes that scheme
    (W4A16: no input_activations, pack-quantized; W4A8-int: int8 dynamic per-token,
    int-quantized). CHECKPOINT: the layer as saved. A GPTQ / AWQ / INC layer is weight-only
    already: its W4A16 twin is itself, and it has no W4A8 one."""
    from dataclasses import replace

    from workbench.layer import CheckpointFormat
    from workbench.perf.selected import check_scheme, scheme_json
    from workbench.quant_args import QuantArgs

    if scheme == CHECKPOINT:
        return spec
    check_scheme(scheme)
    if spec.format not in (CheckpointFormat.COMPRESSED_TENSORS, CheckpointFormat.SYNTHETIC):
        if scheme == "w4a16":
            return spec
        raise InvalidInputError(f"layer {spec.name}: a {spec.format.value} layer is weight-only; its twin "
                                f"under {scheme!r} is not a {spec.format.value} checkpoint; accepted: "
                                f"{CHECKPOINT}, w4a16")
    doc = scheme_json(spec.out_features, spec.in_features, spec.group_size, scheme)
    act = doc.get("input_activations")
    return replace(spec, input_args=None if act is None else QuantArgs.from_json(act, f"{spec.name}.input_activations"),
                   ct_format=doc["format"])


def model_report(source: str, platform: str = "sm90-h200", tp: int = 1, *, decode_m: int = DECODE_M,
                 prefill_m: int = PREFILL_M, group_size: int = 128,
                 version: str | None = None, scheme: str | None = None) -> ModelReport:
    """The report of a model preset name or a checkpoint directory, traced with the rules of
    vLLM `version` (None: the default). scheme: how a preset is quantized (`SCHEMES`, default
    w4a8-int, llm-compressor's W4A8 preset); for a checkpoint, CHECKPOINT (default: each layer
    as saved) or the scheme of its twin (`twin`)."""
    from workbench.dispatch.versions import check_version
    from workbench.models import MODELS
    from workbench.perf.selected import DEFAULT_SCHEME, check_scheme

    version = check_version(version)
    if scheme is not None and scheme != CHECKPOINT:
        check_scheme(scheme)

    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InvalidInputError(f"tp = {tp!r}; accepted: an integer >= 1")
    for name, m in (("decode_m", decode_m), ("prefill_m", prefill_m)):
        if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= MAX_M:
            raise InvalidInputError(f"{name} = {m!r}; accepted: an integer >= 1 and at most {MAX_M}")
    plat = "host" if platform == "host" else platform
    if plat != "host":
        from workbench.perf.hardware import hardware_for

        plat = hardware_for(platform).preset
    if source in MODELS:
        if scheme == CHECKPOINT:
            raise InvalidInputError(f"scheme {CHECKPOINT!r} is a checkpoint's own; {source} is a model preset: "
                                    "accepted: w4a16, w4a8-int, w4a8-fp8")
        return _preset_report(source, plat, tp, decode_m, prefill_m, group_size, version,
                              scheme or DEFAULT_SCHEME)
    if os.path.isdir(source):
        return _checkpoint_report(source, plat, tp, decode_m, prefill_m, version, scheme or CHECKPOINT)
    raise InvalidInputError(f"report source {source!r}: neither a model preset ({', '.join(MODELS)}) "
                            "nor a checkpoint directory")


def _trace_platform(plat: str):
    if plat == "host":
        from workbench.platforms import detect_host

        return detect_host()
    return plat


_SCHEME_WORDS = {"w4a8-int": "llm-compressor's W4A8 preset (int4 g{g}, int8 dynamic per-token activations)",
                 "w4a16": "llm-compressor's W4A16 preset (int4 g{g}, bf16 activations)",
                 "w4a8-fp8": "W4A8-FP8 (int4 g{g}, fp8 dynamic per-token activations)"}


def _preset_report(name: str, plat: str, tp: int, dm: int, pm: int, g: int,
                   version: str, scheme: str) -> ModelReport:
    from workbench.perf.selected import scheme_json

    from workbench.alignment import model_shard_traces
    from workbench.models import get_model, partitions

    model = get_model(name)
    full_k = {p.layer: p.k for p in partitions(model, 1)}
    rows = []
    tplat = _trace_platform(plat)

    def scheme_of(layer: str, k: int, n: int) -> dict:  # every layer's own group, at its full shape
        return scheme_json(n, k, g if k % g == 0 else -1, scheme)

    for part, trace_fn in model_shard_traces(name, tp, scheme_of, tplat, version=version):
        gg = g if full_k[part.layer] % g == 0 else -1
        count = model.layers * (model.experts if part.layer.startswith("experts.") else 1)
        row = _row(part.layer, count, part.k, part.n, gg, part.parallel, trace_fn(), plat, dm, pm)
        if part.layer.startswith("experts."):  # vLLM loads experts as one MoE layer
            from workbench.perf.moe_cost import moe_report_row
            row = moe_report_row(row, name, tplat, tp, version, scheme)
        rows.append(row)
    notes = (f"{name} as {_SCHEME_WORDS[scheme].format(g=g)}; "
             f"{model.layers} decoder layers; per rank at TP {tp}",)
    if model.experts:
        notes += (f"expert GEMMs counted once per expert (all {model.experts}): routed tokens per "
                  "expert are fewer than M, so the MoE rows bound the cost from above",)
    return ModelReport(name, plat, tp, dm, pm, tuple(rows), notes, version, scheme)


def _checkpoint_report(path: str, plat: str, tp: int, dm: int, pm: int,
                       version: str, scheme: str) -> ModelReport:
    from workbench.checkpoints import open_checkpoint
    from workbench.checkpoints.listing import trace_layer

    ck = open_checkpoint(path)
    tplat = _trace_platform(plat)
    rows = []
    for spec in (twin(s, scheme) for s in ck.layers):
        parallel = spec.default_parallel
        try:
            k, n = spec.partition_shape(tp, parallel)
        except InvalidInputError as exc:
            rows.append(LayerCost(spec.name, 1, spec.in_features, spec.out_features, spec.group_size, parallel,
                                  None, None, "", "none", None, None, None, None, None, None, "roofline",
                                  None, None, str(exc)))
            continue
        trace = trace_layer(spec, tplat, tp_size=tp, parallel=parallel, version=version)
        rows.append(_row(spec.name, 1, k, n, spec.group_size, parallel, trace, plat, dm, pm))
    what = ("as saved" if scheme == CHECKPOINT else
            f"as its {scheme} twin (the same weights, activations as llm-compressor writes {scheme})")
    return ModelReport(str(Path(path)), plat, tp, dm, pm, tuple(rows),
                       (f"{len(ck.layers)} quantized layers of the checkpoint, each once, {what}",), version, scheme)
