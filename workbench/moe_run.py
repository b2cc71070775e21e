"""A fused-MoE layer run on this CPU: routing, one GEMM pair per expert, the gated activation.

What vLLM's W4A8-INT8 MoE path computes (`torch.ops._C.dynamic_4bit_int_moe`,
csrc/cpu/dynamic_4bit_int_moe_cpu.cpp, the same in both releases the workbench holds): each token's top-k experts from a
softmax over the router logits, renormalized (fused_moe/router/cpu_router.py); per expert,
`aten._dyn_quant_matmul_4bit` on the expert's tokens for w13 ([2I, H]: gate rows then up rows),
act = silu(gate) * up (or gelu_tanh(gate) * up), the same op for w2 ([H, I]); the outputs
weighted by the routing weights and summed into each token's row.

Paths, each held to a float64 reference of what it computes:
- `vllm_dyn_quant`: that composition with torch's own `_dyn_quant_pack_4bit_weight` /
  `_dyn_quant_matmul_4bit` and vLLM's packing (oracle/w4a8_int8.py `pack_int4_weights_for_kleidi`):
  KleidiAI on Arm; elsewhere torch's portable implementation of the same ops.
- `w4a8_native`: this project's int8 x int4 kernels (`w4a8_kernels.cpu_w4a8`), per-token int8
  activations into each GEMM.
- `w4a16_fallback`: the W4A16 kernels (`w4a8_kernels.cpu_w4a16`), activations unquantized.
References (float64): `w4a8` quantizes each GEMM's input per token (symmetric int8, as the
native kernel does) and sums exact integer dots; `w4a8_asym` quantizes each row with a scale
and zero point (what `_dyn_quant_matmul_4bit` does: KleidiAI's qai8dx scheme); `w4a16`
dequantizes the weights only (no activation quantization: the layer's float result).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from w4a8_kernels import cpu_w4a8, cpu_w4a16, reference
from workbench.errors import InvalidInputError
from workbench.metrics import max_abs, rel_frobenius
from workbench.synthetic import quantize_rtn

ACTIVATIONS = ("silu", "gelu_tanh")
PATHS = ("vllm_dyn_quant", "w4a8_native", "w4a16_fallback")


@dataclass(frozen=True)
class Expert:
    """One expert's quantized weights: int4 values held as int8, scales [rows, cols // g]."""

    w13_q: torch.Tensor  # [2I, H]
    w13_s: torch.Tensor
    w2_q: torch.Tensor  # [H, I]
    w2_s: torch.Tensor


@dataclass(frozen=True)
class MoEWeights:
    """The experts of one layer, symmetric int4, group `group_size` (-1: channelwise)."""

    experts: tuple[Expert, ...]
    hidden_size: int
    intermediate_size: int
    group_size: int

    @property
    def num_experts(self) -> int:
        return len(self.experts)


def synthetic_moe(num_experts: int, hidden_size: int, intermediate_size: int,
                  group_size: int = 128, seed: int = 0) -> MoEWeights:
    """Random Gaussian expert weights (std 1/sqrt(fan-in)), RTN-quantized as compressed-tensors
    writes them: bf16 group scales (fp32 per channel, as vLLM packs them for KleidiAI)."""
    for name, v in (("num_experts", num_experts), ("hidden_size", hidden_size),
                    ("intermediate_size", intermediate_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidInputError(f"{name}: expected a positive integer, got {v!r}")
    g_h = hidden_size if group_size == -1 else group_size
    g_i = intermediate_size if group_size == -1 else group_size
    if hidden_size % g_h or intermediate_size % g_i or hidden_size % 2 or intermediate_size % 2:
        raise InvalidInputError(
            f"group_size: {group_size} must divide hidden_size ({hidden_size}) and "
            f"intermediate_size ({intermediate_size}), both even; accepted: -1 or such a group")
    gen = torch.Generator().manual_seed(seed)
    scale_dtype = torch.float32 if group_size == -1 else torch.bfloat16
    experts = []
    for _ in range(num_experts):
        w13 = torch.randn(2 * intermediate_size, hidden_size, generator=gen) / hidden_size ** 0.5
        w2 = torch.randn(hidden_size, intermediate_size, generator=gen) / intermediate_size ** 0.5
        q13, s13, _ = quantize_rtn(w13, group_size=group_size, scale_dtype=scale_dtype)
        q2, s2, _ = quantize_rtn(w2, group_size=group_size, scale_dtype=scale_dtype)
        experts.append(Expert(q13, s13, q2, s2))
    return MoEWeights(tuple(experts), hidden_size, intermediate_size, group_size)


def route(router_logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the experts, top-k, renormalized (vLLM's default CPU routing): float32
    weights [T, k] and int64 expert ids [T, k]."""
    probs = torch.softmax(router_logits.to(torch.float32), dim=-1)
    w, ids = torch.topk(probs, top_k, dim=-1)
    return w / w.sum(dim=-1, keepdim=True), ids


def tokens_per_expert(ids: torch.Tensor, num_experts: int) -> list[int]:
    return torch.bincount(ids.flatten(), minlength=num_experts).tolist()


def _act(y13: torch.Tensor, inter: int, activation: str) -> torch.Tensor:
    g, u = y13[:, :inter], y13[:, inter:]
    if activation == "gelu_tanh":
        return torch.nn.functional.gelu(g, approximate="tanh") * u
    return torch.nn.functional.silu(g) * u


def _combine(x: torch.Tensor, w: torch.Tensor, ids: torch.Tensor, num_experts: int,
             gemm_pair: Callable[[int, torch.Tensor], torch.Tensor],
             dtype: torch.dtype) -> torch.Tensor:
    """Group tokens by expert, run each expert's pair, weight, sum into the tokens' rows."""
    out = torch.zeros(x.shape[0], x.shape[1], dtype=dtype)
    flat_ids, flat_w = ids.flatten(), w.flatten()
    tok = torch.arange(x.shape[0]).repeat_interleave(ids.shape[1])
    for e in range(num_experts):
        sel = (flat_ids == e).nonzero().flatten()
        if sel.numel() == 0:
            continue
        y = gemm_pair(e, x[tok[sel]])
        out.index_add_(0, tok[sel], y.to(dtype) * flat_w[sel].to(dtype).unsqueeze(1))
    return out


# --------------------------------------------------------------------------- paths


def kleidi_pack(w_q: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """vLLM's `pack_int4_weights_for_kleidi` (oracle/w4a8_int8.py:189-232 of the pinned release): nibbles
    shifted to [0, 15], pairs along K, bf16 group scales or fp32 channel scales."""
    out_f, in_f = w_q.shape
    tmp = w_q.to(torch.int16).add(8)
    nibbles = ((tmp[:, 1::2] << 4) | tmp[:, ::2]).to(torch.uint8)
    s = scales.to(torch.float32 if group_size == -1 else torch.bfloat16)
    g = in_f if group_size == -1 else group_size
    return torch.ops.aten._dyn_quant_pack_4bit_weight(nibbles, s, None, g, in_f, out_f)


def dyn_quant_available() -> tuple[bool, str]:
    """Whether this torch has the ops vLLM's Arm MoE path calls (cpu_int4_moe.py's probe)."""
    ok = all(hasattr(torch.ops.aten, op) for op in ("_dyn_quant_matmul_4bit",
                                                    "_dyn_quant_pack_4bit_weight"))
    return ok, f"torch {torch.__version__}" + ("" if ok else " has no _dyn_quant_* 4bit ops")


@dataclass
class Prepared:
    """The experts laid out once for every path (packing is per layer, not per call)."""

    weights: MoEWeights
    kleidi: list = field(default_factory=list)
    native: list = field(default_factory=list)
    w4a16: list = field(default_factory=list)


def prepare(weights: MoEWeights, paths: tuple[str, ...] = PATHS) -> Prepared:
    p = Prepared(weights)
    g = weights.group_size
    for ex in weights.experts:
        if "vllm_dyn_quant" in paths:
            p.kleidi.append((kleidi_pack(ex.w13_q, ex.w13_s, g), kleidi_pack(ex.w2_q, ex.w2_s, g)))
        if "w4a8_native" in paths:
            p.native.append((cpu_w4a8.prepare_w4a8(ex.w13_q, ex.w13_s, g),
                             cpu_w4a8.prepare_w4a8(ex.w2_q, ex.w2_s, g)))
        if "w4a16_fallback" in paths:
            p.w4a16.append((cpu_w4a16.prepare_w4a16(ex.w13_q, ex.w13_s, g),
                            cpu_w4a16.prepare_w4a16(ex.w2_q, ex.w2_s, g)))
    return p


def run_path(path: str, prep: Prepared, x: torch.Tensor, w: torch.Tensor, ids: torch.Tensor,
             activation: str) -> torch.Tensor:
    """One path's MoE output, float32 [T, H]."""
    mw = prep.weights
    h, inter = mw.hidden_size, mw.intermediate_size
    g = mw.group_size

    if path == "vllm_dyn_quant":
        gk = (lambda k: k) if g == -1 else (lambda k: g)

        def pair(e, xe):
            w13, w2 = prep.kleidi[e]
            y13 = torch.ops.aten._dyn_quant_matmul_4bit(xe, w13, gk(h), h, 2 * inter)
            return torch.ops.aten._dyn_quant_matmul_4bit(_act(y13, inter, activation), w2,
                                                         gk(inter), inter, h)
    elif path == "w4a8_native":
        def pair(e, xe):
            w13, w2 = prep.native[e]
            return cpu_w4a8.w4a8_native(_act(cpu_w4a8.w4a8_native(xe, w13), inter, activation),
                                        w2)
    elif path == "w4a16_fallback":
        def pair(e, xe):
            w13, w2 = prep.w4a16[e]
            return cpu_w4a16.w4a16_fallback(
                _act(cpu_w4a16.w4a16_fallback(xe, w13), inter, activation), w2)
    else:
        raise InvalidInputError(f"path: {path!r}; accepted: {', '.join(PATHS)}")
    return _combine(x.to(torch.float32), w, ids, mw.num_experts, pair, torch.float32)


def run_reference(kind: str, weights: MoEWeights, x: torch.Tensor, w: torch.Tensor,
                  ids: torch.Tensor, activation: str) -> torch.Tensor:
    """The float64 ground truth: `w4a8` (per-token int8 into both GEMMs), `w4a8_asym` (per-row
    int8 with a zero point, as `_dyn_quant_matmul_4bit`) or `w4a16`."""
    g = weights.group_size
    inter = weights.intermediate_size

    def gemm(xe, w_q, s):
        gg = w_q.shape[1] if g == -1 else g
        if kind == "w4a8":
            return reference.w4a8_reference(xe, w_q, s, gg)
        if kind == "w4a8_asym":
            return reference.w4a8_asym_reference(xe, w_q, s, gg)
        return reference.w4a16_reference(xe, w_q, s, gg)

    def pair(e, xe):
        ex = weights.experts[e]
        return gemm(_act(gemm(xe, ex.w13_q, ex.w13_s), inter, activation), ex.w2_q, ex.w2_s)

    return _combine(x.to(torch.float64), w.to(torch.float64), ids, weights.num_experts, pair,
                    torch.float64)


@dataclass(frozen=True)
class MoERunRow:
    """One (tokens, top_k) point: per-expert token counts and each path's error."""

    tokens: int
    top_k: int
    activation: str
    tokens_per_expert: tuple[int, ...]
    errors: dict  # path -> reference -> {"rel_frobenius", "max_abs"}


# which reference each path is held to (its own arithmetic), and the W4A16 one for all
OWN_REFERENCE = {"vllm_dyn_quant": "w4a8_asym", "w4a8_native": "w4a8",
                 "w4a16_fallback": "w4a16"}
REFERENCES = ("w4a8", "w4a8_asym", "w4a16")


def sweep(weights: MoEWeights, tokens: tuple[int, ...] = (1, 4, 16, 64),
          top_ks: tuple[int, ...] = (1, 2, 4), activation: str = "silu",
          paths: tuple[str, ...] | None = None, seed: int = 0) -> list[MoERunRow]:
    """Every path at every (tokens, top_k), against both float64 references."""
    if activation not in ACTIVATIONS:
        raise InvalidInputError(f"activation: {activation!r}; accepted: {', '.join(ACTIVATIONS)}")
    if paths is None:
        paths = PATHS if dyn_quant_available()[0] else PATHS[1:]
    prep = prepare(weights, paths)
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for t in tokens:
        x = torch.randn(t, weights.hidden_size, generator=gen)
        logits = torch.randn(t, weights.num_experts, generator=gen)
        for k in top_ks:
            if k > weights.num_experts:
                raise InvalidInputError(f"top_k: {k} is more than the {weights.num_experts} "
                                        "experts")
            w, ids = route(logits, k)
            refs = {r: run_reference(r, weights, x, w, ids, activation) for r in REFERENCES}
            errs = {}
            for path in paths:
                out = run_path(path, prep, x, w, ids, activation)
                errs[path] = {r: {"rel_frobenius": rel_frobenius(out, ref),
                                  "max_abs": max_abs(out, ref)} for r, ref in refs.items()}
            rows.append(MoERunRow(t, k, activation, tuple(tokens_per_expert(ids,
                                                                              weights.num_experts)),
                                  errs))
    return rows


@dataclass(frozen=True)
class MoETiming:
    """Each path's time for one MoE layer call on this CPU, interleaved in one process, and
    its ratio to the W4A16 fallback's: median over rounds, with the 20-80% spread of the
    per-round ratios; `loaded` when other processes took the cores the run needed."""

    tokens: int
    top_k: int
    median_ms: dict  # path -> ms
    ratio_to_w4a16: dict  # path -> (median, p20, p80) of per-round ratios
    rounds: int
    loaded: bool
    load: dict


def time_paths(weights: MoEWeights, tokens: int, top_k: int, activation: str = "silu",
               rounds: int = 7, paths: tuple[str, ...] | None = None,
               seed: int = 0) -> MoETiming:
    """Round-robin timing of the paths on one routed batch (weights prepared once, a warm-up
    call each): ratios within one process, as the machine is shared."""
    import statistics
    import time

    from workbench.bench import quantile
    from workbench.noise import cpu_sample, load_check

    if paths is None:
        paths = PATHS if dyn_quant_available()[0] else PATHS[1:]
    if "w4a16_fallback" not in paths:
        raise InvalidInputError("paths: the W4A16 fallback is the ratios' reference; include it")
    prep = prepare(weights, paths)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, weights.hidden_size, generator=gen)
    w, ids = route(torch.randn(tokens, weights.num_experts, generator=gen), top_k)
    for p in paths:  # warm-up: the W4A16 fallback tunes its path per M bucket on first calls
        for _ in range(2):
            run_path(p, prep, x, w, ids, activation)
    samples: dict[str, list[float]] = {p: [] for p in paths}
    start = cpu_sample()
    for r in range(rounds):
        order = paths[r % len(paths):] + paths[:r % len(paths)]
        for p in order:
            t0 = time.perf_counter()
            run_path(p, prep, x, w, ids, activation)
            samples[p].append((time.perf_counter() - t0) * 1e3)
    check = load_check(start, cpu_sample(), torch.get_num_threads())
    ref = samples["w4a16_fallback"]
    ratios = {}
    for p in paths:
        rs = sorted(a / b for a, b in zip(samples[p], ref))
        ratios[p] = (statistics.median(rs), quantile(rs, 0.2), quantile(rs, 0.8))
    return MoETiming(tokens, top_k, {p: statistics.median(v) for p, v in samples.items()},
                     ratios, rounds, check.loaded, check.to_dict())
