"""H200 benchmark of the Triton W4A8 / W4A16 kernels against cuBLAS and torch's tinygemm.

One command runs the phases a device session needs, in order, within a time budget:

    python benchmarks/gpu_bench.py --out DIR --commit SHA [--phases compile,check,sweep,bench]

- compile: compiles every kernel variant the later phases launch, in parallel processes
  (Triton's on-disk cache then serves the main process).
- check:   full-size shapes; every output element against a float32 GPU product under
           the rounding bound, sampled rows against kernels.reference (float64, CPU, in
           worker processes) with bf16-ulp statistics; the Triton quantizer against
           kernels.quant bit for bit.
- sweep:   tile configs per M bucket (decode / mid / prefill) on every shape; the winners
           (best geometric mean over shapes) replace the module tables for this run.
- bench:   M from 1 to 16384 on every shape: cuBLAS bf16, cuBLAS int8 `_int_mm` (second
           operand the transposed view of row-major [N, K]), tinygemm
           `_weight_int4pack_mm` (g128), a plain Triton int8 GEMM, and the Triton kernels.
- profile: one launch of each Triton GEMM at (8192, 8192, M=4096), meant to run under ncu.

Timing: CUDA events around CUDA-graph replays (no launch gaps) over rotating copies of the
inputs, enough that they do not fit in the 60 MB L2; medians of many samples.
Results (tidy, one record per kernel, N, K, M) go to DIR as JSON and CSV with provenance.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import multiprocessing as mp
import statistics
import subprocess
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from w4a8_kernels.triton_runtime import TileConfig, m_bucket  # noqa: E402

# %% what is measured

# (N, K). The last is a TP shard: Qwen2-72B's down_proj (intermediate 29568) split over
# 2 GPUs gives K = 14784, not a multiple of 128 (the llm-compressor 973 failure).
SHAPES = [(4096, 4096), (8192, 8192), (28672, 8192), (4096, 14336), (8192, 14784)]
ALIGNED = [(4096, 4096), (8192, 8192), (28672, 8192)]
M_LIST = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
CHECK_MS = [1, 16, 200, 4096]
EXTRA_GROUP_MS = [1, 16, 128, 1024, 4096, 16384]  # g32 / g64 next to g128: fewer points
SWEEP_MS = {"decode": [1, 16], "mid": [256], "prefill": [4096]}


def groups_for(shape: tuple[int, int]) -> list[int]:
    """Group sizes measured on a shape: per-channel and g128 where K allows it."""
    n, k = shape
    gs = [-1, 128] if k % 128 == 0 else [-1, 64]
    if shape == (8192, 8192):
        gs += [32, 64]
    return gs


# Datasheet limits of the H200 SXM (dense): the ratios below are against these.
LIMITS = {"int8_tops": 1979.0, "bf16_tflops": 989.0, "hbm_gbs": 4800.0}

# %% candidate configs (block_k counts bytes of packed K per step for W4A8/W4A16: each
# step covers 2 * block_k values of K; for the plain int8 GEMM it is K per step)

T = TileConfig
# Session 1 swept tiles (variant 0; its candidates are in results/h200_sweep.json); these
# are session 2's: the variants (TileConfig.variant) and decode split targets around the
# winning tiles (results/h200_sweep_variants_*.json). Grouped W4A8 variant 2 scales each
# group's int32 dot one dot later; a variant 1 (after both dots of a step) measured the
# same as 0 and was removed.
CANDIDATES = {
    ("w4a8", "prefill"): [
        T(128, 128, 128, num_warps=8, num_stages=3, swap_ab=True),
        T(128, 128, 128, num_warps=8, num_stages=3, swap_ab=True, variant=2),
        T(256, 128, 128, num_warps=8, num_stages=3, swap_ab=True),
        T(256, 128, 128, num_warps=8, num_stages=3, swap_ab=True, variant=2),
        T(128, 256, 128, num_warps=8, num_stages=3, swap_ab=True),
        T(128, 256, 128, num_warps=8, num_stages=3, swap_ab=True, variant=2),
        T(128, 128, 128, num_warps=8, num_stages=4, swap_ab=True, variant=2),
        T(128, 256, 128, num_warps=8, num_stages=3, variant=2),
    ],
    ("w4a8", "mid"): [
        T(64, 128, 128, num_warps=4, num_stages=4, swap_ab=True),
        T(64, 128, 128, num_warps=4, num_stages=4, swap_ab=True, variant=2),
        T(64, 256, 128, num_warps=8, num_stages=3, swap_ab=True),
        T(64, 256, 128, num_warps=8, num_stages=3, swap_ab=True, variant=2),
        T(32, 128, 128, num_warps=4, num_stages=4, swap_ab=True, variant=2),
    ],
    ("w4a8", "decode"): [
        T(16, 64, 128, split_k=0, num_stages=4, swap_ab=True),
        T(16, 64, 128, split_k=0, num_stages=4, swap_ab=True, variant=2),
        T(16, 64, 128, split_k=0, num_stages=4, swap_ab=True, programs_per_sm=4),
        T(16, 64, 128, split_k=0, num_stages=4, swap_ab=True, variant=2, programs_per_sm=4),
        T(16, 64, 128, split_k=0, num_stages=4, swap_ab=True, programs_per_sm=8),
        T(16, 64, 128, split_k=0, num_stages=4, swap_ab=True, variant=2, programs_per_sm=8),
        T(16, 64, 256, split_k=0, num_stages=3, swap_ab=True, programs_per_sm=4),
        T(16, 128, 128, split_k=0, num_stages=4, swap_ab=True, variant=2, programs_per_sm=4),
    ],
    # W4A16 variant bits: 1 = integer dequant then a separate scale multiply, 2 = the two
    # dots of a step in two accumulators (every wgmma asynchronous).
    ("w4a16", "prefill"): [
        T(256, 128, 64, num_warps=8, num_stages=3, swap_ab=True),
        T(256, 128, 64, num_warps=8, num_stages=3, swap_ab=True, variant=1),
        T(128, 128, 64, num_warps=8, num_stages=4, swap_ab=True, variant=2),
        T(128, 128, 64, num_warps=8, num_stages=4, swap_ab=True, variant=3),
        T(128, 128, 64, num_warps=8, num_stages=3, swap_ab=True, variant=2),
        T(64, 256, 64, num_warps=8, num_stages=4, swap_ab=True, variant=2),
        T(64, 256, 64, num_warps=8, num_stages=3, swap_ab=True, variant=2),
        T(128, 128, 128, num_warps=8, num_stages=3, swap_ab=True, variant=2),
        T(64, 128, 64, num_warps=4, num_stages=4, swap_ab=True, variant=2),
        T(128, 64, 64, num_warps=4, num_stages=4, swap_ab=True, variant=2),
    ],
    ("w4a16", "mid"): [
        T(128, 128, 64, num_warps=8, num_stages=4, swap_ab=True),
        T(128, 128, 64, num_warps=8, num_stages=4, swap_ab=True, variant=2),
        T(64, 128, 64, num_warps=4, num_stages=4, swap_ab=True, variant=2),
        T(64, 256, 64, num_warps=8, num_stages=4, swap_ab=True, variant=2),
        T(64, 128, 64, num_warps=4, num_stages=4),
        T(64, 128, 64, num_warps=4, num_stages=4, variant=2),
    ],
    ("w4a16", "decode"): [
        T(16, 128, 64, split_k=0, num_stages=4), T(16, 128, 128, split_k=0, num_stages=4),
        T(16, 128, 64, split_k=0, num_stages=4, programs_per_sm=4),
        T(16, 128, 64, split_k=0, num_stages=4, programs_per_sm=8),
        T(16, 128, 128, split_k=0, num_stages=4, programs_per_sm=4),
        T(16, 128, 128, split_k=0, num_stages=4, programs_per_sm=8),
        T(16, 64, 64, split_k=0, num_stages=4, programs_per_sm=4),
        T(16, 64, 128, split_k=0, num_stages=4, programs_per_sm=4),
        T(16, 128, 64, split_k=0, num_stages=6, programs_per_sm=4),
        T(16, 64, 128, split_k=0, num_stages=4, swap_ab=True, variant=2, programs_per_sm=4),
    ],
    ("int8", "prefill"): [
        T(128, 256, 128, num_warps=8, num_stages=3), T(256, 128, 128, num_warps=8, num_stages=3),
        T(128, 256, 128, num_warps=8, num_stages=4), T(128, 128, 128, num_warps=8, num_stages=4),
        T(128, 256, 64, num_warps=8, num_stages=4), T(256, 128, 64, num_warps=8, num_stages=4),
    ],
    ("int8", "mid"): [
        T(64, 128, 128, num_warps=4, num_stages=4), T(64, 256, 128, num_warps=4, num_stages=4),
        T(128, 128, 128, num_warps=4, num_stages=4),
    ],
    ("int8", "decode"): [
        T(16, 64, 256, num_warps=4, num_stages=4), T(16, 128, 128, num_warps=4, num_stages=4),
    ],
}

LOG: list[str] = []


def log(msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    LOG.append(line)


# %% timing

def _events(n: int):
    return [torch.cuda.Event(enable_timing=True) for _ in range(n)]


def time_calls(fns: list, samples: int = 25) -> dict:
    """Median time of one call, in us. `fns` rotate over distinct input copies.

    Short calls are captured in a CUDA graph (a pass over all copies, repeated to last
    >= 1 ms) and timed per replay; long calls are timed one by one with events.
    """
    for f in fns:
        f()
    torch.cuda.synchronize()
    est_ms = float("inf")
    for _ in range(2):  # the smaller of two passes: one hiccup must not pick the method
        s, e = _events(2)
        s.record()
        for f in fns:
            f()
        e.record()
        torch.cuda.synchronize()
        est_ms = min(est_ms, s.elapsed_time(e) / len(fns))
    # Graphs remove host launch time, which exceeds the GPU time of short calls.
    if est_ms < 2.0:
        reps = max(1, math.ceil(1.0 / (est_ms * len(fns) + 1e-6)))
        reps = min(reps, 200)
        g = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for f in fns:  # warm on the capture stream (allocator pools)
                f()
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(g):
            for _ in range(reps):
                for f in fns:
                    f()
        g.replay()
        torch.cuda.synchronize()
        starts, ends = _events(samples), _events(samples)
        for i in range(samples):
            starts[i].record()
            g.replay()
            ends[i].record()
        torch.cuda.synchronize()
        per = [starts[i].elapsed_time(ends[i]) * 1e3 / (reps * len(fns)) for i in range(samples)]
        method = f"graph x{reps * len(fns)}"
        del g
    else:
        n = max(5, min(samples, int(200 / max(est_ms, 1e-3))))
        starts, ends = _events(n), _events(n)
        for i in range(n):
            starts[i].record()
            fns[i % len(fns)]()
            ends[i].record()
        torch.cuda.synchronize()
        per = [starts[i].elapsed_time(ends[i]) * 1e3 for i in range(n)]
        method = "events"
    per.sort()
    q = lambda p: per[min(len(per) - 1, int(p * len(per)))]  # noqa: E731
    return {"time_us": statistics.median(per), "p20_us": q(0.2), "p80_us": q(0.8),
            "samples": len(per), "method": method}


L2_BYTES = 60 * 2 ** 20


def rotations(cold_bytes: int) -> int:
    """Copies to rotate so one pass streams >= 3x the L2 from HBM."""
    return max(1, min(32, math.ceil(3 * L2_BYTES / max(cold_bytes, 1))))


# %% problem data

def make_weight(shape, g, seed=0):
    n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w_q = torch.randint(-8, 8, (n, k), generator=gen, device="cuda", dtype=torch.int8)
    ng = 1 if g == -1 else k // g
    scales = torch.rand(n, ng, generator=gen, device="cuda") * 0.02 + 0.001
    return w_q, scales


def make_x(m, k, seed=1, dtype=torch.bfloat16):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(m, k, generator=gen, device="cuda").to(dtype)


def dequant_f32(w_q, scales, g):
    n, k = w_q.shape
    gg = k if g == -1 else g
    return (w_q.float().view(n, k // gg, gg) * scales.float().unsqueeze(-1)).reshape(n, k)


def tinygemm_pack(w_q, scales, g=128):
    """torch's tinygemm layout: uint8 [N, K/2] (even column in the high nibble) -> int4pack;
    scale-and-zero [K/g, N, 2] bf16 with dequant (q - 8) * scale + zero, zero = 0."""
    u = (w_q.to(torch.int32) + 8)
    packed_u8 = ((u[:, ::2] << 4) | u[:, 1::2]).to(torch.uint8)
    wp = torch._convert_weight_to_int4pack(packed_u8, 8)
    sz = torch.stack([scales.t(), torch.zeros_like(scales.t())], dim=-1).to(torch.bfloat16).contiguous()
    return wp, sz


# %% the kernels, as callables

def api():
    from w4a8_kernels import triton_w4a8 as w8
    from w4a8_kernels import triton_w4a16 as w16
    import gpu_int8_gemm as i8
    return w8, w16, i8


def cfg_for(kind: str, cfg: TileConfig, packed) -> TileConfig:
    """W4A8 grouped launches need block_k == g; others keep the candidate's block_k, fitted."""
    w8, _, _ = api()
    if kind == "w4a8" and not packed.per_channel:
        return replace(cfg, block_k=packed.group_size)
    if kind == "w4a16" and not packed.per_channel and cfg.block_k > packed.group_size:
        cfg = replace(cfg, block_k=packed.group_size)
    return w8.fit_block_k(cfg, packed.half_k)


# %% compile phase

def _compile_job(job: dict) -> dict:
    """Worker: launch one config once on a small problem with the same specializations."""
    try:
        torch.cuda.init()
        w8, w16, i8 = api()
        kind, cfg, g, k, split = job["kind"], TileConfig(**job["cfg"]), job["g"], job["k"], job["split"]
        n, m = 256, job.get("m", 32)
        w_q, scales = make_weight((n, k), g)
        if kind == "int8":
            xq = torch.randint(-128, 127, (m, k), device="cuda", dtype=torch.int8)
            i8.int8_gemm(xq, torch.ones(m, device="cuda"), w_q, torch.ones(n, device="cuda"), cfg)
        elif kind == "quant":
            w8.quantize_per_token_int8_triton(make_x(m, k))
        else:
            packed = w8.prepare_w4a8(w_q, scales, g)
            c = cfg_for("w4a16" if kind == "w4a16i" else kind, cfg, packed)
            if split is not None:
                c = replace(c, split_k=split)
            x = make_x(m, k)
            if kind == "w4a8":
                xq, xs = w8.quantize_per_token_int8_triton(x)
                w8.w4a8_matmul_quantized(xq, xs, packed, torch.bfloat16, config=c)
            else:
                w16.w4a16_matmul(x, packed, config=c, int_dequant=kind == "w4a16i")
        torch.cuda.synchronize()
        return {"job": job, "ok": True}
    except Exception as exc:  # noqa: BLE001 - reported per job
        return {"job": job, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}


def compile_jobs(kinds_cfgs, groups_k) -> list[dict]:
    """Jobs covering (kind, config, group, K alignment, split or not)."""
    jobs, seen = [], set()
    for kind, cfg in kinds_cfgs:
        for g, k in groups_k:
            if kind in ("int8", "w4a16i") and g != -1:
                continue
            if cfg.variant and not variant_applies(kind, g, cfg.variant):
                continue
            splits = [1, 2] if cfg.split_k == 0 else [None]
            eff = (replace(cfg, block_k=g) if g > 0 and (kind == "w4a8" or cfg.block_k > g)
                   else cfg)
            for split in splits:
                key = (kind, eff, g, k, split)
                if key in seen:
                    continue
                seen.add(key)
                jobs.append({"kind": kind, "cfg": asdict(cfg), "g": g, "k": k, "split": split,
                             "m": 1 if cfg.block_m == 16 else 64})
    return jobs


def run_compile(jobs: list[dict], workers: int) -> list[dict]:
    t0 = time.time()
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        res = list(ex.map(_compile_job, jobs))
    bad = [r for r in res if not r["ok"]]
    log(f"compiled {len(jobs)} variants in {time.time() - t0:.0f}s with {workers} processes; "
        f"{len(bad)} failed")
    for r in bad[:20]:
        log(f"  compile failed: {r['job']['kind']} {r['job']['cfg']} g={r['job']['g']} -> {r['error'][:160]}")
    return res


# %% check phase

def _ulp_bf16(v):
    _, e = torch.frexp(v)
    return torch.ldexp(torch.ones_like(v), e - 8)


def _cpu_reference_job(job: dict) -> dict:
    """Worker: kernels.reference in float64 on the sampled rows; bound and ulp statistics.

    The rows of every M are stacked into one reference call per kernel: rows are
    independent (per-token quantization included), and the weight is dequantized once.
    """
    torch.set_num_threads(job.get("threads", 4))
    from w4a8_kernels.quant import dequantize_groupwise, quantize_per_token_int8
    from w4a8_kernels.reference import w4a16_reference, w4a8_reference
    w_q, scales, g = job["w_q"], job["scales"], job["g"]
    w_abs = dequantize_groupwise(w_q, scales, g, dtype=torch.float64).abs_()
    items = job["items"]
    x = torch.cat([it["x"] for it in items])
    bounds = [0]
    for it in items:
        bounds.append(bounds[-1] + it["x"].shape[0])
    out = []
    for kernel in ("w4a8", "w4a16", "w4a16_int"):
        if not all(kernel in it for it in items):
            continue
        got_all = torch.cat([it[kernel] for it in items])
        if kernel == "w4a8":
            ref_all = w4a8_reference(x, w_q, scales, g)
            xq, xs = quantize_per_token_int8(x)
            xa = xq.double() * xs.double()
            u_w = 0.0
        else:
            ref_all = w4a16_reference(x, w_q, scales, g)
            xa = x.double()
            # scale, then w * scale, rounded to bf16; exact integers on the int path
            u_w = 0.0 if kernel == "w4a16_int" else 2.0 ** -8
        mag_all = xa.abs() @ w_abs.t()
        for i, it in enumerate(items):
            sl = slice(bounds[i], bounds[i + 1])
            ref, got, mag = ref_all[sl], got_all[sl], mag_all[sl]
            err = (got.double() - ref).abs()
            budget = 2.0 ** -8 * ref.abs() + (u_w + w_q.shape[1] * 2.0 ** -24) * mag
            out.append({
                "kernel": kernel, "M": it["M"], "rows": it["rows"],
                "max_abs_err": err.max().item(),
                "max_err_over_budget": (err / budget).max().item(),
                "within_rounding_bound": bool((err <= budget).all()),
                "frac_equal_to_bf16_rounded_ref": (got == ref.to(torch.bfloat16)).double().mean().item(),
                "max_ulp": (err / _ulp_bf16(ref)).max().item(),
                "rel_fro": (err.norm() / ref.norm()).item(),
            })
    return {"shape": job["shape"], "g": g, "results": out}


def run_check(shapes, deadline) -> dict:
    w8, w16, _ = api()
    from w4a8_kernels.quant import quantize_per_token_int8
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu_checks, futures = [], []
    ctx = mp.get_context("spawn")
    ex = ProcessPoolExecutor(max_workers=3, mp_context=ctx)
    for shape in shapes:
        for g in groups_for(shape):
            if time.time() > deadline:
                log("check: time budget reached")
                break
            w_q, scales = make_weight(shape, g, seed=11)
            packed = w8.prepare_w4a8(w_q, scales, g)
            w32 = dequant_f32(w_q, scales, g)
            items = []
            for m in CHECK_MS:
                x = make_x(m, shape[1], seed=m)
                res = {"shape": list(shape), "g": g, "M": m}
                # Poison the allocator's next block so unwritten outputs show up as NaN.
                torch.full((m, shape[0]), float("nan"), dtype=torch.bfloat16, device="cuda")
                o8 = w8.w4a8_matmul(x, packed)
                torch.full((m, shape[0]), float("nan"), dtype=torch.bfloat16, device="cuda")
                o16 = w16.w4a16_matmul(x, packed)
                outs = [("w4a8", o8), ("w4a16", o16)]
                if g == -1 and int_cfg(m, packed) is not None:
                    torch.full((m, shape[0]), float("nan"), dtype=torch.bfloat16, device="cuda")
                    outs.append(("w4a16_int", w16.w4a16_matmul(x, packed, int_cfg(m, packed), True)))
                xq_t, xs_t = w8.quantize_per_token_int8_triton(x)
                # kernels.quant on the CPU is the reference (torch's CUDA reciprocal and
                # rounding may differ from the CPU's in the last bit).
                xq_c, xs_c = quantize_per_token_int8(x.cpu())
                res["quant_bit_equal_cpu_ref"] = bool(torch.equal(xq_t.cpu(), xq_c) and
                                                      torch.equal(xs_t.cpu(), xs_c))
                xq_r, xs_r = xq_c.cuda(), xs_c.cuda()
                xa_of = {"w4a8": (xq_r.float() * xs_r, 0.0), "w4a16": (x.float(), 2.0 ** -8),
                         "w4a16_int": (x.float(), 0.0)}
                for name, o in outs:
                    xa, u_w = xa_of[name]
                    ref = xa @ w32.t()
                    err = (o.float() - ref).abs()
                    # float32 reference: its own error is below K * 2^-24 * |x||w|.
                    budget = 2.0 ** -8 * ref.abs() + (u_w + 2 * shape[1] * 2.0 ** -24) * (xa.abs() @ w32.abs().t())
                    res[f"{name}_all_finite"] = bool(torch.isfinite(o).all())
                    res[f"{name}_max_err_over_budget_fp32ref"] = (err / budget).max().item()
                    res[f"{name}_within_bound_fp32ref"] = bool((err <= budget).all())
                gpu_checks.append(res)
                rows = sorted(set([0, m - 1] + torch.randperm(m)[:14].tolist()))
                items.append({"M": m, "rows": rows, "x": x[rows].cpu(),
                              **{name: o[rows].cpu() for name, o in outs}})
                del o8, o16, x, outs
            futures.append(ex.submit(_cpu_reference_job, {
                "shape": list(shape), "g": g, "w_q": w_q.cpu(), "scales": scales.cpu(),
                "items": items, "threads": 4}))
            del packed, w32, w_q, scales
            torch.cuda.empty_cache()
            log(f"check: GPU side done for {shape} g={g}")
    return {"gpu": gpu_checks, "futures": futures, "executor": ex}


def finish_check(state: dict, until: float) -> dict:
    cpu = []
    for f in state["futures"]:
        try:
            cpu.append(f.result(timeout=max(5.0, until - time.time())))
        except Exception as exc:  # noqa: BLE001
            cpu.append({"error": f"{type(exc).__name__}: {exc}"})
    state["executor"].shutdown(wait=False, cancel_futures=True)
    ok_gpu = all(v for r in state["gpu"] for key, v in r.items()
                 if key.endswith(("_within_bound_fp32ref", "_all_finite", "quant_bit_equal_cpu_ref")))
    ok_cpu = all("results" in c and all(r["within_rounding_bound"] for r in c["results"]) for c in cpu)
    log(f"check: all-element fp32 bound {'PASS' if ok_gpu else 'FAIL'}; "
        f"kernels.reference float64 rows {'PASS' if ok_cpu else 'FAIL'}")
    for c in cpu:
        for r in c.get("results", []):
            if not r["within_rounding_bound"]:
                log(f"  FAIL {c['shape']} g={c['g']} {r['kernel']} M={r['M']}: "
                    f"err/budget {r['max_err_over_budget']:.3g}")
    return {"gpu_all_elements": state["gpu"], "reference_rows": cpu,
            "pass_all_elements": ok_gpu, "pass_reference_rows": ok_cpu}


# %% providers for sweep and bench

class Problem:
    """Rotated copies of one shape's weights in every layout, built on demand."""

    def __init__(self, shape, g):
        self.shape, self.g = shape, g
        self.w_q, self.scales = make_weight(shape, g)
        self._cache = {}

    def get(self, what):
        if what in self._cache:
            return self._cache[what]
        w8, _, _ = api()
        n, k = self.shape
        if what == "packed":
            one = w8.prepare_w4a8(self.w_q, self.scales, self.g)
            r = rotations(one.nbytes)
            val = [one] + [w8.prepare_w4a8(self.w_q, self.scales, self.g) for _ in range(r - 1)]
        elif what == "bf16":
            one = dequant_f32(self.w_q, self.scales, self.g).to(torch.bfloat16)
            val = [one] + [one.clone() for _ in range(rotations(one.numel() * 2) - 1)]
        elif what == "int8":
            val = [self.w_q] + [self.w_q.clone() for _ in range(rotations(n * k) - 1)]
        elif what == "int8_scale":
            val = torch.rand(n, device="cuda") * 0.02 + 0.001
        elif what == "tinygemm":
            one = tinygemm_pack(self.w_q, self.scales, 128)
            val = [one] + [(one[0].clone(), one[1]) for _ in range(rotations(n * k // 2) - 1)]
        self._cache[what] = val
        return val

    def free(self):
        self._cache.clear()
        torch.cuda.empty_cache()


def x_copies(m, k, cold_weight_bytes, dtype=torch.bfloat16):
    r = rotations(cold_weight_bytes + m * k * 2)
    return [make_x(m, k, seed=100 + i, dtype=dtype) for i in range(min(r, 8 if m >= 256 else 32))]


def build(prov: str, prob: Problem, m: int, cfg: TileConfig | None = None):
    """(callables, ops, bytes moved at least) for one provider at one M."""
    w8, w16, i8 = api()
    n, k = prob.shape
    ops = 2 * m * n * k
    out_b = m * n * 2
    if prov == "cublas_bf16":
        ws = prob.get("bf16")
        xs = x_copies(m, k, n * k * 2)
        fns = [lambda w=ws[i % len(ws)], x=xs[i % len(xs)]: x @ w.t() for i in range(max(len(ws), len(xs)))]
        return fns, ops, n * k * 2 + m * k * 2 + out_b
    if prov == "cublas_int8":
        ws = prob.get("int8")
        xs = [torch.randint(-128, 127, (m, k), device="cuda", dtype=torch.int8) for _ in range(min(len(ws), 8))]
        fns = [lambda w=ws[i % len(ws)], x=xs[i % len(xs)]: torch._int_mm(x, w.t()) for i in range(len(ws))]
        return fns, ops, n * k + m * k + m * n * 4
    if prov == "tinygemm_g128":
        ws = prob.get("tinygemm")
        xs = x_copies(m, k, n * k // 2)
        fns = [lambda w=ws[i % len(ws)], x=xs[i % len(xs)]: torch._weight_int4pack_mm(x, w[0], 128, w[1])
               for i in range(max(len(ws), len(xs)))]
        return fns, ops, n * k // 2 + n * (k // 128) * 4 + m * k * 2 + out_b
    if prov == "triton_int8":
        ws, wsc = prob.get("int8"), prob.get("int8_scale")
        c = cfg or i8.INT8_CONFIGS[m_bucket(m)]
        xs = [(torch.randint(-128, 127, (m, k), device="cuda", dtype=torch.int8),
               torch.rand(m, device="cuda") + 0.5) for _ in range(min(len(ws), 8))]
        fns = [lambda w=ws[i % len(ws)], x=xs[i % len(xs)]: i8.int8_gemm(x[0], x[1], w, wsc, c)
               for i in range(len(ws))]
        return fns, ops, n * k + m * k + 4 * (m + n) + out_b
    if prov == "quant":
        xs = x_copies(m, k, 0)
        fns = [lambda x=x: w8.quantize_per_token_int8_triton(x) for x in xs]
        return fns, m * k, m * k * 3 + 4 * m
    ps = prob.get("packed")
    wbytes = ps[0].nbytes
    if prov == "w4a8_gemm":
        xs = [w8.quantize_per_token_int8_triton(x) for x in x_copies(m, k, wbytes)]
        c = cfg_for("w4a8", cfg, ps[0]) if cfg else None
        fns = [lambda p=ps[i % len(ps)], x=xs[i % len(xs)]: w8.w4a8_matmul_quantized(x[0], x[1], p, torch.bfloat16, c)
               for i in range(max(len(ps), len(xs)))]
        return fns, ops, wbytes + m * k + 4 * m + out_b
    if prov == "w4a8":
        xs = x_copies(m, k, wbytes)
        c = cfg_for("w4a8", cfg, ps[0]) if cfg else None
        fns = [lambda p=ps[i % len(ps)], x=xs[i % len(xs)]: w8.w4a8_matmul(x, p, config=c)
               for i in range(max(len(ps), len(xs)))]
        return fns, ops, wbytes + m * k * 2 + out_b
    if prov in ("w4a16", "w4a16_int"):
        xs = x_copies(m, k, wbytes)
        c = cfg_for("w4a16", cfg, ps[0]) if cfg else None
        if prov == "w4a16_int" and c is None:
            c = int_cfg(m, ps[0])
        idq = True if prov == "w4a16_int" else None
        fns = [lambda p=ps[i % len(ps)], x=xs[i % len(xs)]: w16.w4a16_matmul(x, p, c, idq)
               for i in range(max(len(ps), len(xs)))]
        return fns, ops, wbytes + m * k * 2 + out_b
    raise ValueError(prov)


def int_cfg(m: int, packed) -> TileConfig | None:
    """The exact-integer per-channel W4A16 path's swept config for this M, if any."""
    c = INT_TABLE.get(m_bucket(m))
    return cfg_for("w4a16", c, packed) if c else None


def decide_int_dequant(check_gpu: list[dict], recs: list[dict], winners: dict) -> dict:
    """Per M bucket: use the exact-integer per-channel W4A16 path where it checked
    correct on every shape and its swept winner is faster (geometric mean over points)."""
    w8, w16, _ = api()
    ok = bool(check_gpu) and all(r.get("w4a16_int_within_bound_fp32ref", True) and
                                 r.get("w4a16_int_all_finite", True) for r in check_gpu)
    out = {"int_path_checked_ok": ok, "buckets": {}}
    chosen = set()
    for b in ("decode", "mid", "prefill"):
        wi, ws = winners.get(f"w4a16i|channel|{b}"), winners.get(f"w4a16|channel|{b}")
        if not (wi and ws):
            continue
        t = {}
        for r in recs:
            if r.get("bucket") != b or "time_us" not in r or r["g"] != -1:
                continue
            if (r["kind"], r["cfg"]) in (("w4a16i", wi["cfg"]), ("w4a16", ws["cfg"])):
                t.setdefault((r["N"], r["K"], r["M"]), {})[r["kind"]] = r["time_us"]
        pairs = [v for v in t.values() if len(v) == 2]
        if not pairs:
            continue
        ratio = math.exp(statistics.mean(math.log(v["w4a16i"] / v["w4a16"]) for v in pairs))
        out["buckets"][b] = {"int_over_scaled_geomean": ratio, "points": len(pairs)}
        if ok and ratio < 1.0:
            chosen.add(b)
            w16.W4A16_CONFIGS[(b, "channel")] = TileConfig(**wi["cfg"])
    w16.INT_DEQUANT_BUCKETS = frozenset(chosen)
    out["int_buckets"] = sorted(chosen)
    log(f"per-channel W4A16 exact-integer path: {json.dumps(out)}")
    return out


def measure(prov, prob, m, cfg=None) -> dict:
    fns, ops, nbytes = build(prov, prob, m, cfg)
    t = time_calls(fns)
    del fns
    return {**t, "ops": ops, "bytes": nbytes}


# %% sweep phase

SWEEP_KINDS = [("w4a8", -1), ("w4a8", 128), ("w4a16", -1), ("w4a16i", -1), ("w4a16", 128),
               ("int8", -1)]
PROVIDER = {"w4a8": "w4a8_gemm", "w4a16": "w4a16", "w4a16i": "w4a16_int", "int8": "triton_int8"}
# Per-channel W4A16 configs of the exact-integer path (kind "w4a16i"), from the sweep.
INT_TABLE: dict[str, TileConfig] = {}


def variant_applies(kind: str, g: int, variant: int) -> bool:
    """Whether a variant changes the code that runs (else the sweep skips it as a duplicate):
    grouped W4A8; W4A16; the exact-integer path takes only the two-accumulator bit."""
    if kind == "w4a8":
        return g != -1
    if kind == "w4a16":  # the scale multiply (bit 1) is refused for per-channel weights
        return g != -1 or not variant & 1
    return variant == 2


def run_sweep(shapes, deadline, kinds=None, buckets=None) -> dict:
    recs = []
    for shape in shapes:
        for kind, g in SWEEP_KINDS:
            if kind != "int8" and g not in groups_for(shape):
                continue
            if kinds and f"{kind}:{g}" not in kinds:
                continue
            prob = Problem(shape, g)
            for bucket, ms in SWEEP_MS.items():
                if buckets and bucket not in buckets:
                    continue
                for m in ms:
                    for cfg in CANDIDATES[("w4a16" if kind == "w4a16i" else kind, bucket)]:
                        if cfg.variant and not variant_applies(kind, g, cfg.variant):
                            continue
                        if time.time() > deadline:
                            log("sweep: time budget reached")
                            return {"records": recs, "complete": False}
                        prov = PROVIDER[kind]
                        rec = {"kind": kind, "g": g, "N": shape[0], "K": shape[1], "M": m,
                               "bucket": bucket, "cfg": asdict(cfg)}
                        try:
                            rec.update(measure(prov, prob, m, cfg))
                        except Exception as exc:  # noqa: BLE001 - a config may not fit
                            rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
                        recs.append(rec)
            prob.free()
        log(f"sweep: {shape} done ({len(recs)} records)")
    return {"records": recs, "complete": True}


def pick_winners(recs) -> dict:
    """Per (kind, group kind, bucket): the config with the best geometric-mean slowdown
    against the per-point best, over the points where every finalist ran."""
    from collections import defaultdict
    pts = defaultdict(lambda: defaultdict(dict))
    for r in recs:
        if "time_us" not in r:
            continue
        gk = "channel" if r["g"] == -1 else "group"
        cfg = json.dumps(r["cfg"], sort_keys=True)
        pts[(r["kind"], gk, r["bucket"])][(r["N"], r["K"], r["M"])][cfg] = r["time_us"]
    winners = {}
    for key, points in pts.items():
        cfgs = set.intersection(*(set(v) for v in points.values()))
        if not cfgs:
            continue
        score = {c: math.exp(statistics.mean(math.log(v[c] / min(v.values())) for v in points.values()))
                 for c in cfgs}
        best = min(score, key=score.get)
        winners["|".join(key)] = {"cfg": json.loads(best), "geomean_slowdown": score[best],
                                  "points": len(points)}
    return winners


def apply_winners(winners: dict) -> None:
    w8, w16, i8 = api()
    for key, w in winners.items():
        kind, gk, bucket = key.split("|")
        cfg = TileConfig(**w["cfg"])
        if kind == "w4a8":
            w8.W4A8_CONFIGS[(bucket, gk)] = cfg
        elif kind == "w4a16":
            w16.W4A16_CONFIGS[(bucket, gk)] = cfg
        elif kind == "int8" and gk == "channel":
            i8.INT8_CONFIGS[bucket] = cfg
        elif kind == "w4a16i":
            INT_TABLE[bucket] = cfg


def table_snapshot() -> dict:
    w8, w16, i8 = api()
    return {"w4a8": {f"{b}|{g}": asdict(c) for (b, g), c in w8.W4A8_CONFIGS.items()},
            "w4a16": {f"{b}|{g}": asdict(c) for (b, g), c in w16.W4A16_CONFIGS.items()},
            "w4a16_int_dequant_buckets": sorted(w16.INT_DEQUANT_BUCKETS),
            "w4a16_int_path": {b: asdict(c) for b, c in INT_TABLE.items()},
            "int8": {b: asdict(c) for b, c in i8.INT8_CONFIGS.items()}}


def compiled_facts() -> list[dict]:
    """Registers, spills, shared memory and which MMA instructions each compiled kernel uses."""
    w8, w16, i8 = api()
    from w4a8_kernels import triton_jit
    facts = []
    for fn in (triton_jit.w4a8_kernel, triton_jit.w4a16_kernel, i8._int8_gemm_kernel):
        try:
            for _, entry in fn.device_caches.items():
                for key, k in entry[0].items():
                    ptx = k.asm.get("ptx", "")
                    wg = [ln.strip() for ln in ptx.splitlines() if "wgmma.mma_async" in ln]
                    md = k.metadata
                    facts.append({
                        "kernel": fn.__name__, "key": str(key)[-700:],
                        "n_regs": getattr(k, "n_regs", None), "n_spills": getattr(k, "n_spills", None),
                        "shared": getattr(md, "shared", None), "num_warps": getattr(md, "num_warps", None),
                        "num_stages": getattr(md, "num_stages", None),
                        "wgmma": len(wg), "wgmma_first": wg[0][:240] if wg else "",
                        "mma_sync": ptx.count("mma.sync.aligned"), "ld_local": ptx.count("ld.local"),
                        "cp_async": ptx.count("cp.async"), "tma": ptx.count("cp.async.bulk.tensor"),
                    })
        except Exception as exc:  # noqa: BLE001
            facts.append({"kernel": getattr(fn, "__name__", "?"), "error": repr(exc)[:300]})
    return facts


# %% bench phase

def _record(prov, group, shape, m, t, math_peak) -> dict:
    n, k = shape
    tus = t["time_us"]
    tops = t["ops"] / tus / 1e6
    gbs = t["bytes"] / tus / 1e3
    bound_us = max(t["ops"] / (math_peak * 1e6), t["bytes"] / (LIMITS["hbm_gbs"] * 1e3))
    return {
        "kernel": prov, "group_size": group, "N": n, "K": k, "M": m,
        "time_us": round(tus, 3), "p20_us": round(t["p20_us"], 3), "p80_us": round(t["p80_us"], 3),
        "tops": round(tops, 2), "gbs": round(gbs, 1), "ops": t["ops"], "bytes": t["bytes"],
        "math_peak_tops": math_peak, "frac_math_peak": round(tops / math_peak, 4),
        "frac_hbm_bw": round(gbs / LIMITS["hbm_gbs"], 4),
        "bound_us": round(bound_us, 3), "frac_of_roofline": round(bound_us / tus, 4),
        "weight_stream_bound_us": round(n * k / 2 / (LIMITS["hbm_gbs"] * 1e3), 3),
        "method": t["method"], "samples": t["samples"],
    }


def run_bench(shapes, ms, deadline, out_dir, meta) -> list[dict]:
    recs = []
    for shape in shapes:
        n, k = shape
        gs = groups_for(shape)
        probs = {g: Problem(shape, g) for g in gs}
        base = probs[-1]
        for m in ms:
            if time.time() > deadline:
                log("bench: time budget reached")
                return recs
            plan = [("cublas_bf16", None, base, LIMITS["bf16_tflops"]),
                    ("triton_int8", -1, base, LIMITS["int8_tops"]),
                    ("quant", None, base, LIMITS["int8_tops"])]
            if m > 16:  # torch._int_mm needs M > 16
                plan.append(("cublas_int8", None, base, LIMITS["int8_tops"]))
            if 128 in probs and m * n * k <= 4096 * 8192 * 8192:
                plan.append(("tinygemm_g128", 128, probs[128], LIMITS["bf16_tflops"]))
            for g, prob in probs.items():
                if g in (32, 64) and 128 in probs and m not in EXTRA_GROUP_MS:
                    continue
                plan += [("w4a8_gemm", g, prob, LIMITS["int8_tops"]),
                         ("w4a8", g, prob, LIMITS["int8_tops"]),
                         ("w4a16", g, prob, LIMITS["bf16_tflops"])]
                if g == -1 and INT_TABLE:
                    plan.append(("w4a16_int", g, prob, LIMITS["bf16_tflops"]))
            for prov, g, prob, peak in plan:
                try:
                    t = measure(prov, prob, m)
                    recs.append(_record(prov, g, shape, m, t, peak))
                except Exception as exc:  # noqa: BLE001
                    recs.append({"kernel": prov, "group_size": g, "N": n, "K": k, "M": m,
                                 "error": f"{type(exc).__name__}: {exc}"[:300]})
            torch.cuda.empty_cache()
        for p in probs.values():
            p.free()
        del probs
        log(f"bench: {shape} done ({len(recs)} records)")
        write_bench(out_dir, meta, recs)
    return recs


CSV_FIELDS = ["kernel", "group_size", "N", "K", "M", "time_us", "p20_us", "p80_us", "tops", "gbs",
              "ops", "bytes", "math_peak_tops", "frac_math_peak", "frac_hbm_bw", "bound_us",
              "frac_of_roofline", "weight_stream_bound_us", "method", "samples", "error"]


def write_bench(out_dir: Path, meta: dict, recs: list[dict]) -> None:
    (out_dir / "h200_bench.json").write_text(json.dumps({**meta, "records": recs}, indent=1))
    with open(out_dir / "h200_bench.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in recs:
            w.writerow(r)


# %% provenance and ceilings

def provenance(commit: str) -> dict:
    import triton
    smi = ""
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,"
             "power.limit,temperature.gpu", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        smi = repr(exc)
    p = torch.cuda.get_device_properties(0)
    return {
        "gpu": torch.cuda.get_device_name(0), "nvidia_smi": smi,
        "driver": smi.split(",")[1].strip() if smi.count(",") >= 1 else None,
        "sm_count": p.multi_processor_count, "capability": f"{p.major}.{p.minor}",
        "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
        "python": sys.version.split()[0],
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit, "limits_datasheet": LIMITS,
    }


def ceilings() -> dict:
    """Measured once per run: device copy bandwidth, bf16 and int8 cuBLAS rates."""
    a = torch.empty(2 * 2 ** 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.random_(0, 255)
    t = time_calls([lambda: b.copy_(a)], samples=10)
    copy_gbs = 2 * a.numel() / t["time_us"] / 1e3
    del a, b
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    tb = time_calls([lambda: x @ w.t()], samples=10)
    xi = torch.randint(-128, 127, (8192, 8192), device="cuda", dtype=torch.int8)
    wi = torch.randint(-128, 127, (8192, 8192), device="cuda", dtype=torch.int8)
    ti = time_calls([lambda: torch._int_mm(xi, wi.t())], samples=10)
    ops = 2 * 8192 ** 3
    return {"copy_gbs_read_plus_write": round(copy_gbs, 1),
            "cublas_bf16_8192_tflops": round(ops / tb["time_us"] / 1e6, 1),
            "cublas_int8_8192_tops": round(ops / ti["time_us"] / 1e6, 1)}


# %% profile target (run under ncu)

def run_profile() -> None:
    """One launch of each tuned GEMM, for ncu: prefill (8192, 8192, M=4096) and decode
    (28672, 8192, M=1), plus the plain int8 GEMM at the prefill point."""
    w8, w16, i8 = api()
    for shape, m in (((8192, 8192), 4096), ((28672, 8192), 1)):
        x = make_x(m, shape[1])
        xq, xs = w8.quantize_per_token_int8_triton(x)
        for g in (-1, 128):
            w_q, scales = make_weight(shape, g)
            packed = w8.prepare_w4a8(w_q, scales, g)
            w8.w4a8_matmul_quantized(xq, xs, packed, torch.bfloat16)
            w16.w4a16_matmul(x, packed, int_dequant=False)
            if g == -1:  # both per-channel paths; config from the sweep, else the table
                w16.w4a16_matmul(x, packed, int_cfg(m, packed), True)
        if m > 16:
            w_q, _ = make_weight(shape, -1)
            i8.int8_gemm(xq, xs.reshape(-1), w_q, torch.ones(shape[0], device="cuda"),
                         i8.INT8_CONFIGS["prefill"])
    torch.cuda.synchronize()


# %% main

def guarded(name: str, fn, *a, **kw):
    """Run one phase; a failure is logged and the later phases still run."""
    try:
        return fn(*a, **kw)
    except Exception:  # noqa: BLE001
        log(f"PHASE {name} FAILED:\n{traceback.format_exc()[-3000:]}")
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--phases", default="compile,check,sweep,bench")
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument("--shapes", default="all", help="'all' or e.g. 8192x8192,4096x4096")
    ap.add_argument("--ms", default="all")
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--winners", type=Path, default=None, help="apply winners from a sweep JSON")
    ap.add_argument("--sweep-name", default="h200_sweep.json")
    ap.add_argument("--buckets", default="", help="sweep only these M buckets, e.g. decode")
    ap.add_argument("--kinds", default="", help="sweep only these kind:group pairs, e.g. w4a8:128,w4a16:-1")
    args = ap.parse_args()
    t_start = time.time()
    deadline = t_start + args.budget_s
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    phases = args.phases.split(",")
    shapes = SHAPES if args.shapes == "all" else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ms = M_LIST if args.ms == "all" else [int(v) for v in args.ms.split(",")]

    if "profile" in phases:
        if args.winners:
            apply_winners(json.loads(args.winners.read_text())["winners"])
        run_profile()
        return

    meta = {"provenance": provenance(args.commit)}
    log(f"provenance: {json.dumps(meta['provenance'])}")

    if "compile" in phases:
        kinds_cfgs = [(kind, c) for (kind, _), cs in CANDIDATES.items() for c in cs]
        kinds_cfgs += [("w4a16i", c) for (kind, _), cs in CANDIDATES.items() for c in cs
                       if kind == "w4a16"]
        groups_k = [(-1, 4096), (128, 4096)]
        jobs = compile_jobs(kinds_cfgs, groups_k)
        jobs += [{"kind": "quant", "cfg": asdict(T(16, 16, 16)), "g": -1, "k": k, "split": None, "m": 2}
                 for k in (4096, 8192)]
        guarded("compile", run_compile, jobs, args.workers)

    meta["ceilings"] = guarded("ceilings", ceilings)
    log(f"ceilings: {meta['ceilings']}")

    sw, winners = None, {}
    if args.winners:
        winners = json.loads(args.winners.read_text())["winners"]
        apply_winners(winners)
    if "sweep" in phases:
        sw = guarded("sweep", run_sweep, shapes,
                     t_start + 0.5 * args.budget_s if "bench" in phases else deadline,
                     [k for k in args.kinds.split(",") if k], [b for b in args.buckets.split(",") if b])
        if sw:
            winners = pick_winners(sw["records"])
            apply_winners(winners)
            sweep_doc = {**meta, "winners": winners, "tables_after": table_snapshot(),
                         "complete": sw["complete"], "records": sw["records"]}
            (out / args.sweep_name).write_text(json.dumps(sweep_doc, indent=1))
            log("winners: " + json.dumps({k: (v["cfg"], round(v["geomean_slowdown"], 3))
                                          for k, v in winners.items()}))
    meta["tables"] = table_snapshot()

    if "compile" in phases:
        # The tables' configs on the unaligned shard (masked K tail) and at g32 / g64.
        tables = [("w4a8", TileConfig(**v)) for v in meta["tables"]["w4a8"].values()]
        tables += [("w4a16", TileConfig(**v)) for v in meta["tables"]["w4a16"].values()]
        tables += [("int8", TileConfig(**v)) for v in meta["tables"]["int8"].values()]
        tables += [("w4a16i", c) for c in INT_TABLE.values()]
        tail_k = 1024 + 14784 % 1024
        guarded("compile tables", run_compile,
                compile_jobs(tables, [(-1, 4096), (128, 4096), (-1, tail_k), (64, tail_k),
                                      (32, 4096), (64, 4096)]), args.workers)

    check_state = guarded("check", run_check, shapes, deadline) if "check" in phases else None
    if check_state is not None and sw:
        meta["w4a16_int_decision"] = guarded("decide", decide_int_dequant, check_state["gpu"],
                                             sw["records"], winners)
        meta["tables"] = table_snapshot()
        if sw:
            sweep_doc = {**meta, "winners": winners, "complete": sw["complete"],
                         "records": sw["records"]}
            (out / args.sweep_name).write_text(json.dumps(sweep_doc, indent=1))

    if "bench" in phases:
        recs = guarded("bench", run_bench, shapes, ms, deadline, out, meta)
        if recs is not None:
            write_bench(out, meta, recs)
            log(summary(recs))

    if check_state is not None:
        chk = guarded("check finish", finish_check, check_state, deadline + 45)
        if chk:
            (out / "h200_check.json").write_text(json.dumps({**meta, **chk}, indent=1))

    facts = guarded("compiled facts", compiled_facts)
    if facts:
        (out / "h200_compiled.json").write_text(json.dumps(facts, indent=1))
    log(f"total {time.time() - t_start:.0f}s")


def summary(recs: list[dict]) -> str:
    """A short table of the headline ratios, printed last."""
    by = {(r["kernel"], r["group_size"], r["N"], r["K"], r["M"]): r["time_us"]
          for r in recs if "time_us" in r}
    lines = ["N x K | M | bf16 | int8 _int_mm | tri-int8 | W4A8 ch gemm | W4A8 g gemm | W4A8 ch e2e"
             " | W4A16 ch | W4A16 ch int | W4A16 g | tinygemm (us)"]
    for (n, k) in SHAPES:
        for m in (1, 16, 256, 1024, 4096, 16384):
            g = 128 if k % 128 == 0 else 64
            row = [by.get(key) for key in [
                ("cublas_bf16", None, n, k, m), ("cublas_int8", None, n, k, m),
                ("triton_int8", -1, n, k, m), ("w4a8_gemm", -1, n, k, m), ("w4a8_gemm", g, n, k, m),
                ("w4a8", -1, n, k, m), ("w4a16", -1, n, k, m), ("w4a16_int", -1, n, k, m),
                ("w4a16", g, n, k, m),
                ("tinygemm_g128", 128, n, k, m)]]
            lines.append(f"{n}x{k} | {m} | " + " | ".join("-" if v is None else f"{v:.1f}" for v in row))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
