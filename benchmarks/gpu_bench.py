"""GPU benchmark (the part read from the driver: H100, H200) of the Triton W4A8 / W4A16 kernels against cuBLAS, tinygemm and gemlite.

One command runs the phases a device session needs, in order, within a time budget:

    python benchmarks/gpu_bench.py --out DIR --commit SHA [--phases compile,check,sweep,bench,tp]

- compile: compiles every kernel variant the later phases launch, in parallel processes
  (Triton's on-disk cache then serves the main process).
- sweep:   tile configs on a dense M grid on every shape; the per-M winners (best geometric
           mean over shapes) merged into M buckets form the tables this run passes as
           `config=` (the module tables are never patched).
- check:   full-size shapes; every output element against a float32 GPU product under
           the rounding bound, sampled rows against kernels.reference (float64, CPU, in
           worker processes) with bf16-ulp statistics; the Triton quantizer against
           kernels.quant bit for bit; the integer-rescale W4A8 variant against its torch
           emulation and, beside the fp32-rescale path, against the float64 reference.
- bench:   M from 1 to 16384 (powers of two and midpoints) on every shape: cuBLAS bf16,
           cuBLAS int8 `_int_mm` (second operand the transposed view of row-major [N, K]),
           tinygemm `_weight_int4pack_mm` (g128), gemlite A16W4 / A8W8 / A8W4 (autotuned
           here), a plain Triton int8 GEMM, and the Triton kernels.
           Beside them, what vLLM itself runs (--engines): Humming W4A16 (`vllm_humming`),
           Humming int8-activation where vLLM runs it (per-channel, `vllm_humming_int8`),
           Humming int8 forced at the grouped sizes (`vllm_humming_int8_forced`, not a vLLM
           path) and Machete (`vllm_machete`, with the schedule that ran); each record's
           `detail.engine` holds the JIT time of its first call apart from the timed calls.
- tp:      per-shard timings of a tensor-parallel MLP (benchmarks/tp_bench.py shapes) on one GPU.
- profile: one launch of each Triton GEMM at (8192, 8192, M=4096), meant to run under ncu.

vLLM's own kernels in one device call (humming-kernels' wheel carried in the ignored `.whl/`,
`pip download --no-deps humming-kernels==0.1.19 -d .whl`; the device image has cuda-bindings,
jinja2, tabulate and NVRTC), their GPU tests first:

    pip install -q --no-deps --no-index .whl/humming_kernels-0.1.19-*.whl && \
    pip install -q --no-deps -e . && \
    python -m pytest tests/kernels/test_vllm_humming.py tests/kernels/test_gpu_bench_engines.py \
        -q -rs > $OUT/h200_pytest_engines.txt 2>&1; \
    python benchmarks/gpu_bench.py --out $OUT --commit $(git rev-parse HEAD) --phases bench \
        --budget-s 420 --no-peers && python benchmarks/gpu_report.py $OUT/h200_bench.json

Timing: CUDA events around CUDA-graph replays (no launch gaps) over rotating copies of the
inputs, enough that they do not fit in the 50 MB L2 (sized for 60 MiB, a margin); medians of many samples.
Results go to DIR in the one results schema (`w4a8-workbench-results/1`, read by
workbench/results.py), with a CSV export; the package must be installed (`pip install -e .`).
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import torch

from w4a8_kernels.triton_runtime import ConfigTable, TileConfig, fit_block_k, table_config
from workbench.gpu_part import read_part, short_name
from workbench.gpu_timing import copies_for, time_device

# %% what is measured

# (N, K). Two TP shards of Qwen2-72B's MLP (intermediate 29568): down_proj over 2 GPUs
# gives K = 14784, not a multiple of 128 (the llm-compressor 973 failure); up_proj over 4
# gives N = 7392, not a multiple of the 128-wide tiles.
SHAPES = [(4096, 4096), (8192, 8192), (28672, 8192), (4096, 14336), (8192, 14784), (7392, 8192)]
ALIGNED = [(4096, 4096), (8192, 8192), (28672, 8192)]
# Every power of two and the midpoints between them, 1 to 16384.
M_LIST = sorted({2 ** i for i in range(15)} | {3 * 2 ** i for i in range(13)})
CHECK_MS = [1, 16, 24, 48, 100, 200, 384, 1024, 4096]  # inside every bucket
EXTRA_GROUP_MS = [1, 16, 128, 1024, 4096, 16384]  # g32 / g64 next to g128: fewer points
SWEEP_MS = [12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096]
DECODE_MAX = 8  # at and below this M the decode tables are kept (swept in sessions 1-2)


def groups_for(shape: tuple[int, int]) -> list[int]:
    """Group sizes measured on a shape: per-channel and g128 where K allows it."""
    n, k = shape
    gs = [-1, 128] if k % 128 == 0 else [-1, 64]
    if shape == (8192, 8192):
        gs += [32, 64]
    return gs


# The datasheet limits (dense) of the part this runs on (workbench.gpu_part: read from the
# driver, matched to its preset in main(); a part no preset matches is refused there).
LIMITS: dict[str, float] = {}
PART = None  # workbench.gpu_part.GpuPart, set in main()
PREFIX = "gpu"  # results files' prefix: the part's short name (h100, h200)

# %% candidate configs (block_k counts bytes of packed K per step for W4A8/W4A16: each
# step covers 2 * block_k values of K; for the plain int8 GEMM it is K per step)

T = TileConfig
S0 = {"split_k": 0}  # split K until programs_per_sm programs run on each SM
# (m_lo, m_hi, config): a candidate is timed at the sweep's M values within [m_lo, m_hi].
# The M = 16 -> 32 cliff of the previous tables came from the mid bucket's unsplit tiles:
# at M = 32 a 128-wide tile grid leaves most of the 132 SMs idle on N = 4096; the split-K
# candidates fill them. W4A8 variant 2 (grouped) scales each group's dot one dot late;
# W4A16 bit 1 multiplies the scale as a separate op (grouped only), bit 2 keeps two
# accumulators, bit 4 (per-channel) feeds exact integers (triton_w4a16.W4A16Variant).
CANDIDATES = {
    "w4a8": [
        (12, 96, T(16, 64, 128, **S0, num_stages=4, swap_ab=True, variant=2, programs_per_sm=4)),
        (12, 256, T(32, 64, 128, **S0, num_stages=4, swap_ab=True, variant=2)),
        (12, 256, T(32, 64, 128, **S0, num_stages=4, swap_ab=True, variant=2, programs_per_sm=4)),
        (12, 384, T(32, 128, 128, **S0, num_stages=4, swap_ab=True, variant=2)),
        (24, 512, T(64, 64, 128, **S0, num_stages=4, swap_ab=True, variant=2)),
        (24, 768, T(64, 128, 128, **S0, num_stages=4, swap_ab=True, variant=2)),
        (96, 1024, T(64, 128, 128, num_stages=4, swap_ab=True, variant=2)),
        (96, 1024, T(32, 128, 128, num_stages=4, swap_ab=True, variant=2)),
        (128, 2048, T(128, 128, 128, **S0, num_warps=8, num_stages=3, swap_ab=True, variant=2)),
        (192, 4096, T(128, 128, 128, num_warps=8, num_stages=3, swap_ab=True, variant=2)),
        (384, 4096, T(128, 256, 128, num_warps=8, num_stages=3, swap_ab=True, variant=2)),
        (512, 4096, T(256, 128, 128, num_warps=8, num_stages=3, swap_ab=True, variant=2)),
    ],
    "w4a16": [
        (12, 64, T(16, 128, 64, **S0, num_stages=4)),
        (12, 128, T(32, 128, 64, **S0, num_stages=4)),
        (12, 192, T(32, 64, 64, **S0, num_stages=4, swap_ab=True, variant=6, programs_per_sm=4)),
        (12, 256, T(32, 128, 64, **S0, num_stages=4, swap_ab=True, variant=6)),
        (24, 512, T(64, 128, 64, **S0, num_stages=4, swap_ab=True, variant=6)),
        (24, 512, T(64, 64, 64, **S0, num_stages=4, swap_ab=True, variant=6, programs_per_sm=4)),
        (64, 1024, T(64, 128, 64, num_stages=4, swap_ab=True, variant=6)),
        # variant 2, not 6: per-channel 128x128 tiles with 8 warps, integer dequant and two
        # accumulators failed the full-size check (M = 200, run of 2026-12-01)
        (96, 2048, T(128, 128, 64, **S0, num_warps=8, num_stages=4, swap_ab=True, variant=2)),
        (128, 2048, T(128, 128, 64, num_warps=8, num_stages=4, swap_ab=True, variant=6)),
        (128, 2048, T(128, 128, 64, num_warps=8, num_stages=4, swap_ab=True, variant=4)),
        (384, 4096, T(256, 128, 64, num_warps=8, num_stages=3, swap_ab=True, variant=4)),
        (384, 4096, T(256, 128, 64, num_warps=8, num_stages=3, swap_ab=True, variant=1)),
    ],
}


def candidate_for(kind: str, g: int, cfg: TileConfig) -> TileConfig | None:
    """The config a candidate launches for this weight kind, or None where it adds nothing:
    per-channel W4A8 ignores the grouped schedule; per-channel W4A16 refuses the scale
    multiply (bit 1); grouped W4A16 ignores the integer bit (4)."""
    if kind == "w4a8":
        return replace(cfg, variant=0) if g == -1 else cfg
    if g == -1:
        return None if cfg.variant & 1 else cfg
    return replace(cfg, variant=cfg.variant & 3)


LOG: list[str] = []


def log(msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    LOG.append(line)


# %% timing

def time_calls(fns: list, samples: int = 25, no_graph: bool = False) -> dict:
    """Median device time of one call, in us (workbench.gpu_timing: the one GPU timer that
    `bench`, the Kernels page and the notebooks use too). `fns` rotate over input copies."""
    t = time_device(fns, samples=samples, graph=not no_graph)
    return {"time_us": t.median_us, "p20_us": t.p20_us, "p80_us": t.p80_us,
            "samples": t.samples, "method": t.method}


def rotations(cold_bytes: int) -> int:
    """Copies to rotate so one pass streams >= 3x this part's L2 from HBM."""
    return copies_for(cold_bytes)


# %% problem data

def make_weight(shape, g, seed=0):
    n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w_q = torch.randint(-8, 8, (n, k), generator=gen, device="cuda", dtype=torch.int8)
    ng = 1 if g == -1 else k // g
    # bf16-representable, as a checkpoint stores them: the integer-rescale variant starts
    # from the same scales as the fp32 path.
    scales = (torch.rand(n, ng, generator=gen, device="cuda") * 0.02 + 0.001).bfloat16().float()
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
    from w4a8_kernels import triton_int8 as i8
    from w4a8_kernels import triton_w4a8 as w8
    from w4a8_kernels import triton_w4a16 as w16
    return w8, w16, i8


def module_tables() -> dict[str, ConfigTable]:
    """The committed config tables, as this run starts from them."""
    w8, w16, i8 = api()
    return {"w4a8|channel": w8.W4A8_CONFIGS["channel"], "w4a8|group": w8.W4A8_CONFIGS["group"],
            "w4a16|channel": w16.W4A16_CONFIGS["channel"],
            "w4a16|group": w16.W4A16_CONFIGS["group"], "int8": i8.INT8_CONFIGS}


# The tables this run launches with: the committed ones, or a sweep's (never patched into
# the modules: every launch gets its config passed).
TABLES: dict[str, ConfigTable] = {}


def fit(kind: str, cfg: TileConfig, packed) -> TileConfig:
    """Grouped W4A8 launches need block_k == g; W4A16 block_k <= g; both fitted to Kp/2."""
    if kind == "w4a8" and not packed.per_channel:
        return replace(cfg, block_k=packed.group_size)
    if kind == "w4a16" and not packed.per_channel and cfg.block_k > packed.group_size:
        cfg = replace(cfg, block_k=packed.group_size)
    return fit_block_k(cfg, packed.half_k)


def table_cfg(kind: str, packed, m: int) -> TileConfig:
    gk = "channel" if packed.per_channel else "group"
    return fit(kind, table_config(TABLES[f"{kind}|{gk}"], m), packed)


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
            packed = (w8.prepare_w4a8_int_rescale(w_q, scales, g) if kind == "w4a8i"
                      else w8.prepare_w4a8(w_q, scales, g))
            c = fit("w4a16" if kind == "w4a16" else "w4a8", cfg, packed)
            if split is not None:
                c = replace(c, split_k=split)
            x = make_x(m, k)
            if kind in ("w4a8", "w4a8i"):
                xq, xs = w8.quantize_per_token_int8_triton(x)
                w8.w4a8_matmul_quantized(xq, xs, packed, torch.bfloat16, config=c)
            else:
                w16.w4a16_matmul(x, packed, config=c)
        torch.cuda.synchronize()
        return {"job": job, "ok": True}
    except Exception as exc:  # noqa: BLE001 - reported per job
        return {"job": job, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}


def compile_jobs(kinds_cfgs, groups_k) -> list[dict]:
    """Jobs covering (kind, config, group, K alignment, split or not)."""
    jobs, seen = [], set()
    for kind, cfg in kinds_cfgs:
        for g, k in groups_k:
            if kind == "int8" and g != -1 or kind == "w4a8i" and g == -1:
                continue
            c = cfg if kind in ("int8", "quant") else candidate_for(
                "w4a16" if kind == "w4a16" else "w4a8", g, cfg)
            if c is None:
                continue
            if g > 0 and (kind in ("w4a8", "w4a8i") or c.block_k > g):
                c = replace(c, block_k=g)
            for split in ([1, 2] if c.split_k == 0 else [None]):
                key = (kind, c, g, k, split)
                if key in seen:
                    continue
                seen.add(key)
                jobs.append({"kind": kind, "cfg": asdict(c), "g": g, "k": k, "split": split,
                             "m": 1 if c.block_m == 16 else 64})
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


def table_entries() -> list[tuple[str, TileConfig]]:
    out = []
    for key, table in TABLES.items():
        kind = key.split("|")[0]
        out += [(kind, c) for _, c in table]
        if key == "w4a8|group":
            out += [("w4a8i", c) for _, c in table]
    return out


# %% check phase

def _ulp_bf16(v):
    _, e = torch.frexp(v)
    return torch.ldexp(torch.ones_like(v), e - 8)


def _cpu_reference_job(job: dict) -> dict:
    """Worker: kernels.reference in float64 on the sampled rows; bound and ulp statistics.

    The rows of every M are stacked into one reference call per kernel: rows are
    independent (per-token quantization included), and the weight is dequantized once.
    The integer-rescale variant is held to the same bound as the fp32 path, for its error
    to be read beside it; its own pass criterion is equality with its emulation.
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
    ref8 = None
    for kernel in ("w4a8", "w4a8_int_rescale", "w4a16"):
        if not all(kernel in it for it in items):
            continue
        got_all = torch.cat([it[kernel] for it in items])
        if kernel.startswith("w4a8"):
            ref8 = ref_all = ref8 if ref8 is not None else w4a8_reference(x, w_q, scales, g)
            xq, xs = quantize_per_token_int8(x)
            xa = xq.double() * xs.double()
            u_w = 0.0
        else:
            ref_all = w4a16_reference(x, w_q, scales, g)
            xa = x.double()
            u_w = 2.0 ** -8  # scale, then w * scale, rounded to bf16 (exact integers per channel)
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
    from w4a8_kernels.triton_pack import marlin_int_scales
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
            packed_i = w8.prepare_w4a8_int_rescale(w_q, scales, g) if g != -1 else None
            int_s, factor = marlin_int_scales(scales) if g != -1 else (None, None)
            w32 = dequant_f32(w_q, scales, g)
            items = []
            for m in CHECK_MS:
                x = make_x(m, shape[1], seed=m)
                res = {"shape": list(shape), "g": g, "M": m}
                # Poison the allocator's next block so unwritten outputs show up as NaN.
                torch.full((m, shape[0]), float("nan"), dtype=torch.bfloat16, device="cuda")
                o8 = w8.w4a8_matmul(x, packed, config=table_cfg("w4a8", packed, m))
                torch.full((m, shape[0]), float("nan"), dtype=torch.bfloat16, device="cuda")
                o16 = w16.w4a16_matmul(x, packed, config=table_cfg("w4a16", packed, m))
                outs = [("w4a8", o8), ("w4a16", o16)]
                xq_t, xs_t = w8.quantize_per_token_int8_triton(x)
                # kernels.quant on the CPU is the reference (torch's CUDA reciprocal and
                # rounding may differ from the CPU's in the last bit).
                xq_c, xs_c = quantize_per_token_int8(x.cpu())
                res["quant_bit_equal_cpu_ref"] = bool(torch.equal(xq_t.cpu(), xq_c) and
                                                      torch.equal(xs_t.cpu(), xs_c))
                xq_r, xs_r = xq_c.cuda(), xs_c.cuda()
                rows = sorted(set([0, m - 1] + torch.randperm(m)[:14].tolist()))
                if packed_i is not None:
                    cfg_i = table_cfg("w4a8", packed_i, m)
                    torch.full((m, shape[0]), float("nan"), dtype=torch.bfloat16, device="cuda")
                    oi = w8.w4a8_matmul_quantized(xq_r, xs_r, packed_i, config=cfg_i)
                    emu = w8.w4a8_int_rescale_emulated(xq_r[rows], xs_r[rows], w_q, int_s.cuda(),
                                                       factor, g)
                    d = (oi[rows].float() - emu.float()).abs()
                    res["w4a8_int_rescale_all_finite"] = bool(torch.isfinite(oi).all())
                    res["w4a8_int_rescale_equal_emulation"] = float((d == 0).double().mean())
                    res["w4a8_int_rescale_max_ulp_vs_emulation"] = float(
                        (d / _ulp_bf16(emu.float().abs().clamp_min(1e-30))).max())
                    res["w4a8_int_rescale_split_k"] = cfg_i.split_k
                    outs.append(("w4a8_int_rescale", oi))
                xa_of = {"w4a8": (xq_r.float() * xs_r, 0.0), "w4a16": (x.float(), 2.0 ** -8)}
                for name, o in outs:
                    if name not in xa_of:
                        continue
                    xa, u_w = xa_of[name]
                    ref = xa @ w32.t()
                    err = (o.float() - ref).abs()
                    # float32 reference: its own error is below K * 2^-24 * |x||w|.
                    budget = 2.0 ** -8 * ref.abs() + (u_w + 2 * shape[1] * 2.0 ** -24) * (xa.abs() @ w32.abs().t())
                    res[f"{name}_all_finite"] = bool(torch.isfinite(o).all())
                    res[f"{name}_max_err_over_budget_fp32ref"] = (err / budget).max().item()
                    res[f"{name}_within_bound_fp32ref"] = bool((err <= budget).all())
                gpu_checks.append(res)
                items.append({"M": m, "rows": rows, "x": x[rows].cpu(),
                              **{name: o[rows].cpu() for name, o in outs}})
                del o8, o16, x, outs
            futures.append(ex.submit(_cpu_reference_job, {
                "shape": list(shape), "g": g, "w_q": w_q.cpu(), "scales": scales.cpu(),
                "items": items, "threads": 4}))
            del packed, packed_i, w32, w_q, scales
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
    ok_cpu = all("results" in c and all(r["within_rounding_bound"] for r in c["results"]
                                        if r["kernel"] != "w4a8_int_rescale") for c in cpu)
    # Split-K sums float32 partials, where Marlin sums int32: bit equality at SPLIT_K = 1.
    ok_int = all(r["w4a8_int_rescale_equal_emulation"] == 1.0 for r in state["gpu"]
                 if r.get("w4a8_int_rescale_split_k") == 1)
    log(f"check: all-element fp32 bound {'PASS' if ok_gpu else 'FAIL'}; "
        f"kernels.reference float64 rows {'PASS' if ok_cpu else 'FAIL'}; "
        f"integer rescale equals its emulation (unsplit) {'PASS' if ok_int else 'FAIL'}")
    for c in cpu:
        for r in c.get("results", []):
            if not r["within_rounding_bound"] and r["kernel"] != "w4a8_int_rescale":
                log(f"  FAIL {c['shape']} g={c['g']} {r['kernel']} M={r['M']}: "
                    f"err/budget {r['max_err_over_budget']:.3g}")
    return {"gpu_all_elements": state["gpu"], "reference_rows": cpu,
            "pass_all_elements": ok_gpu, "pass_reference_rows": ok_cpu,
            "pass_int_rescale_emulation": ok_int, "int_rescale_error": int_rescale_error(cpu)}


def int_rescale_error(cpu: list[dict]) -> list[dict]:
    """Per (shape, g, M): relative Frobenius error against the float64 reference of the
    fp32-rescale path and of the integer-rescale (Marlin) path, side by side."""
    rows = []
    for c in cpu:
        by = {(r["kernel"], r["M"]): r for r in c.get("results", [])}
        for (kern, m), r in by.items():
            if kern == "w4a8_int_rescale" and ("w4a8", m) in by:
                f = by[("w4a8", m)]
                rows.append({"shape": c["shape"], "g": c["g"], "M": m,
                             "fp32_rescale_rel_fro": f["rel_fro"], "int_rescale_rel_fro": r["rel_fro"],
                             "fp32_rescale_max_err_over_budget": f["max_err_over_budget"],
                             "int_rescale_max_err_over_budget": r["max_err_over_budget"]})
    return rows


# %% providers for sweep and bench

# path (the results schema's name for what runs) -> kernel
KERNEL_OF_PATH = {
    "bf16_dense": "cublas_bf16", "int8_mm": "cublas_int8", "tinygemm_w4a16": "tinygemm",
    "triton_int8_mm": "triton_int8", "quantizer": "triton_quant",
    "w4a8_prequant": "triton_w4a8", "w4a8_native": "triton_w4a8", "w4a16_fallback": "triton_w4a16",
    "w4a8_int_rescale": "triton_w4a8_int_rescale",
    "peer_w4a16": "gemlite_a16w4", "peer_w8a8": "gemlite_a8w8", "peer_w4a8": "gemlite_a8w4",
}
PEERS = ("peer_w4a16", "peer_w8a8", "peer_w4a8")
# What vLLM itself runs (kernels/w4a8_kernels/vllm_humming.py, kernels/w4a8_kernels/vllm_machete.py), built as vLLM builds
# the layer: Humming W4A16; Humming handed int8 activations where vLLM runs them (per-channel:
# vLLM's input-schema check turns grouped int8 into bf16, schema.py:354-357); Humming int8
# forced at the grouped sizes (allow_fallback=False, not a vLLM path); Machete.
KERNEL_OF_PATH.update({"vllm_humming": "humming", "vllm_humming_int8": "humming",
              "vllm_humming_int8_forced": "humming", "vllm_machete": "machete"})
ENGINES = ("vllm_humming", "vllm_humming_int8", "vllm_humming_int8_forced", "vllm_machete")
NOT_VLLM = {"vllm_humming_int8_forced": "not a vLLM path (int8 forced, allow_fallback=False)"}
# gemlite autotunes each (M bucket, shape) on first use, 5-17 s each on the H200: its peers
# are timed where the cached autotune of the first run (h200_gemlite_config.json) covers.
PEER_MS = [1, 16, 64, 256, 1024, 4096]
PEER_SHAPES = {(4096, 4096): PEER_MS, (8192, 8192): PEER_MS, (28672, 8192): [1, 16]}


def gemlite_layer(kind: str, w_q, scales, g):
    """A gemlite layer from this project's int4 weight (HQQ form: (q - zero) * scale with
    q = w + 8, zero = 8), or an int8 per-channel layer of the same int values."""
    from gemlite.helper import A8W4_HQQ_INT_dynamic, A8W8_int8_dynamic, A16W4_HQQ_INT
    if kind == "peer_w8a8":
        return A8W8_int8_dynamic(device="cuda", dtype=torch.bfloat16).from_weights(
            w_q.contiguous(), scales=scales[:, :1].float().contiguous())
    q = (w_q.to(torch.int16) + 8).to(torch.uint8)
    s = scales.to(torch.bfloat16)
    z = torch.full_like(s, 8.0)
    if kind == "peer_w4a16":
        return A16W4_HQQ_INT(device="cuda", dtype=torch.bfloat16).from_weights(q, s, z)
    return A8W4_HQQ_INT_dynamic(device="cuda", dtype=torch.bfloat16, fp8=torch.int8).from_weights(q, s, z)


class Problem:
    """Rotated copies of one shape's weights in every layout, built on demand."""

    def __init__(self, shape, g):
        self.shape, self.g = shape, g
        self.w_q, self.scales = make_weight(shape, g)
        self._cache = {}
        self.prepare_s: dict[str, float] = {}  # first preparation of vLLM's own layers

    def get(self, what):
        if what in self._cache:
            return self._cache[what]
        w8, _, _ = api()
        n, k = self.shape
        if what == "packed":
            one = w8.prepare_w4a8(self.w_q, self.scales, self.g)
            r = rotations(one.nbytes)
            val = [one] + [w8.prepare_w4a8(self.w_q, self.scales, self.g) for _ in range(r - 1)]
        elif what == "packed_int":
            one = w8.prepare_w4a8_int_rescale(self.w_q, self.scales, self.g)
            val = [one] + [w8.prepare_w4a8_int_rescale(self.w_q, self.scales, self.g)
                           for _ in range(rotations(one.nbytes) - 1)]
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
        elif what in ENGINES:
            val = self._engine(what)
        elif what in PEERS:
            nbytes = n * k if what == "peer_w8a8" else n * k // 2
            val = [gemlite_layer(what, self.w_q, self.scales, self.g)
                   for _ in range(rotations(nbytes))]
        self._cache[what] = val
        return val

    def _engine(self, what):
        """Rotated copies of vLLM's own layer; the first preparation (JIT compiles humming's
        transform kernels on a cold cache) is timed apart from the copies after it."""
        from w4a8_kernels.registry import Int4Weight, get_path
        path = get_path(what)
        ok, why = path.availability()
        if not ok:
            raise RuntimeError(f"{what} cannot run: {why}")
        w = Int4Weight(self.w_q.cpu(), self.scales.cpu(), self.g)
        t0 = time.perf_counter()
        one = path.prepare(w)
        torch.cuda.synchronize()
        self.prepare_s[what] = time.perf_counter() - t0
        n, k = self.shape
        return [one] + [path.prepare(w) for _ in range(rotations(n * k // 2) - 1)]

    def free(self):
        self._cache.clear()
        torch.cuda.empty_cache()


def x_copies(m, k, cold_weight_bytes, dtype=torch.bfloat16):
    r = rotations(cold_weight_bytes + m * k * 2)
    return [make_x(m, k, seed=100 + i, dtype=dtype) for i in range(min(r, 8 if m >= 256 else 32))]


def _pairs(ws, xs, call):
    return [lambda w=ws[i % len(ws)], x=xs[i % len(xs)]: call(w, x) for i in range(max(len(ws), len(xs)))]


def build(path: str, prob: Problem, m: int, cfg: TileConfig | None = None):
    """(callables, ops, bytes moved at least, config launched) for one path at one M."""
    w8, w16, i8 = api()
    n, k = prob.shape
    ops = 2 * m * n * k
    out_b = m * n * 2
    if path == "bf16_dense":
        ws = prob.get("bf16")
        return _pairs(ws, x_copies(m, k, n * k * 2), lambda w, x: x @ w.t()), ops, \
            n * k * 2 + m * k * 2 + out_b, None
    if path == "int8_mm":
        ws = prob.get("int8")
        xs = [torch.randint(-128, 127, (m, k), device="cuda", dtype=torch.int8) for _ in range(min(len(ws), 8))]
        return _pairs(ws, xs, lambda w, x: torch._int_mm(x, w.t())), ops, n * k + m * k + m * n * 4, None
    if path == "tinygemm_w4a16":
        ws = prob.get("tinygemm")
        return _pairs(ws, x_copies(m, k, n * k // 2),
                      lambda w, x: torch._weight_int4pack_mm(x, w[0], 128, w[1])), ops, \
            n * k // 2 + n * (k // 128) * 4 + m * k * 2 + out_b, None
    if path == "triton_int8_mm":
        ws, wsc = prob.get("int8"), prob.get("int8_scale")
        c = cfg or table_config(TABLES["int8"], m)
        xs = [(torch.randint(-128, 127, (m, k), device="cuda", dtype=torch.int8),
               torch.rand(m, device="cuda") + 0.5) for _ in range(min(len(ws), 8))]
        return _pairs(ws, xs, lambda w, x: i8.int8_gemm(x[0], x[1], w, wsc, c)), ops, \
            n * k + m * k + 4 * (m + n) + out_b, c
    if path == "quantizer":
        xs = x_copies(m, k, 0)
        return [lambda x=x: w8.quantize_per_token_int8_triton(x) for x in xs], m * k, m * k * 3 + 4 * m, None
    if path in ENGINES:
        from w4a8_kernels.registry import get_path
        run = get_path(path).run
        ps = prob.get(path)
        scale_b = n * (1 if prob.g == -1 else k // prob.g) * 2
        return _pairs(ps, x_copies(m, k, n * k // 2), lambda p, x: run(x, p)), ops, \
            n * k // 2 + scale_b + m * k * 2 + out_b, None
    if path in PEERS:
        ls = prob.get(path)
        return _pairs(ls, x_copies(m, k, n * k // 2), lambda lay, x: lay(x)), ops, \
            (n * k if path == "peer_w8a8" else n * k // 2) + m * k * 2 + out_b, None
    ps = prob.get("packed_int" if path == "w4a8_int_rescale" else "packed")
    wbytes = ps[0].nbytes
    kind = "w4a16" if path == "w4a16_fallback" else "w4a8"
    c = fit(kind, cfg, ps[0]) if cfg else table_cfg(kind, ps[0], m)
    if path in ("w4a8_prequant", "w4a8_int_rescale"):
        xs = [w8.quantize_per_token_int8_triton(x) for x in x_copies(m, k, wbytes)]
        return _pairs(ps, xs, lambda p, x: w8.w4a8_matmul_quantized(x[0], x[1], p, torch.bfloat16, c)), \
            ops, wbytes + m * k + 4 * m + out_b, c
    if path == "w4a8_native":
        return _pairs(ps, x_copies(m, k, wbytes), lambda p, x: w8.w4a8_matmul(x, p, config=c)), \
            ops, wbytes + m * k * 2 + out_b, c
    if path == "w4a16_fallback":
        return _pairs(ps, x_copies(m, k, wbytes), lambda p, x: w16.w4a16_matmul(x, p, c)), \
            ops, wbytes + m * k * 2 + out_b, c
    raise ValueError(path)


def engine_facts(path, prob, m) -> dict:
    """What ran for vLLM's own kernels: the activation and weight format humming chose, the
    Machete schedule, and the JIT-compile time kept apart from the timed calls."""
    p = prob.get(path)[0]
    facts = {"prepare_s": round(prob.prepare_s.get(path, 0.0), 3)}
    if path == "vllm_machete":
        from w4a8_kernels.vllm_machete import machete_schedule
        facts["schedule"] = machete_schedule(m, p)
    else:
        facts.update(activation=p.activation, weight_format=p.weight_format,
                     requested=p.requested, vllm_path=p.vllm_path, notes=list(p.notes))
    if path in NOT_VLLM:
        facts["label"] = NOT_VLLM[path]
    # Relative (Frobenius) error against the float32 product of the same int4 weight.
    from w4a8_kernels.registry import get_path
    n, k = prob.shape
    x = make_x(min(m, 1024), k, seed=7)
    ref = x.float() @ dequant_f32(prob.w_q, prob.scales, prob.g).t()
    out = get_path(path).run(x, p).float()
    facts["rel_err_f32"] = float((out - ref).norm() / ref.norm())
    return facts


def measure(path, prob, m, cfg=None, samples=25) -> dict:
    fns, ops, nbytes, c = build(path, prob, m, cfg)
    first_s = None
    if path in ENGINES:  # the first call at this M compiles the kernel its heuristic picks
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fns[0]()
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
    try:
        t = time_calls(fns, samples, no_graph=path in PEERS and NO_GRAPH_PEERS)
    except RuntimeError as exc:  # a peer (or vLLM kernel) whose calls a CUDA graph cannot capture
        if path not in PEERS and path not in ENGINES:
            raise
        log(f"{path}: graph capture failed ({str(exc)[:120]}); timing with events")
        torch.cuda.synchronize()
        t = time_calls(fns, no_graph=True)
    del fns
    if first_s is not None:  # JIT time apart from run time: the first call less one timed call
        t["engine"] = {**engine_facts(path, prob, m), "first_call_s": round(first_s, 4),
                       "jit_s": round(max(0.0, first_s - t["time_us"] / 1e6), 4)}
    return {**t, "ops": ops, "bytes": nbytes, "config": asdict(c) if c else None}


NO_GRAPH_PEERS = False
ENGINE_PATHS: tuple[str, ...] = ENGINES  # --engines narrows it; the ones that cannot run log why
ONLY_PATHS: frozenset[str] = frozenset()  # --paths: time only these (empty: every planned path)
ONLY_GROUPS: frozenset[int] = frozenset()  # --groups: bench only these group sizes (empty: all)


# %% sweep phase

SWEEP_KINDS = [("w4a8", "channel"), ("w4a8", "group"), ("w4a16", "channel"), ("w4a16", "group")]
SWEEP_PATH = {"w4a8": "w4a8_prequant", "w4a16": "w4a16_fallback"}


def run_sweep(shapes, deadline, kinds=None) -> dict:
    recs = []
    for shape in shapes:
        gs = groups_for(shape)
        for kind, gk in SWEEP_KINDS:
            if kinds and f"{kind}|{gk}" not in kinds:
                continue
            g = -1 if gk == "channel" else gs[1]
            prob = Problem(shape, g)
            for m in SWEEP_MS:
                seen = set()
                for lo, hi, cand in CANDIDATES[kind]:
                    cfg = candidate_for(kind, g, cand)
                    if cfg is None or not lo <= m <= hi or cfg in seen:
                        continue
                    seen.add(cfg)
                    if time.time() > deadline:
                        log("sweep: time budget reached")
                        return {"records": recs, "complete": False}
                    rec = {"kind": kind, "gk": gk, "g": g, "N": shape[0], "K": shape[1], "M": m,
                           "cfg": asdict(cfg)}
                    try:
                        rec.update(measure(SWEEP_PATH[kind], prob, m, cfg, samples=12))
                    except Exception as exc:  # noqa: BLE001 - a config may not fit
                        rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
                    recs.append(rec)
            prob.free()
        log(f"sweep: {shape} done ({len(recs)} records)")
    return {"records": recs, "complete": True}


def pick_winners(recs) -> dict:
    """Per (kind, group kind, M): the config with the best geometric-mean slowdown against
    the per-shape best, over the shapes where every finalist ran."""
    from collections import defaultdict
    pts = defaultdict(lambda: defaultdict(dict))
    for r in recs:
        if "time_us" not in r:
            continue
        cfg = json.dumps(r["cfg"], sort_keys=True)
        pts[(r["kind"], r["gk"], r["M"])][(r["N"], r["K"])][cfg] = r["time_us"]
    winners = {}
    for (kind, gk, m), points in pts.items():
        cfgs = set.intersection(*(set(v) for v in points.values()))
        if not cfgs:
            continue
        score = {c: math.exp(statistics.mean(math.log(v[c] / min(v.values())) for v in points.values()))
                 for c in cfgs}
        best = min(score, key=score.get)
        winners.setdefault(f"{kind}|{gk}", {})[m] = {
            "cfg": json.loads(best), "geomean_slowdown": score[best], "shapes": len(points)}
    return winners


def tables_from_winners(winners: dict, base: dict[str, ConfigTable]) -> dict[str, ConfigTable]:
    """Per-M winners -> M buckets: runs of M values with one winner merge into one bucket
    (its m_max the run's last M); at and below DECODE_MAX the base table's decode stays;
    past the last swept M the base table's prefill config stays."""
    out = dict(base)
    for key, per_m in winners.items():
        old = base[key]
        table: list[tuple[int | None, TileConfig]] = [(DECODE_MAX, table_config(old, DECODE_MAX))]
        for m in sorted(per_m):
            cfg = TileConfig(**per_m[m]["cfg"])
            if table[-1][1] == cfg:
                table[-1] = (m, cfg)
            else:
                table.append((m, cfg))
        last = old[-1][1]
        if table[-1][1] == last:
            table[-1] = (None, last)
        else:
            table.append((None, last))
        out[key] = tuple(table)
    return out


def tables_doc(tables: dict[str, ConfigTable]) -> dict:
    return {key: [[m_max, asdict(c)] for m_max, c in table] for key, table in tables.items()}


def tables_from_doc(doc: dict) -> dict[str, ConfigTable]:
    return {key: tuple((m_max, TileConfig(**c)) for m_max, c in table) for key, table in doc.items()}


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

MATH_PEAK = {"bf16_dense": "bf16_tflops", "tinygemm_w4a16": "bf16_tflops",
             "w4a16_fallback": "bf16_tflops", "peer_w4a16": "bf16_tflops",
             "vllm_humming": "bf16_tflops", "vllm_machete": "bf16_tflops"}


def _record(path, group, shape, m, t, extra=None) -> dict:
    """One record of the results schema (workbench/results.py)."""
    n, k = shape
    tus = t["time_us"]
    peak = LIMITS[MATH_PEAK.get(path, "int8_tops")]
    bound_us = max(t["ops"] / (peak * 1e6), t["bytes"] / (LIMITS["hbm_gbs"] * 1e3))
    return {
        "path": path, "kernel": KERNEL_OF_PATH[path], "n": n, "k": k, "group_size": group, "m": m,
        "median_us": round(tus, 3), "p20_us": round(t["p20_us"], 3), "p80_us": round(t["p80_us"], 3),
        "repeats": t["samples"], "config": t.get("config"),
        "detail": {"method": t["method"], "tops": round(t["ops"] / tus / 1e6, 2),
                   "gbs": round(t["bytes"] / tus / 1e3, 1), "ops": t["ops"], "bytes": t["bytes"],
                   "math_peak_tops": peak, "bound_us": round(bound_us, 3),
                   "frac_of_roofline": round(bound_us / tus, 4),
                   "weight_stream_bound_us": round(n * k / 2 / (LIMITS["hbm_gbs"] * 1e3), 3),
                   **({"engine": t["engine"]} if "engine" in t else {}), **(extra or {})},
    }


def _error(path, group, shape, m, exc) -> dict:
    return {"path": path, "n": shape[0], "k": shape[1], "group_size": group, "m": m,
            "error": f"{type(exc).__name__}: {exc}"[:300]}


def bench_plan(shape, m, probs, peers: bool):
    n, k = shape
    base = probs.get(-1)  # absent when --groups leaves per-channel out: no baselines then
    plan = [] if base is None else [("bf16_dense", -1, base), ("triton_int8_mm", -1, base),
                                    ("quantizer", -1, base)]
    if m > 16 and base is not None:  # torch._int_mm needs M > 16
        plan.append(("int8_mm", -1, base))
    if 128 in probs and m * n * k <= 4096 * 8192 * 8192:
        plan.append(("tinygemm_w4a16", 128, probs[128]))
    for g, prob in probs.items():
        if g in (32, 64) and 128 in probs and m not in EXTRA_GROUP_MS:
            continue
        plan += [("w4a8_prequant", g, prob), ("w4a8_native", g, prob), ("w4a16_fallback", g, prob)]
        if g != -1:
            plan.append(("w4a8_int_rescale", g, prob))
    if ENGINE_PATHS:
        for g, prob in probs.items():
            if g in (32, 64) and 128 in probs and m not in EXTRA_GROUP_MS:
                continue
            int8 = "vllm_humming_int8" if g == -1 else "vllm_humming_int8_forced"
            plan += [(p, g, prob) for p in ("vllm_humming", int8, "vllm_machete")
                     if p in ENGINE_PATHS]
    if peers and base is not None and m in PEER_SHAPES.get(shape, ()):
        plan.append(("peer_w8a8", -1, base))
        if 128 in probs:
            plan += [("peer_w4a16", 128, probs[128]), ("peer_w4a8", 128, probs[128])]
    return [step for step in plan if not ONLY_PATHS or step[0] in ONLY_PATHS]


def run_bench(shapes, ms, deadline, out_dir, meta, peers=True, name=None) -> list[dict]:
    name = name or f"{PREFIX}_bench"
    recs = []
    for shape in shapes:
        probs = {g: Problem(shape, g) for g in groups_for(shape)
                 if not ONLY_GROUPS or g in ONLY_GROUPS}
        for m in ms:
            if time.time() > deadline:
                log("bench: time budget reached")
                return recs
            for path, g, prob in bench_plan(shape, m, probs, peers):
                t0 = time.time()
                try:
                    recs.append(_record(path, g, shape, m, measure(path, prob, m)))
                except Exception as exc:  # noqa: BLE001
                    recs.append(_error(path, g, shape, m, exc))
                if path in PEERS and time.time() - t0 > 5:
                    log(f"{path} {shape} M={m}: {time.time() - t0:.0f}s (autotune)")
            torch.cuda.empty_cache()
        for p in probs.values():
            p.free()
        del probs
        log(f"bench: {shape} done ({len(recs)} records)")
        write_results(out_dir, name, meta, recs)
    return recs


CSV_FIELDS = ["path", "kernel", "n", "k", "group_size", "m", "median_us", "p20_us", "p80_us",
              "repeats", "tops", "gbs", "frac_of_roofline", "method", "config", "error"]


def write_results(out_dir: Path, name: str, meta: dict, recs: list[dict]) -> None:
    """The schema document (timed records; failures listed in provenance) and a CSV export."""
    timed = [r for r in recs if "median_us" in r]
    prov = {**meta["provenance"], **{k: v for k, v in meta.items() if k != "provenance"},
            "failed": [r for r in recs if "error" in r]}
    doc = {"schema": "w4a8-workbench-results/1", "provenance": prov, "records": timed}
    (out_dir / f"{name}.json").write_text(json.dumps(doc, indent=1))
    write_csv(out_dir / f"{name}.csv", recs)


def write_csv(path: Path, recs: list[dict]) -> None:
    """Records (and failures) as CSV rows, their details flattened."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in recs:
            row = {**r, **r.get("detail", {})}
            row["config"] = json.dumps(r["config"]) if r.get("config") else ""
            w.writerow(row)


# %% tensor-parallel shards on one GPU

TP_MS = [1, 16, 64, 256, 1024, 4096]


def run_tp(out_dir: Path, meta: dict, deadline: float) -> list[dict]:
    """Each TP rank's GEMMs of the MLP block (tp_bench.shard_shapes), timed alone on one GPU:
    the per-shard half of issue 17 (the collective needs several GPUs)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tp_bench import MODEL, shard_shapes
    recs = []
    for layer, tp, (n, k) in shard_shapes():
        for g in (-1, 128):
            if g != -1 and k % g:
                recs.append({"path": "w4a8_native", "n": n, "k": k, "group_size": g, "m": 0,
                             "error": f"{layer} at TP {tp}: K = {k} is not a multiple of g{g}"})
                continue
            prob = Problem((n, k), g)
            for m in TP_MS:
                if time.time() > deadline:
                    log("tp: time budget reached")
                    write_results(out_dir, f"{PREFIX}_tp_shards", meta, recs)
                    return recs
                for path in ("w4a8_native", "w4a16_fallback"):
                    extra = {"model": MODEL, "layer": layer, "tp": tp}
                    try:
                        recs.append(_record(path, g, (n, k), m, measure(path, prob, m), extra))
                    except Exception as exc:  # noqa: BLE001
                        recs.append(_error(path, g, (n, k), m, exc))
            prob.free()
        log(f"tp: {layer} TP={tp} ({n}x{k}) done")
    write_results(out_dir, f"{PREFIX}_tp_shards", meta, recs)
    return recs


# %% provenance and ceilings

def _version(dist: str) -> str:
    import importlib.metadata as md
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "absent"


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
    try:
        import importlib.metadata as md
        gemlite_v = md.version("gemlite")
    except Exception:  # noqa: BLE001 - carried as a folder, without metadata
        gemlite_v = os.environ.get("GEMLITE_VERSION", "absent")
    return {
        "platform": PART.preset, "part": PART.to_json(), "device": torch.cuda.get_device_name(0),
        "gpu": torch.cuda.get_device_name(0), "nvidia_smi": smi,
        "driver": smi.split(",")[1].strip() if smi.count(",") >= 1 else None,
        "sm_count": p.multi_processor_count, "capability": f"{p.major}.{p.minor}",
        "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
        "gemlite": gemlite_v, "humming": _version("humming-kernels"),
        "engines": list(ENGINE_PATHS), "python": sys.version.split()[0],
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_1m": os.getloadavg()[0], "script": "benchmarks/gpu_bench.py",
        "commit": commit, "limits_datasheet": LIMITS,
        "timing": f"CUDA-graph replays over rotating copies > 3x the {PART.l2_bytes / 1e6:.0f} MB L2 "
                  "(events for calls >= 2 ms); median, p20, p80 of the samples (workbench.gpu_timing)",
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

def run_profile(points) -> None:
    """One launch of each GEMM at each (shape, M), for ncu: this project's kernels with the
    committed tables, cuBLAS bf16 and int8, the plain Triton int8 GEMM."""
    w8, w16, i8 = api()
    for shape, m in points:
        x = make_x(m, shape[1])
        xq, xs = w8.quantize_per_token_int8_triton(x)
        for g in (-1, groups_for(shape)[1]):
            w_q, scales = make_weight(shape, g)
            packed = w8.prepare_w4a8(w_q, scales, g)
            w8.w4a8_matmul_quantized(xq, xs, packed, torch.bfloat16, table_cfg("w4a8", packed, m))
            w16.w4a16_matmul(x, packed, table_cfg("w4a16", packed, m))
        w_q, scales = make_weight(shape, -1)
        x @ dequant_f32(w_q, scales, -1).to(torch.bfloat16).t()
        if m > 16:
            torch._int_mm(xq, w_q.t())
            i8.int8_gemm(xq, xs.reshape(-1), w_q, torch.ones(shape[0], device="cuda"))
    torch.cuda.synchronize()


# %% main

def guarded(name: str, fn, *a, **kw):
    """Run one phase; a failure is logged and the later phases still run."""
    try:
        return fn(*a, **kw)
    except Exception:  # noqa: BLE001
        log(f"PHASE {name} FAILED:\n{traceback.format_exc()[-3000:]}")
        return None


def gemlite_setup(config_in: Path | None, config_out: Path) -> dict:
    """gemlite autotunes on first use of each (M bucket, shape); a cached config from an
    earlier run on this GPU model skips that."""
    import gemlite
    gemlite.reset_config()
    loaded = bool(config_in and config_in.exists() and gemlite.load_config(str(config_in)))
    return {"autotune": "fast (gemlite's default)", "config_loaded": str(config_in) if loaded else None,
            "config_out": config_out.name}


def engines_that_run(names: list[str]) -> tuple[str, ...]:
    """The requested vLLM kernels that can run here; each one that cannot is logged with why."""
    from w4a8_kernels.registry import get_path
    unknown = [n for n in names if n not in ENGINES]
    if unknown:
        raise SystemExit(f"--engines: unknown {unknown}; accepted: {', '.join(ENGINES)}")
    ok = []
    for name in names:
        good, why = get_path(name).probe()
        if good:
            ok.append(name)
        else:
            log(f"{name}: not timed ({why})")
    return tuple(ok)


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--phases", default="compile,check,sweep,bench")
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument("--sweep-share", type=float, default=0.6, help="budget share of the sweep")
    ap.add_argument("--shapes", default="all", help="'all' or e.g. 8192x8192,4096x4096")
    ap.add_argument("--ms", default="all")
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--tables", type=Path, default=None, help="launch with the tables of a sweep JSON")
    ap.add_argument("--kinds", default="", help="sweep only these, e.g. w4a8|group,w4a16|channel")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--gemlite-config", type=Path, default=None)
    ap.add_argument("--peer-events", action="store_true", help="time gemlite without CUDA graphs")
    ap.add_argument("--paths", default="", help="time only these paths, e.g. vllm_humming,bf16_dense")
    ap.add_argument("--groups", default="", help="bench only these group sizes, e.g. 128 or -1,128")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="vLLM's own kernels to time beside ours ('' for none)")
    return ap.parse_args()


def _quant_jobs() -> list[dict]:
    return [{"kind": "quant", "cfg": asdict(T(16, 16, 16)), "g": -1, "k": k, "split": None, "m": 2}
            for k in (4096, 8192)]


def _compile_candidates(workers: int) -> None:
    """Every sweep candidate and table entry, compiled ahead of the sweep."""
    kinds_cfgs = [(kind, c) for kind, cs in CANDIDATES.items() for _, _, c in cs]
    kinds_cfgs += table_entries()
    groups_k = [(-1, 4096), (128, 4096)]
    jobs = compile_jobs(kinds_cfgs, groups_k) + _quant_jobs()
    guarded("compile", run_compile, jobs, workers)


def _sweep_tables(shapes, until: float, kinds: list[str], meta: dict, out: Path) -> None:
    """The sweep: its winners become the launch tables (TABLES), written to h200_sweep.json."""
    global TABLES
    base = TABLES
    sw = guarded("sweep", run_sweep, shapes, until, kinds)
    if not sw:
        return
    winners = pick_winners(sw["records"])
    TABLES = tables_from_winners(winners, base)
    sweep_doc = {**meta, "winners": {k: {str(m): w for m, w in v.items()} for k, v in winners.items()},
                 "tables_before": tables_doc(base), "tables_after": tables_doc(TABLES),
                 "complete": sw["complete"], "records": sw["records"]}
    (out / f"{PREFIX}_sweep.json").write_text(json.dumps(sweep_doc, indent=1))
    log("tables: " + json.dumps({k: [(m, (c.block_m, c.block_n, c.block_k, c.split_k,
                                          c.num_warps, c.num_stages, c.swap_ab, c.variant,
                                          c.programs_per_sm)) for m, c in t]
                                 for k, t in TABLES.items()}))


def _compile_tables(workers: int) -> None:
    # The tables' configs on the unaligned shard (masked K tail) and at g32 / g64.
    tail_k = 1024 + 14784 % 1024
    jobs = compile_jobs(table_entries(), [(-1, 4096), (128, 4096), (-1, tail_k), (64, tail_k),
                                          (32, 4096), (64, 4096)])
    guarded("compile tables", run_compile, jobs + _quant_jobs(), workers)


def _bench_with_peers(args: argparse.Namespace, shapes, ms, deadline: float, meta: dict, peers: bool) -> None:
    out = args.out
    if peers:
        meta["gemlite_setup"] = guarded("gemlite", gemlite_setup, args.gemlite_config,
                                        out / "h200_gemlite_config.json")
        peers = meta["gemlite_setup"] is not None
    if "bench" in args.phases.split(","):
        recs = guarded("bench", run_bench, shapes, ms, deadline, out, meta, peers)
        if recs is not None:
            write_results(out, f"{PREFIX}_bench", meta, recs)
            log(summary(recs))
    if peers:
        import gemlite
        guarded("gemlite cache", gemlite.cache_config, str(out / "h200_gemlite_config.json"))


def use_part(part) -> None:
    """Label and bound everything this run writes by `part` (a workbench.gpu_part.GpuPart)."""
    global PART, PREFIX
    PART, PREFIX = part, short_name(part.preset)
    LIMITS.clear()
    LIMITS.update(part.limits())


def main() -> None:
    global TABLES, NO_GRAPH_PEERS, ENGINE_PATHS, ONLY_PATHS, ONLY_GROUPS
    args = _args()
    part = read_part()
    if part.preset is None:  # its file would be fitted as some other part's
        sys.exit(f"gpu_bench: {part.name}: no preset matches ({part.why}); add one to "
                 "workbench/platforms.py and workbench/perf/hardware.json first")
    use_part(part)
    log(f"part: {PART.name} -> {PART.preset} ({PART.why})")
    t_start = time.time()
    deadline = t_start + args.budget_s
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    phases = args.phases.split(",")
    shapes = SHAPES if args.shapes == "all" else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ms = M_LIST if args.ms == "all" else [int(v) for v in args.ms.split(",")]
    NO_GRAPH_PEERS = args.peer_events
    ENGINE_PATHS = engines_that_run([e for e in args.engines.split(",") if e])
    ONLY_PATHS = frozenset(p for p in args.paths.split(",") if p)
    ONLY_GROUPS = frozenset(int(g) for g in args.groups.split(",") if g)
    TABLES = module_tables()
    if args.tables:
        TABLES = tables_from_doc(json.loads(args.tables.read_text())["tables_after"])

    if "profile" in phases:
        run_profile([(shape, m) for shape in shapes for m in ms])
        return

    meta = {"provenance": provenance(args.commit)}
    log(f"provenance: {json.dumps(meta['provenance'])}")
    if "compile" in phases and "sweep" in phases:
        _compile_candidates(args.workers)
    meta["ceilings"] = guarded("ceilings", ceilings)
    log(f"ceilings: {meta['ceilings']}")
    if "sweep" in phases:
        _sweep_tables(shapes, t_start + args.sweep_share * args.budget_s,
                      [k for k in args.kinds.split(",") if k], meta, out)
    meta["tables"] = tables_doc(TABLES)
    if "compile" in phases:
        _compile_tables(args.workers)
    check_state = guarded("check", run_check, shapes, deadline) if "check" in phases else None
    _bench_with_peers(args, shapes, ms, deadline, meta, not args.no_peers and "bench" in phases)
    if "tp" in phases:
        guarded("tp", run_tp, out, meta, deadline + 60)
    if check_state is not None:
        chk = guarded("check finish", finish_check, check_state, deadline + 90)
        if chk:
            (out / f"{PREFIX}_check.json").write_text(json.dumps({**meta, **chk}, indent=1))
    facts = guarded("compiled facts", compiled_facts)
    if facts:
        (out / f"{PREFIX}_compiled.json").write_text(json.dumps(facts, indent=1))
    (out / f"{PREFIX}_log.txt").write_text("\n".join(LOG) + "\n")
    log(f"total {time.time() - t_start:.0f}s")


def summary(recs: list[dict]) -> str:
    """A short table of times (us), printed last."""
    by = {(r["path"], r["group_size"], r["n"], r["k"], r["m"]): r["median_us"]
          for r in recs if "median_us" in r}
    cols = [("bf16_dense", -1), ("int8_mm", -1), ("w4a8_prequant", -1), ("w4a8_prequant", 0),
            ("w4a8_int_rescale", 0), ("w4a8_native", -1), ("w4a16_fallback", -1),
            ("w4a16_fallback", 0), ("peer_w4a16", 128), ("peer_w8a8", -1), ("peer_w4a8", 128)]
    lines = ["N x K | M | " + " | ".join(f"{p}{'' if g == -1 else ' g'}" for p, g in cols)]
    for (n, k) in SHAPES:
        g = 128 if k % 128 == 0 else 64
        for m in (1, 16, 32, 64, 128, 256, 1024, 4096, 16384):
            row = [by.get((p, g if gg == 0 else gg, n, k, m)) for p, gg in cols]
            lines.append(f"{n}x{k} | {m} | " + " | ".join("-" if v is None else f"{v:.1f}" for v in row))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
