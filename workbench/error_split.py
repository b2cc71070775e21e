"""The error of W4A8 split in two, each part named by what it measures against what.

For activations x, the float layer's weight W (known for synthetic and trained layers, not for a
checkpoint's), its int4 weight dequantized W4, and x quantized per token to int8 (x8, vLLM's
dynamic per-token rule), all in float64 (`kernels.reference`):

- weight part: x @ W4^T against x @ W^T: what the int4 weight costs, whatever the activations
  (all of W4A16's error);
- activation part: x8 @ W4^T against x @ W4^T: what int8 activations add on the same int4
  weight (W4A8 against W4A16, the same checkpoint);
- together: x8 @ W4^T against x @ W^T: all of W4A8's error.

The parts are exact math, not kernel outputs: a kernel's own error (against the exact math of
what it computes) is the bench's `kernel_rel_error`. Per layer (relative Frobenius error, SQNR)
and per token (each row's relative error).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.errors import InvalidInputError

__all__ = ["ErrorPart", "ErrorSplit", "error_split", "split_of_layer", "activations", "REFERENCES", "PARTS"]

PARTS = ("weight", "activation", "together")
# What each part measures, against what (the words every face shows).
REFERENCES = {
    "weight": ("x @ dequant(W4)^T (int4 weight, exact activations)", "x @ W_float^T (the float layer)"),
    "activation": ("x8 @ dequant(W4)^T (int8 per-token activations)", "x @ dequant(W4)^T (the same int4 weight)"),
    "together": ("x8 @ dequant(W4)^T (W4A8)", "x @ W_float^T (the float layer)"),
}
_NO_FLOAT = "not known: a checkpoint holds no float weight, so the float layer it stands for is unknown"


@dataclass(frozen=True)
class ErrorPart:
    part: str  # PARTS
    measured: str
    reference: str
    rel_error: float | None  # None: not known (`why`)
    sqnr_db: float | None
    per_token: tuple[float, ...]
    why: str = ""

    def to_json(self) -> dict:
        return {"part": self.part, "measured": self.measured, "reference": self.reference,
                "rel_error": self.rel_error, "sqnr_db": self.sqnr_db,
                "worst_token_rel_error": max(self.per_token) if self.per_token else None,
                "median_token_rel_error": _median(self.per_token), "why": self.why,
                "per_token": list(self.per_token)}


@dataclass(frozen=True)
class ErrorSplit:
    layer: str
    n: int
    k: int
    group_size: int
    m: int
    inputs: str  # what x is, in words
    weight: ErrorPart
    activation: ErrorPart
    together: ErrorPart

    def parts(self) -> tuple[ErrorPart, ...]:
        return (self.weight, self.activation, self.together)

    def to_json(self) -> dict:
        return {"layer": self.layer, "n": self.n, "k": self.k, "group_size": self.group_size, "m": self.m,
                "inputs": self.inputs, "parts": [p.to_json() for p in self.parts()]}


def _median(v) -> float | None:
    return float(torch.tensor(v, dtype=torch.float64).median()) if v else None


def _part(name: str, out: torch.Tensor | None, ref: torch.Tensor | None) -> ErrorPart:
    from workbench.metrics import per_token_rel_error, rel_frobenius, sqnr_db

    measured, against = REFERENCES[name]
    if out is None or ref is None:
        return ErrorPart(name, measured, against, None, None, (), _NO_FLOAT)
    return ErrorPart(name, measured, against, rel_frobenius(out, ref), sqnr_db(out, ref),
                     tuple(per_token_rel_error(out, ref).tolist()))


def error_split(weight, x: torch.Tensor, w_float: torch.Tensor | None, *, layer: str = "",
                inputs: str = "") -> ErrorSplit:
    """The split for an int4 weight (`workbench.bench.Int4Weight`), activations x [M, K] and
    the float weight [N, K] where known (None: a checkpoint's layer)."""
    from w4a8_kernels.reference import w4a8_reference, w4a16_reference

    if x.dim() != 2 or x.shape[1] != weight.k:
        raise InvalidInputError(f"activations: shape {tuple(x.shape)}; accepted: [M, K] with K = {weight.k}")
    if w_float is not None and tuple(w_float.shape) != (weight.n, weight.k):
        raise InvalidInputError(f"float weight: shape {tuple(w_float.shape)}; accepted: [N, K] = "
                                f"{(weight.n, weight.k)}")
    w4 = w4a16_reference(x, weight.w_q, weight.scales, weight.group_size, weight.zeros)
    w4a8 = w4a8_reference(x, weight.w_q, weight.scales, weight.group_size, weight.zeros)
    ref = None if w_float is None else x.to(torch.float64) @ w_float.to(torch.float64).t()
    return ErrorSplit(layer, weight.n, weight.k, weight.group_size, int(x.shape[0]), inputs,
                      _part("weight", w4, ref), _part("activation", w4a8, w4), _part("together", w4a8, ref))


def activations(layer, m: int, kind: str = "synthetic", seed: int = 0) -> torch.Tensor:
    """[m, K] bf16 activations for a layer: seeded normal (`kind` "synthetic", what the bench
    feeds), or a MiniLM layer's real inputs over the packaged sentences ("real"; the first m
    tokens, fewer where the sentences hold fewer)."""
    from workbench.bench import bench_activation

    if kind == "real":
        from workbench.trained import capture_activations

        return capture_activations(layer.name).to(torch.bfloat16)[:m]
    if kind == "synthetic":
        return bench_activation(m, layer.in_features, seed)
    raise InvalidInputError(f"activations {kind!r}; accepted: synthetic, real")


def split_of_layer(layer, m: int, kind: str = "synthetic", seed: int = 0) -> ErrorSplit:
    """The split for a workbench layer: on seeded normal bf16 activations (`kind` "synthetic",
    what the bench feeds) or on the real inputs of a MiniLM layer over the packaged sentences
    ("real"; the first m tokens)."""
    from workbench.bench import int4_weight_of

    x = activations(layer, m, kind, seed)
    if kind == "real":
        from workbench.trained import SENTENCES

        inputs = (f"real activations: all-MiniLM-L6-v2's inputs to {layer.name} over {len(SENTENCES)} "
                  f"sentences, {x.shape[0]} tokens, bf16")
    else:
        inputs = f"synthetic activations: seeded normal(0, 1), bf16, {m} tokens (as the bench feeds)"
    return error_split(int4_weight_of(layer), x, layer.source_weight, layer=layer.name, inputs=inputs)
