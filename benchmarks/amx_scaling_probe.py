"""Where the AMX engine's time goes at M = 32 and 128 (N = K = 4096, per-channel), 1 and 2
threads: the whole W4A8 call (quantize into tiles, GEMM) against the GEMM alone on codes
quantized before (laid out as tiles, then the GEMM) and the library's quantizer into tiles
alone, beside torch._int_mm on the same int8 operands; round-robin, medians of 15 calls.

    python benchmarks/amx_scaling_probe.py     (prints one JSON line)
"""
from __future__ import annotations

import ctypes
import json
import statistics
import time

import torch

from w4a8_kernels import _native_lib
from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native, w4a8_native_from_quantized
from w4a8_kernels.quant import quantize_per_token_int8

out = {}
gen = torch.Generator().manual_seed(0)
w_q = torch.randint(-8, 8, (4096, 4096), generator=gen, dtype=torch.int8)
s = torch.rand(4096, 1, generator=gen) * 0.02 + 0.001
p = prepare_w4a8(w_q, s, -1, engine="u4_amx")
qtiles = _native_lib.load("u4_amx").w4a8_amx_quantize_tiles
i64, ptr = ctypes.c_int64, ctypes.c_void_p
qtiles.argtypes = [ptr, ctypes.c_int, i64, i64, i64, i64, i64, i64, ptr, ptr, ctypes.c_int]
for m in (32, 128):
    x = torch.randn(m, 4096, generator=gen).to(torch.bfloat16)
    x_q, x_s = quantize_per_token_int8(x)
    wt = w_q.t().contiguous()
    bt, xs = torch.empty(-(-m // 32) * 32 * 4096, dtype=torch.int8), torch.empty(m)
    calls = {"whole": lambda: w4a8_native(x, p), "gemm_only": lambda: w4a8_native_from_quantized(x_q, x_s, p),
             "int_mm": lambda: torch._int_mm(x_q, wt), "quantize_torch": lambda: quantize_per_token_int8(x),
             "quantize_tiles": lambda: qtiles(x.data_ptr(), 1, m, 4096, x.stride(0), 4096, 4096, bt.numel() // 4096,
                                              bt.data_ptr(), xs.data_ptr(), torch.get_num_threads())}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        times = {k: [] for k in calls}
        for f in calls.values():
            f()
        for _ in range(15):
            for k, f in calls.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
        out[f"m{m}_t{threads}"] = {k: round(statistics.median(v) * 1e3, 3) for k, v in times.items()}
print(json.dumps(out))
