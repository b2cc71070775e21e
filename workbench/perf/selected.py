"""What vLLM selects for a layer shape on a platform, and its cost: the rule set's trace decides,
`predict.cost_of_runtime` costs the runtime value the trace hands over. The cost model itself
never traces.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Sequence

from workbench.dispatch import Trace, trace_scheme
from workbench.dispatch.versions import check_version
from workbench.errors import InvalidInputError
from workbench.perf.predict import (SELECTED, Prediction, check_shape, cost_of_runtime, predict,
                                    predicted_crossover, hardware_of)

__all__ = ["SCHEMES", "DEFAULT_SCHEME", "check_scheme", "scheme_json", "selected_trace", "predict_selected",
           "predict_paths", "VLLM_SERIES", "VllmComparison", "what_vllm_runs"]

# The layer schemes `selected` traces (predict --scheme), as compressed-tensors writes them:
# INT weights with an int8 input are int-quantized, weight-only INT is pack-quantized, and
# W4A8-FP8 is pack-quantized (llm-compressor's example; vLLM's CompressedTensorsW4A8Fp8).
SCHEMES = ("w4a16", "w4a8-int", "w4a8-fp8")
DEFAULT_SCHEME = "w4a8-int"


def check_scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise InvalidInputError(f"scheme {scheme!r}; accepted: {', '.join(SCHEMES)}")
    return scheme


def scheme_json(n: int, k: int, g: int, scheme: str = DEFAULT_SCHEME) -> dict:
    """The compressed-tensors scheme JSON of a symmetric int4 N x K layer under `scheme`."""
    weights = {"num_bits": 4, "type": "int", "strategy": "channel" if g in (-1, k) else "group",
               "group_size": None if g in (-1, k) else g, "symmetric": True}
    out = {"weights": weights, "format": "int-quantized" if scheme == "w4a8-int" else "pack-quantized",
           "in_features": k, "out_features": n, "params_dtype": "bfloat16"}
    if scheme != "w4a16":
        out["input_activations"] = {"num_bits": 8, "type": "int" if scheme == "w4a8-int" else "float",
                                    "strategy": "token", "dynamic": True, "symmetric": True}
    return out


@lru_cache(maxsize=4096)
def _preset_trace(preset: str, n: int, k: int, g: int, version: str, scheme: str) -> Trace:
    return trace_scheme(scheme_json(n, k, g, scheme), preset, rules=version)


def selected_trace(target: str, n: int, k: int, g: int, version: str, scheme: str) -> Trace:
    """vLLM `version`'s trace of the layer on `target` ("host": this machine as detected; a
    preset as its preset; preset traces are cached, traces are frozen)."""
    if target == "host":
        from workbench.platforms import detect_host

        return trace_scheme(scheme_json(n, k, g, scheme), detect_host(), rules=version)
    return _preset_trace(target, n, k, g, version, scheme)


def predict_selected(platform: str, m: int, n: int, k: int, group_size: int = -1, *,
                     version: str | None = None, scheme: str = DEFAULT_SCHEME) -> Prediction:
    """The cost of what vLLM `version` selects for a layer of this shape and scheme (`SCHEMES`:
    int4 weights with bf16, int8 or fp8 dynamic per-token activations), or vLLM's refusal."""
    version = check_version(version)  # an unknown one is refused before any trace
    scheme = check_scheme(scheme)
    m, n, k, g = check_shape(m, n, k, group_size)
    hw = hardware_of(platform)
    target = "host" if hw is None else hw.preset
    t = selected_trace(target, n, k, g, version, scheme)
    return cost_of_runtime(target, t.runtime_detail, m, n, k, g, selected=t.selected, error=t.error)


def predict_paths(platform: str, paths: Sequence[str], ms: Sequence[int], n: int, k: int,
                  group_size: int = -1, *, version: str | None = None,
                  scheme: str = DEFAULT_SCHEME) -> list[Prediction]:
    """Every (path, M): the execution paths by `predict`, `selected` by `predict_selected`.
    An unknown version or scheme is refused whichever paths are asked for."""
    version, scheme = check_version(version), check_scheme(scheme)
    return [predict_selected(platform, m, n, k, group_size, version=version, scheme=scheme)
            if p == SELECTED else predict(platform, p, m, n, k, group_size)
            for p in paths for m in ms]


# The two checkpoints a user compares, as vLLM loads each: the series names the faces show.
VLLM_SERIES = {"vLLM, W4A8-int checkpoint": "w4a8-int", "vLLM, W4A16 checkpoint": "w4a16"}


@dataclass(frozen=True)
class VllmComparison:
    """What vLLM runs for the same layer saved as W4A8 (int8 dynamic per-token activations)
    and as W4A16, predicted per M: the crossover a user of vLLM gets, not this project's."""

    w4a8: tuple[Prediction, ...]  # path: the series name, kernel: what vLLM selected
    w4a16: tuple[Prediction, ...]
    crossover: tuple[int | None, int | None, int | None] | None  # None: a side has no cost

    @property
    def predictions(self) -> tuple[Prediction, ...]:
        return self.w4a8 + self.w4a16


def what_vllm_runs(platform: str, ms: Sequence[int], n: int, k: int, group_size: int = -1, *,
                   version: str | None = None) -> VllmComparison:
    """`selected` for the layer as each checkpoint, and the M from which the W4A8 one stays
    ahead. A side costed by its roofline only (a bound, not a cost) gives no crossover."""
    (a_name, a_scheme), (b_name, b_scheme) = VLLM_SERIES.items()
    a = tuple(replace(predict_selected(platform, m, n, k, group_size, version=version, scheme=a_scheme),
                      path=a_name) for m in ms)
    b = tuple(replace(predict_selected(platform, m, n, k, group_size, version=version, scheme=b_scheme),
                      path=b_name) for m in ms)
    costed = all(p.predicted_us and p.basis != "roofline" for p in a + b)
    return VllmComparison(a, b, predicted_crossover(a, b) if costed else None)
