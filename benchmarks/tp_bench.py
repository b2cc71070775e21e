"""Tensor parallelism, measured: a layer and an MLP block sharded the way vLLM shards them.

    python benchmarks/tp_bench.py --backend gloo --world 2 [--out DIR]   # CPU processes
    python benchmarks/tp_bench.py --backend nccl --world 8 --out DIR     # one process per GPU

The MLP is Qwen2's (vllm/model_executor/models/qwen2.py:91-114): gate_up_proj is a
MergedColumnParallelLinear, each rank holding its slice of gate and of up
(vllm/model_executor/layers/linear.py:502, 861), SiluAndMul runs locally, and down_proj is
a RowParallelLinear over the input dimension (linear.py:1708, 1779) whose partial outputs
are all-reduced (linear.py:1818). Each rank runs this project's W4A8 native and W4A16
kernels on its shard (Triton on a GPU, the CPU kernels on a CPU).

Checks, per rank count: the column-parallel layer gathered equals the unsharded layer;
the row-parallel layer summed equals its float64 reference within float32 rounding. W4A8
quantizes each rank's slice of the down_proj input with its own per-token scale, as vLLM
does, so the W4A8 row-parallel result is held to the reference of that arithmetic, and its
distance to the unsharded layer is reported. Timings: each rank's GEMMs, the collective,
and the whole block, against M.

On one GPU, `benchmarks/gpu_bench.py --phases tp` times each rank's shard alone
(`shard_shapes`); the collective needs several GPUs.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

from w4a8_kernels.errors import KernelInputError

MODEL = "Qwen2-72B"
HIDDEN, INTERMEDIATE = 8192, 29568  # Qwen2-72B config.json: hidden_size, intermediate_size
TPS = (1, 2, 4, 8)

# NVLink multicast stays off (the device machines require it, for the host's other users).
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def shard_shapes(hidden: int = HIDDEN, intermediate: int = INTERMEDIATE, tps=TPS):
    """(layer, tp, (N, K)) of one rank's GEMMs: gate_up [2 I / tp, H], down [H, I / tp]."""
    out = []
    for tp in tps:
        if intermediate % tp:
            raise KernelInputError(f"intermediate size {intermediate} does not split over {tp} ranks; "
                                   "accepted: a TP size that divides it")
        out.append(("gate_up_proj", tp, (2 * intermediate // tp, hidden)))
        out.append(("down_proj", tp, (hidden, intermediate // tp)))
    return out


# %% sharding (what each rank holds)

def column_shard(w_q: torch.Tensor, scales: torch.Tensor, sizes: list[int], tp: int, rank: int):
    """MergedColumnParallelLinear: each of the merged outputs (sizes) split over ranks, the
    rank's slices concatenated (linear.py:861)."""
    parts_w, parts_s, start = [], [], 0
    for size in sizes:
        per = size // tp
        parts_w.append(w_q[start + rank * per: start + (rank + 1) * per])
        parts_s.append(scales[start + rank * per: start + (rank + 1) * per])
        start += size
    return torch.cat(parts_w), torch.cat(parts_s)


def row_shard(w_q: torch.Tensor, scales: torch.Tensor, g: int, tp: int, rank: int):
    """RowParallelLinear: the input dimension split over ranks (linear.py:1779)."""
    k = w_q.shape[1]
    per = k // tp
    if k % tp or g != -1 and per % g:
        raise KernelInputError(f"K = {k} over {tp} ranks gives {k / tp:g} per rank, not a multiple of "
                               f"g{g}; accepted: a TP size that leaves whole groups on every rank")
    sl = slice(rank * per, (rank + 1) * per)
    s = scales if g == -1 else scales[:, rank * per // g: (rank + 1) * per // g]
    return w_q[:, sl].contiguous(), s.contiguous(), sl


# %% kernels (this project's, on the rank's device)

class Kernels:
    """W4A8 native and W4A16 on one device: Triton on CUDA, the CPU kernels on CPU."""

    def __init__(self, device: torch.device):
        self.device = device

    def prepare(self, w_q, scales, g):
        if self.device.type == "cuda":
            from w4a8_kernels.triton_w4a8 import prepare_w4a8
            p = prepare_w4a8(w_q, scales, g, device=self.device)
            return {"w4a8": p, "w4a16": p}
        from w4a8_kernels.cpu_w4a8 import prepare_w4a8
        from w4a8_kernels.cpu_w4a16 import prepare_w4a16
        return {"w4a8": prepare_w4a8(w_q, scales, g), "w4a16": prepare_w4a16(w_q, scales, g)}

    def run(self, kind: str, x: torch.Tensor, prepared) -> torch.Tensor:
        """float32 out on CPU, x's dtype (bf16) on CUDA."""
        if self.device.type == "cuda":
            from w4a8_kernels.triton_w4a8 import w4a8_matmul
            from w4a8_kernels.triton_w4a16 import w4a16_matmul
            return (w4a8_matmul if kind == "w4a8" else w4a16_matmul)(x, prepared[kind])
        from w4a8_kernels.cpu_w4a8 import w4a8_native
        from w4a8_kernels.cpu_w4a16 import w4a16_dequant
        return (w4a8_native if kind == "w4a8" else w4a16_dequant)(x, prepared[kind])


def make_layer(n: int, k: int, g: int, seed: int):
    """The same random int4 layer on every rank (a seeded CPU generator)."""
    gen = torch.Generator().manual_seed(seed)
    w_q = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    groups = 1 if g == -1 else k // g
    scales = (torch.rand(n, groups, generator=gen) * 0.02 + 0.001).bfloat16().float()
    return w_q, scales


# %% one rank

def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, device, reps: int) -> list[float]:
    fn()
    _sync(device)
    out = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        _sync(device)
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def _med(v):
    return round(statistics.median(v), 2)


def check_rank(rank: int, tp: int, kern: Kernels, hidden: int, inter: int, g: int, m: int) -> dict:
    """Column- and row-parallel layers and the MLP against the unsharded computation."""
    from w4a8_kernels.quant import quantize_per_token_int8
    from w4a8_kernels.reference import w4a8_reference, w4a16_reference
    dev = kern.device
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(m, hidden, generator=gen).to(dtype)
    gu_w, gu_s = make_layer(2 * inter, hidden, g, seed=1)
    dn_w, dn_s = make_layer(hidden, inter, g, seed=2)
    full_gu = kern.prepare(gu_w, gu_s, g)
    gw, gs = column_shard(gu_w, gu_s, [inter, inter], tp, rank)
    shard_gu = kern.prepare(gw, gs, g)
    dw, ds, sl = row_shard(dn_w, dn_s, g, tp, rank)
    shard_dn = kern.prepare(dw, ds, g)
    res = {}
    for kind in ("w4a8", "w4a16"):
        xd = x.to(dev)
        # column-parallel: gather the rank slices of gate and up, compare with unsharded
        y = kern.run(kind, xd, shard_gu)
        parts = [torch.empty_like(y) for _ in range(tp)]
        dist.all_gather(parts, y.contiguous())
        per = inter // tp
        gate = torch.cat([p[:, :per] for p in parts], 1)
        up = torch.cat([p[:, per:] for p in parts], 1)
        full = kern.run(kind, xd, full_gu)
        col_equal = bool(torch.equal(torch.cat([gate, up], 1), full))
        col_diff = (torch.cat([gate, up], 1).float() - full.float()).abs().max().item()
        # row-parallel on the rank's slice of the MLP's hidden activation
        h = (torch.nn.functional.silu(gate.float()) * up.float()).to(dtype)
        h_r = h[:, sl].contiguous()
        part = kern.run(kind, h_r, shard_dn).float()
        total = part.clone()
        dist.all_reduce(total)
        h64 = h.cpu()
        if kind == "w4a8":
            # each rank quantizes its own slice per token (as vLLM's shards do)
            refs = [w4a8_reference(h64[:, r * (inter // tp):(r + 1) * (inter // tp)],
                                   *row_shard(dn_w, dn_s, g, tp, r)[:2], g) for r in range(tp)]
            ref = sum(refs)
            q, s = quantize_per_token_int8(h64)
            mag = (q.double() * s.double()).abs() @ dequant64(dn_w, dn_s, g).abs().t()
            unsharded = w4a8_reference(h64, dn_w, dn_s, g)
        else:
            ref = w4a16_reference(h64, dn_w, dn_s, g)
            mag = h64.double().abs() @ dequant64(dn_w, dn_s, g).abs().t()
            unsharded = ref
        u_out = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -24
        u_w = 2.0 ** -8 if kind == "w4a16" and dev.type == "cuda" else 0.0
        # each rank's output rounding (its partial is below mag), the all-reduce's float32
        # sums, the weight rounding and float32 accumulation over the K of each rank
        budget = u_out * ref.abs() + (tp * u_out + u_w + (inter + tp) * 2.0 ** -24) * mag
        err = (total.cpu().double() - ref).abs()
        res[kind] = {
            "column_gathered_equals_unsharded": col_equal, "column_max_abs_diff": col_diff,
            "row_within_rounding_of_reference": bool((err <= budget).all()),
            "row_max_err_over_budget": (err / budget).max().item(),
            "row_rel_diff_to_unsharded": ((total.cpu().double() - unsharded).norm()
                                          / unsharded.norm()).item(),
        }
    return res


def dequant64(w_q, scales, g):
    from w4a8_kernels.quant import dequantize_groupwise
    return dequantize_groupwise(w_q, scales, g, dtype=torch.float64)


def time_rank(rank: int, tp: int, kern: Kernels, hidden: int, inter: int, g: int, ms, reps: int):
    """Per-rank GEMM times, the all-reduce, and the whole MLP block, per M (us, medians)."""
    dev = kern.device
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    gw, gs = column_shard(*make_layer(2 * inter, hidden, g, seed=1), [inter, inter], tp, rank)
    dw, ds, _ = row_shard(*make_layer(hidden, inter, g, seed=2), g, tp, rank)
    gu, dn = kern.prepare(gw, gs, g), kern.prepare(dw, ds, g)
    per = inter // tp
    rows = []
    for m in ms:
        x = torch.randn(m, hidden).to(dtype).to(dev)
        h = torch.randn(m, per).to(dtype).to(dev)
        red = torch.randn(m, hidden, device=dev, dtype=dtype)
        for kind in ("w4a8", "w4a16"):
            def block():
                y = kern.run(kind, x, gu)
                a = (torch.nn.functional.silu(y[:, :per].float()) * y[:, per:].float()).to(dtype)
                out = kern.run(kind, a, dn)
                dist.all_reduce(out)
                return out
            t_gu = _time(lambda: kern.run(kind, x, gu), dev, reps)
            t_dn = _time(lambda: kern.run(kind, h, dn), dev, reps)
            t_ar = _time(lambda: dist.all_reduce(red), dev, reps)
            t_all = _time(block, dev, reps)
            rows.append({"kind": kind, "m": m, "gate_up_us": _med(t_gu), "down_us": _med(t_dn),
                         "all_reduce_us": _med(t_ar), "mlp_us": _med(t_all)})
    return rows


def worker(rank: int, world: int, args: dict) -> None:
    os.environ.update(NCCL_ENV)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args["port"]))
    backend = args["backend"]
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        torch.set_num_threads(args.get("threads", 1))
        device = torch.device("cpu")
    dist.init_process_group(backend, rank=rank, world_size=world,
                            device_id=device if backend == "nccl" else None)
    kern = Kernels(device)
    out = {"checks": [], "timings": []}
    try:
        for g in args["groups"]:
            out["checks"].append({"tp": world, "g": g, "m": args["check_m"],
                                  **check_rank(rank, world, kern, args["hidden"], args["inter"], g,
                                               args["check_m"])})
            if args["ms"]:
                for row in time_rank(rank, world, kern, args["hidden"], args["inter"], g,
                                     args["ms"], args["reps"]):
                    out["timings"].append({"tp": world, "g": g, **row})
        gathered = [None] * world
        dist.all_gather_object(gathered, out)
        if rank == 0:
            Path(args["result"]).write_text(json.dumps(gathered))
    finally:
        dist.destroy_process_group()


def run(backend: str, world: int, hidden: int, inter: int, groups, ms, reps: int, check_m: int,
        port: int = 29533) -> list[dict]:
    """Spawn `world` ranks; returns each rank's checks and timings."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmpdir:
        result = os.path.join(tmpdir, "ranks.json")
        args = {"backend": backend, "hidden": hidden, "inter": inter, "groups": list(groups),
                "ms": list(ms), "reps": reps, "check_m": check_m, "port": port, "result": result}
        tmp.spawn(worker, args=(world, args), nprocs=world, join=True)
        return json.loads(Path(result).read_text())


def records(ranks: list[dict], hidden: int, inter: int, platform: str) -> list[dict]:
    """The slowest rank's times as results-schema records (path per kernel, one per M)."""
    out = []
    by = {}
    for rk in ranks:
        for t in rk["timings"]:
            by.setdefault((t["tp"], t["g"], t["kind"], t["m"]), []).append(t)
    for (tp, g, kind, m), ts in sorted(by.items()):
        worst = max(ts, key=lambda t: t["mlp_us"])
        out.append({"path": "w4a8_native" if kind == "w4a8" else "w4a16_fallback",
                    "kernel": f"tp_mlp_{kind}", "n": hidden, "k": inter, "group_size": g, "m": m,
                    "median_us": worst["mlp_us"], "p20_us": worst["mlp_us"], "p80_us": worst["mlp_us"],
                    "repeats": 0, "config": None,
                    "detail": {"tp": tp, "model": MODEL if (hidden, inter) == (HIDDEN, INTERMEDIATE)
                               else f"{hidden}x{inter}", "platform": platform,
                               **{k: worst[k] for k in ("gate_up_us", "down_us", "all_reduce_us")}}})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--world", type=int, nargs="+", default=[2])
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--inter", type=int, default=None)
    ap.add_argument("--groups", default="-1,128")
    ap.add_argument("--ms", default="1,16,64,256,1024")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--commit", default="unknown")
    a = ap.parse_args()
    gpu = a.backend == "nccl"
    # CPU processes default to a small MLP of the same form (the real one takes minutes there).
    hidden = a.hidden or (HIDDEN if gpu else 1024)
    inter = a.inter or (INTERMEDIATE if gpu else 2816)
    groups = [int(v) for v in a.groups.split(",")]
    ms = [int(v) for v in a.ms.split(",") if v]
    ranks_by_tp, recs = {}, []
    for world in a.world:
        gs = [g for g in groups if g == -1 or (inter // world) % g == 0]
        ranks = run(a.backend, world, hidden, inter, gs, ms, a.reps, check_m=5)
        ranks_by_tp[world] = ranks
        recs += records(ranks, hidden, inter, "sm90-h200" if gpu else "host")
        for c in ranks[0]["checks"]:
            print(json.dumps(c))
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        prov = {"platform": "sm90-h200" if gpu else "host", "script": "benchmarks/tp_bench.py",
                "backend": a.backend, "torch": torch.__version__, "commit": a.commit,
                "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "device": torch.cuda.get_device_name(0) if gpu else "cpu",
                "loadavg_1m": os.getloadavg()[0], "env": NCCL_ENV,
                "checks": {str(w): r[0]["checks"] for w, r in ranks_by_tp.items()}}
        doc = {"schema": "w4a8-workbench-results/1", "provenance": prov, "records": recs}
        (a.out / f"tp_{a.backend}.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    sys.exit(main())
