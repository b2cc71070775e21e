"""The decision a user comes for: one model under two (or more) schemes, on one or more
platforms, side by side. Per layer, for each scheme and platform: the kernel vLLM runs, its
activation, where it fails, its cost at the decode and the prefill token counts; totals per
forward only where every layer loads; per platform and phase, which scheme wins and by how
much, with the band of that ratio.

Each (scheme, platform) is one `workbench.perf.report.ModelReport`; nothing here costs or
traces on its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from workbench.errors import InvalidInputError
from workbench.perf.report import CHECKPOINT, DECODE_M, PREFILL_M, ModelReport, model_report
from workbench.perf.wording import scaled
from workbench.results import rows_csv

__all__ = ["Verdict", "ModelComparison", "model_comparison", "parse_list", "PHASES"]

PHASES = ("decode", "prefill")


@dataclass(frozen=True)
class Verdict:
    """Which scheme is faster on one platform in one phase, over the whole model (per rank,
    one forward). ratio: the slower total over the faster; band: that ratio at the bands'
    edges (slower's low over faster's high, slower's high over faster's low). `decided`:
    the band lies wholly above 1 (a roofline bound in a total decides only where the
    bounded side is the slower one). Where a side does not load, `winner` is the one that
    does and `ratio` is None."""

    platform: str
    phase: str
    winner: str | None
    loser: str | None
    ratio: float | None
    low: float | None
    high: float | None
    decided: bool
    why: str

    def sentence(self) -> str:
        return self.why


@dataclass(frozen=True)
class ModelComparison:
    source: str
    schemes: tuple[str, ...]
    platforms: tuple[str, ...]
    tp: int
    decode_m: int
    prefill_m: int
    reports: tuple[ModelReport, ...]  # one per (scheme, platform), schemes outer
    verdicts: tuple[Verdict, ...]
    vllm_version: str

    def report(self, scheme: str, platform: str) -> ModelReport:
        return next(r for r in self.reports if r.scheme == scheme and r.platform == platform)

    def rows(self) -> list[dict]:
        """One flat row per layer and (scheme, platform): for tables and CSV."""
        out = []
        for rep in self.reports:
            for r in rep.layers:
                out.append({"layer": r.layer, "count": r.count, "k": r.k, "n": r.n, "group_size": r.group_size,
                            "scheme": rep.scheme, "platform": rep.platform, "kernel": r.kernel,
                            "activation": r.activation, "computes": r.computes,
                            "fails": (f"at {r.fails_at}" if r.fails_at else "refused" if r.kernel is None else None),
                            "decode_us": r.decode_us, "decode_low_us": r.decode_low_us,
                            "decode_high_us": r.decode_high_us, "prefill_us": r.prefill_us,
                            "prefill_low_us": r.prefill_low_us, "prefill_high_us": r.prefill_high_us,
                            "basis": r.basis, "error": r.error})
        return out

    def totals(self) -> list[dict]:
        out = []
        for rep in self.reports:
            t = rep.totals()
            out.append({"scheme": rep.scheme, "platform": rep.platform, "loads": t is not None,
                        "refused_layers": [r.layer for r in rep.refused()],
                        "bound": _bound(rep), **({k: t[k] for k in _TOTAL_KEYS} if t else {})})
        return out

    def to_json(self) -> dict:
        return {"source": self.source, "schemes": list(self.schemes), "platforms": list(self.platforms),
                "tp": self.tp, "decode_m": self.decode_m, "prefill_m": self.prefill_m,
                "vllm_version": self.vllm_version,
                "totals": self.totals(),
                "verdicts": [{"platform": v.platform, "phase": v.phase, "winner": v.winner, "loser": v.loser,
                              "ratio": _r(v.ratio), "ratio_low": _r(v.low), "ratio_high": _r(v.high),
                              "decided": v.decided, "sentence": v.sentence()} for v in self.verdicts],
                "layers": _by_layer(self.reports),
                "reports": [r.to_json() for r in self.reports]}

    def to_csv(self) -> str:
        return rows_csv(self.rows())


_TOTAL_KEYS = ("decode_us", "decode_low_us", "decode_high_us", "prefill_us", "prefill_low_us", "prefill_high_us")


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _bound(rep: ModelReport) -> bool:
    """A roofline figure (a bound, not a time) is in the report's sum."""
    return any(r.basis == "roofline" for r in rep.layers if r.kernel is not None and not r.fails_at)


def _by_layer(reports) -> list[dict]:
    """Per layer: each (scheme, platform)'s kernel, activation, failure and costs."""
    order, cells = [], {}
    for rep in reports:
        for r in rep.layers:
            if r.layer not in cells:
                order.append(r.layer)
                cells[r.layer] = {"layer": r.layer, "count": r.count, "k": r.k, "n": r.n,
                                  "group_size": r.group_size, "runs": []}
            cells[r.layer]["runs"].append({
                "scheme": rep.scheme, "platform": rep.platform, "kernel": r.kernel, "activation": r.activation,
                "computes": r.computes, "fails_at": r.fails_at, "error": r.error, "basis": r.basis,
                "decode_us": r.decode_us, "decode_band_us": [r.decode_low_us, r.decode_high_us],
                "prefill_us": r.prefill_us, "prefill_band_us": [r.prefill_low_us, r.prefill_high_us]})
    return [cells[name] for name in order]


def _verdict(platform: str, phase: str, a: ModelReport, b: ModelReport, m: int) -> Verdict:
    ta, tb = a.totals(), b.totals()
    where = f"on {platform} at {phase} (M = {m})"
    if ta is None and tb is None:
        return Verdict(platform, phase, None, None, None, None, None, False,
                       f"{where}: neither {a.scheme} nor {b.scheme} loads")
    if ta is None or tb is None:
        ok, no = (b, a) if ta is None else (a, b)
        return Verdict(platform, phase, ok.scheme, no.scheme, None, None, None, True,
                       f"{where}: only {ok.scheme} loads ({no.scheme}: vLLM refuses "
                       f"{len(no.refused())} of {len(no.layers)} layers)")
    key = f"{phase}_us"
    if not ta[key] or not tb[key]:
        return Verdict(platform, phase, None, None, None, None, None, False, f"{where}: a total has no cost")
    same = [(x.kernel, x.activation, x.decode_us, x.prefill_us) for x in a.layers] == \
        [(x.kernel, x.activation, x.decode_us, x.prefill_us) for x in b.layers]
    if same:  # one model error on both sides: no ratio band to speak of
        return Verdict(platform, phase, None, None, 1.0, 1.0, 1.0, False,
                       f"{where}: no difference: vLLM runs the same kernels for {a.scheme} and {b.scheme} "
                       f"({scaled(ta[key])} per forward)")
    fast, slow, tf, ts = (a, b, ta, tb) if ta[key] <= tb[key] else (b, a, tb, ta)
    ratio = ts[key] / tf[key]
    lo = ts[f"{phase}_low_us"] / tf[f"{phase}_high_us"]
    hi = ts[f"{phase}_high_us"] / tf[f"{phase}_low_us"]
    bound_f, bound_s = _bound(fast), _bound(slow)
    if bound_f:  # the faster side's figure is only a lower bound: it may be the slower one
        return Verdict(platform, phase, None, None, ratio, None, None, False,
                       f"{where}: undecided: {fast.scheme}'s total holds roofline bounds (at least "
                       f"{scaled(tf[key])}) against {slow.scheme}'s {'at least ' if bound_s else ''}{scaled(ts[key])}")
    if bound_s:  # the slower side is at least this slow: the ratio is a lower bound
        return Verdict(platform, phase, fast.scheme, slow.scheme, ratio, ratio, None, True,
                       f"{where}: {fast.scheme} is faster, by at least {ratio:.2f}x ({scaled(tf[key])} against "
                       f"at least {scaled(ts[key])}: {slow.scheme}'s total holds roofline bounds)")
    decided = lo > 1.0
    text = (f"{where}: {fast.scheme} is faster by {ratio:.2f}x (band {_x(lo)}-{_x(hi)}x; "
            f"{scaled(tf[key])} against {scaled(ts[key])} per forward)")
    if not decided:
        text = (f"{where}: too close to call: {fast.scheme} ahead by {ratio:.2f}x, band {_x(lo)}-{_x(hi)}x "
                f"({scaled(tf[key])} against {scaled(ts[key])})")
    return Verdict(platform, phase, fast.scheme if decided else None, slow.scheme if decided else None,
                   ratio, lo, hi, decided, text)


def _x(v: float) -> str:
    """A ratio band's edge: two decimals, three where two would round it onto 1.00."""
    return f"{v:.3f}" if abs(v - 1.0) < 0.005 else f"{v:.2f}"


def parse_list(text: str, what: str) -> tuple[str, ...]:
    """A comma-separated list of names, each once, none empty."""
    items = tuple(x.strip() for x in str(text).split(","))
    if not items or any(not x for x in items):
        raise InvalidInputError(f"{what} {text!r}: an empty name; accepted: names separated by commas")
    if len(set(items)) != len(items):
        raise InvalidInputError(f"{what} {text!r}: a name given twice")
    return items


def model_comparison(source: str, schemes, platforms, tp: int = 1, *, decode_m: int = DECODE_M,
                     prefill_m: int = PREFILL_M, group_size: int = 128,
                     version: str | None = None) -> ModelComparison:
    """The model `source` (a preset or a checkpoint directory) under each scheme on each
    platform. For a checkpoint, CHECKPOINT is the layers as saved, a scheme its twin. The
    verdicts compare every later scheme with the first."""
    from workbench.dispatch.versions import check_version

    schemes = parse_list(schemes, "schemes") if isinstance(schemes, str) else tuple(schemes)
    platforms = parse_list(platforms, "platforms") if isinstance(platforms, str) else tuple(platforms)
    if len(schemes) < 1 or len(platforms) < 1:
        raise InvalidInputError("a comparison needs at least one scheme and one platform")
    version = check_version(version)
    reports = tuple(model_report(source, p, tp, decode_m=decode_m, prefill_m=prefill_m, group_size=group_size,
                                 version=version, scheme=s) for s in schemes for p in platforms)
    names = tuple(r.platform for r in reports[:len(platforms)])  # presets as resolved (aliases)
    verdicts = []
    for i, p in enumerate(names):
        base = reports[i]
        for j in range(1, len(schemes)):
            other = reports[j * len(platforms) + i]
            for phase, m in zip(PHASES, (decode_m, prefill_m)):
                verdicts.append(_verdict(p, phase, base, other, m))
    return ModelComparison(reports[0].source, schemes, names, tp, decode_m, prefill_m, reports,
                           tuple(verdicts), version)


def default_schemes(source: str) -> tuple[str, str]:
    """A preset: W4A8-int against W4A16; a checkpoint: as saved against its W4A16 twin."""
    from workbench.models import MODELS

    return ("w4a8-int", "w4a16") if source in MODELS else (CHECKPOINT, "w4a16")
