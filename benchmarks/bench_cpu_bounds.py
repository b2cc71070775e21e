"""The CPU kernels against this machine's own bounds and fair baselines, in one process.

    python benchmarks/bench_cpu_bounds.py [--quick] [--out benchmarks/results]

N = K = 4096, float32 activations, RTN int4 of normal(0, 0.02) weights, every thread
torch is given (the C kernels and ggml get the same count). Measured in this one run:

- streaming read bandwidth (a float32 sum over a buffer) at the int4 weight's size
  (8 MiB, read again and again: it stays in L2/L3) and over 1 GiB;
- decode (M = 1), per-channel and group 128, against the int4 weight-streaming bound: a
  plain read of the same N * K / 2 bytes timed in the same rounds (same caches, clock and
  load), hot (one weight, one buffer) and cold (the next of 64 weights and 64 buffers
  each call, together larger than the last-level cache), beside ggml's Q4_0 x Q8_0;
- M = 16, 128, 512: group 128 over per-channel, per-channel over FBGEMM's W8A8 dynamic
  linear (`quantized.linear_dynamic`, per-channel int8 weight), the W4A16 fallback over
  the best of its candidates, and the `dense` path (fastest float GEMM) beside them.

Timing: round-robin rounds in a fresh random order; p20 / p50 / p80 per call of wall
time and of this process's CPU time (all its threads). Ratios are read on CPU time with
`--threads 1` (time other processes held the core is left out: the machine is shared,
the load average at start and end is in the provenance) and on wall time otherwise.
Results: cpu_bounds_t<threads>.json; with W4A8_KERNELS_MAX_ISA=avx2 (and torch's
ATEN_CPU_CAPABILITY=avx2, oneDNN's ONEDNN_MAX_CPU_ISA=AVX2, FBGEMM's
FBGEMM_ENABLE_INSTRUCTIONS=AVX2: FBGEMM reads the CPU itself and ran AVX-512 VNNI under
the other two caps, 3.7 against 10.7 ms at M = 128) what an AVX2-only machine runs, in
cpu_bounds_t<threads>_avx2.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_rounds import clock_for, rel_error, round_robin, synthetic_weight  # noqa: E402

N = K = 4096


def stream_gbs(nbytes: int, rounds: int, clock: str) -> dict:
    buf = torch.ones(nbytes // 4, dtype=torch.float32)
    t = round_robin({"sum": buf.sum, "amax": buf.amax}, rounds, clock)
    best = min(t.values(), key=lambda v: v["p50_ms"])
    return {"bytes": nbytes, "gbs_p50": nbytes / best["p50_ms"] / 1e6,
            "gbs_p20_p80": [nbytes / best["p80_ms"] / 1e6, nbytes / best["p20_ms"] / 1e6]}


def fbgemm_w8a8_dynamic(w_q: torch.Tensor, scales: torch.Tensor):
    """FBGEMM's own W8A8 dynamic linear on an int8 per-channel weight (the int4 values)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        qw = torch._make_per_channel_quantized_tensor(
            w_q.contiguous(), scales.reshape(-1).double(), torch.zeros(w_q.shape[0], dtype=torch.int64), 0)
    torch.backends.quantized.engine = "fbgemm" if "fbgemm" in torch.backends.quantized.supported_engines else "x86"
    packed = torch.ops.quantized.linear_prepack(qw, None)
    return lambda x: torch.ops.quantized.linear_dynamic(x, packed, False)


def _args() -> argparse.Namespace:
    from w4a8_kernels import native  # noqa: PLC0415

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and M (a smoke run)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all given)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    if native.isa_cap() == "avx2":
        unset = [f"{k}={v}" for k, v in native.AVX2_LIBRARY_CAPS.items() if os.environ.get(k) != v]
        if unset:  # torch's libraries would run AVX-512 beside our AVX2 kernels: no stand-in
            ap.error(f"W4A8_KERNELS_MAX_ISA=avx2 stands in for an AVX2-only machine only with "
                     f"{' '.join(unset)} set too")
    return args


def _provenance(threads: int, clock: str) -> dict:
    from w4a8_kernels import native  # noqa: PLC0415
    from w4a8_kernels.cpu_w4a8 import rank_engines  # noqa: PLC0415
    from workbench.bench import host_provenance  # noqa: PLC0415

    prov = host_provenance({"script": "benchmarks/bench_cpu_bounds.py", "n": N, "k": K,
                            "activations": "float32", "weights": "RTN int4 of normal(0, 0.02)",
                            "threads": threads, "clock": clock,
                            "c_variants": {v: (native.why_unavailable(v) or "built")
                                           for v in native.VARIANTS}})
    prov["int8_engines_ranked"] = {f"{kind}_m{m}": [list(e) for e in rank_engines(grouped, m)]
                                   for kind, grouped in (("per_channel", False), ("g128", True))
                                   for m in (4, 128)}
    return prov


def _decode(ggml, weights: dict, rounds: int, clock: str, threads: int, quick: bool) -> tuple[dict, dict]:
    """M = 1 against the int4 read bound, hot and cold; (result["decode"], its ratios)."""
    from bench_ggml import GgmlQ4Matmul  # noqa: PLC0415
    from w4a8_kernels.cpu_dense import dense, dense_choice  # noqa: PLC0415
    from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native  # noqa: PLC0415
    from w4a8_kernels.cpu_w4a16 import fallback_choice, w4a16_fallback  # noqa: PLC0415

    w_float, pc_w, g_w = weights["float"], weights["pc_w"], weights["g_w"]
    pc, g128, w16, dn, w8a8 = (weights[k] for k in ("pc", "g128", "w16", "dense", "w8a8"))
    int4_bytes = N * K // 2
    # The bound is a plain read of the int4 weight's bytes (N * K / 2 = 8 MiB at
    # N = K = 4096), timed in the same rounds as the kernels so that it meets the same
    # caches, clock and load. Hot: one weight (and one 8 MiB buffer) read again and again.
    x1 = torch.randn(1, K, generator=torch.Generator().manual_seed(1))
    buf = torch.ones(int4_bytes // 4, dtype=torch.float32)
    fns = {"read_int4_bytes": buf.sum,
           "w4a8_per_channel": lambda: w4a8_native(x1, pc), "w4a8_g128": lambda: w4a8_native(x1, g128),
           "w4a16_fallback": lambda: w4a16_fallback(x1, w16), "fbgemm_w8a8_dynamic": lambda: w8a8(x1),
           "dense": lambda: dense(x1, dn)}
    g1 = None
    if ggml:
        g1 = GgmlQ4Matmul(ggml, w_float, 1, threads)
        g1.set_input(x1)
        fns["ggml_q4_0"] = g1.run
    hot = round_robin(fns, rounds * 5, clock)
    bound_hot = hot["read_int4_bytes"]["p50_ms"]
    # Cold: each call takes the next of `copies` weights (and reads the next of as many
    # buffers), together larger than the last-level cache, so the bytes come from DRAM.
    copies = 8 if quick else 64
    rot = {"read_int4_bytes": [torch.ones(int4_bytes // 4) for _ in range(copies)],
           "w4a8_per_channel": [prepare_w4a8(*pc_w, -1) for _ in range(copies)],
           "w4a8_g128": [prepare_w4a8(*g_w, 128) for _ in range(copies)]}
    turn = {"i": 0}

    def rotate(name):
        def call():
            turn["i"] += 1
            item = rot[name][turn["i"] % copies]
            return item.sum() if name == "read_int4_bytes" else w4a8_native(x1, item)
        return call
    cold = round_robin({name: rotate(name) for name in rot}, rounds * 3, clock)
    del rot
    bound_cold = cold["read_int4_bytes"]["p50_ms"]
    decode = {"hot": hot, "cold": cold, "int4_bound_hot_ms": bound_hot,
              "int4_bound_cold_ms": bound_cold, "cold_copies": copies,
              "cold_bytes": copies * 3 * int4_bytes,
              "w4a16_choice": fallback_choice(w16, 1), "dense_choice": dense_choice(dn, 1)}
    r: dict = {}
    r["decode_over_int4_bound_hot"] = {k: hot[k]["p50_ms"] / bound_hot for k in ("w4a8_per_channel", "w4a8_g128")}
    r["decode_over_int4_bound_cold"] = {k: cold[k]["p50_ms"] / bound_cold
                                        for k in ("w4a8_per_channel", "w4a8_g128")}
    if g1:
        r["decode_over_ggml_q4_0"] = {k: hot[k]["p50_ms"] / hot["ggml_q4_0"]["p50_ms"]
                                      for k in ("w4a8_per_channel", "w4a8_g128")}
        g1.close()
    print(f"[decode] hot: {({k: round(v['p50_ms'], 3) for k, v in hot.items()})} ms -> over the read "
          f"{({k: round(v, 2) for k, v in r['decode_over_int4_bound_hot'].items()})}", flush=True)
    print(f"[decode] cold: {({k: round(v['p50_ms'], 3) for k, v in cold.items()})} ms -> over the read "
          f"{({k: round(v, 2) for k, v in r['decode_over_int4_bound_cold'].items()})}", flush=True)
    return decode, r


def _at_m(m: int, ggml, weights: dict, rounds: int, clock: str, threads: int) -> dict:
    """One M's timings of every path, and the ratios read from them."""
    from bench_ggml import GgmlQ4Matmul  # noqa: PLC0415
    from w4a8_kernels.cpu_dense import dense, dense_choice  # noqa: PLC0415
    from w4a8_kernels.cpu_w4a8 import w4a8_native  # noqa: PLC0415
    from w4a8_kernels.cpu_w4a16 import fallback_candidates, fallback_choice, w4a16_fallback  # noqa: PLC0415

    pc, g128, w16, dn, w8a8 = (weights[k] for k in ("pc", "g128", "w16", "dense", "w8a8"))
    x = torch.randn(m, K, generator=torch.Generator().manual_seed(m))
    cands = fallback_candidates(w16)
    fns = {"w4a8_per_channel": lambda: w4a8_native(x, pc), "w4a8_g128": lambda: w4a8_native(x, g128),
           "fbgemm_w8a8_dynamic": lambda: w8a8(x), "w4a16_fallback": lambda: w4a16_fallback(x, w16),
           "dense": lambda: dense(x, dn)}
    for name, fn in cands.items():
        fns[f"w4a16_{name}"] = (lambda fn=fn: fn(x, w16))
    gm = None
    if ggml:
        gm = GgmlQ4Matmul(ggml, weights["float"], m, threads)
        gm.set_input(x)
        fns["ggml_q4_0"] = gm.run
    t = round_robin(fns, max(5, rounds // (1 if m <= 16 else 4 if m <= 128 else 8)), clock, seed=m)
    if gm:
        gm.close()
    best16 = min(t[f"w4a16_{name}"]["p50_ms"] for name in cands)
    row = {"timings": t, "w4a16_choice": fallback_choice(w16, m), "dense_choice": dense_choice(dn, m),
           "w4a8_engines": {"per_channel": pc.engine_for(m).value, "g128": g128.engine_for(m).value},
           "g128_over_per_channel": t["w4a8_g128"]["p50_ms"] / t["w4a8_per_channel"]["p50_ms"],
           "per_channel_over_fbgemm_w8a8": t["w4a8_per_channel"]["p50_ms"] / t["fbgemm_w8a8_dynamic"]["p50_ms"],
           "w4a16_fallback_over_best": t["w4a16_fallback"]["p50_ms"] / best16,
           "w4a16_fallback_over_w4a8_g128": t["w4a16_fallback"]["p50_ms"] / t["w4a8_g128"]["p50_ms"],
           "dense_over_w4a8_g128": t["dense"]["p50_ms"] / t["w4a8_g128"]["p50_ms"]}
    if gm:
        row["w4a8_g128_over_ggml_q4_0"] = t["w4a8_g128"]["p50_ms"] / t["ggml_q4_0"]["p50_ms"]
    print(f"[M={m}] {({k: round(v['p50_ms'], 2) for k, v in t.items()})} ms; g128/pc "
          f"{row['g128_over_per_channel']:.2f}, pc/FBGEMM W8A8 {row['per_channel_over_fbgemm_w8a8']:.2f}, "
          f"W4A16 fallback/best {row['w4a16_fallback_over_best']:.2f} (ran {row['w4a16_choice']}), "
          f"dense ran {row['dense_choice']}, W4A8 ran {row['w4a8_engines']}", flush=True)
    return row


def main() -> int:
    from bench_ggml import ggml_module  # noqa: PLC0415
    from w4a8_kernels.cpu_dense import prepare_dense  # noqa: PLC0415
    from w4a8_kernels.cpu_w4a8 import LARGE_M, prepare_w4a8  # noqa: PLC0415
    from w4a8_kernels.cpu_w4a16 import prepare_w4a16  # noqa: PLC0415

    args = _args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rounds = 10 if args.quick else 40
    threads = torch.get_num_threads()
    clock = clock_for(threads)
    prov = _provenance(threads, clock)
    ggml, ggml_why = ggml_module()
    prov["ggml"] = "ggml-python 0.0.45" if ggml else f"skipped: {ggml_why}"
    t_start = time.time()
    result: dict = {"provenance": prov, "bandwidth": {}, "decode": {}, "m": {}, "ratios": {}}

    w_float, pc_w, g_w = synthetic_weight(N, K)
    result["bandwidth"]["hot_weight_size"] = stream_gbs(8 << 20, rounds * 3, clock)
    result["bandwidth"]["cold_1gib"] = stream_gbs(1 << 30, 5 if args.quick else 10, clock)
    bw = result["bandwidth"]
    print(f"stream: hot {bw['hot_weight_size']['gbs_p50']:.1f} GB/s, cold {bw['cold_1gib']['gbs_p50']:.1f} GB/s",
          flush=True)

    pc = prepare_w4a8(*pc_w, -1)
    g128 = prepare_w4a8(*g_w, 128)
    prov["engines"] = {"per_channel": pc.engine.value, "g128": g128.engine.value,
                       "from_M_large": {"per_channel": pc.engine_for(LARGE_M).value,
                                        "g128": g128.engine_for(LARGE_M).value, "LARGE_M": LARGE_M}}
    weights = {"float": w_float, "pc_w": pc_w, "g_w": g_w, "pc": pc, "g128": g128,
               "w16": prepare_w4a16(*g_w, 128), "dense": prepare_dense(w_float),
               "w8a8": fbgemm_w8a8_dynamic(*pc_w)}
    result["decode"], result["ratios"] = _decode(ggml, weights, rounds, clock, threads, args.quick)
    for m in ([16, 128] if args.quick else [16, 128, 512]):
        result["m"][m] = _at_m(m, ggml, weights, rounds, clock, threads)
    result["seconds"] = round(time.time() - t_start, 1)
    prov["loadavg_1m_end"] = os.getloadavg()[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cap = f"_{prov['isa_cap']}" if prov["isa_cap"] else ""  # W4A8_KERNELS_MAX_ISA runs apart
    path = out / f"cpu_bounds_t{threads}{cap}{'_quick' if args.quick else ''}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"wrote {path} in {result['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
