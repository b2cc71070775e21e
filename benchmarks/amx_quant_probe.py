"""Why the AMX library's quantizer into tiles is slow on an AMX host (M = 128, K = 4096, bf16:
about 1.7 ms on one thread there, 0.13 ms on an AVX-512 Xeon of the same model without AMX).

One process, clean loops (no other path timed between a path's calls), 1 and 2 threads:
  - phase "no_amx": a copy of the tree's source built here and loaded without asking the kernel
    for AMX, before this process ran any tile instruction;
  - phase "permitted": the tree's engine loaded (AMX permitted), no tile instruction run yet;
  - phase "after_amx": after one AMX GEMM in this process (the engine's whole call);
each time the tree's quantizer into tiles and a variant whose token-block buffer is on the
stack instead of malloc, with minor faults and context switches per call; then the whole call,
the GEMM on codes quantized before, and torch._int_mm in clean loops.

    python benchmarks/amx_quant_probe.py     (prints JSON lines)
"""
from __future__ import annotations

import ctypes
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "kernels"), str(ROOT / "benchmarks")]

from amx_quant_bisect import build as build_source  # noqa: E402
from w4a8_kernels import _native_lib  # noqa: E402

SRC = ROOT / "kernels" / "w4a8_kernels" / "csrc" / "w4a8_amx.c"
i64, ptr = ctypes.c_int64, ctypes.c_void_p


def build(name: str, text: str, tmp: Path) -> ctypes.CDLL:
    """`text` as w4a8_amx.c, built with the tree's flags (amx_quant_bisect.build), loaded
    without asking the kernel for AMX."""
    lib = ctypes.CDLL(str(build_source(tmp, name, text, [])))
    lib.w4a8_amx_quantize_tiles.argtypes = [ptr, ctypes.c_int, i64, i64, i64, i64, i64, i64, ptr, ptr,
                                            ctypes.c_int]
    return lib


def stack_variant(text: str) -> str:
    old = "  int8_t* blk = (int8_t*)malloc((size_t)(16 * kp));"
    assert old in text
    text = text.replace(old, "  int8_t sblk[16 * 4096] __attribute__((aligned(64)));\n"
                             "  int8_t* blk = kp <= 4096 ? sblk : (int8_t*)malloc((size_t)(16 * kp));")
    old_free = "  free(blk);\n  if (tmp != fstack) free(tmp);"
    assert old_free in text
    return text.replace(old_free, "  if (blk != sblk) free(blk);\n  if (tmp != fstack) free(tmp);")


def clean(f, n: int = 20) -> dict:
    for _ in range(3):
        f()
    r0, ts = resource.getrusage(resource.RUSAGE_SELF), []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return {"median_ms": round(statistics.median(ts) * 1e3, 4), "min_ms": round(min(ts) * 1e3, 4),
            "faults": round((r1.ru_minflt - r0.ru_minflt) / n, 2),
            "vcsw": round((r1.ru_nvcsw - r0.ru_nvcsw) / n, 2), "ivcsw": round((r1.ru_nivcsw - r0.ru_nivcsw) / n, 2)}


def qcall(lib, x, bt, xs, threads):
    m = x.shape[0]
    return lambda: lib.w4a8_amx_quantize_tiles(x.data_ptr(), 1, m, 4096, x.stride(0), 4096, 4096,
                                               bt.numel() // 4096, bt.data_ptr(), xs.data_ptr(), threads)


def quant_phase(phase: str, libs: dict, inputs: dict) -> None:
    for m, (x, bt, xs) in inputs.items():
        for threads in (1, 2):
            row = {"phase": phase, "m": m, "threads": threads}
            for name, lib in libs.items():
                row[name] = clean(qcall(lib, x, bt, xs, threads))
            print(json.dumps(row), flush=True)


def main() -> int:
    gen = torch.Generator().manual_seed(0)
    inputs = {}
    for m in (32, 128):
        x = torch.randn(m, 4096, generator=gen).to(torch.bfloat16)
        inputs[m] = (x, torch.empty(-(-m // 32) * 32 * 4096, dtype=torch.int8), torch.empty(m))
    tmp = Path(tempfile.mkdtemp())
    text = SRC.read_text()
    copy, stack = build("copy", text, tmp), build("stack", stack_variant(text), tmp)
    quant_phase("no_amx", {"copy": copy, "stack": stack}, inputs)
    # bits: the variant writes what the tree's quantizer writes
    x, bt, xs = inputs[128]
    qcall(copy, x, bt, xs, 2)()
    ref = bt.clone(), xs.clone()
    qcall(stack, x, bt, xs, 2)()
    print(json.dumps({"stack_bits_equal": bool(torch.equal(bt, ref[0]) and torch.equal(xs, ref[1]))}))

    tree = _native_lib.load("u4_amx")
    if tree is None:
        print(json.dumps({"skipped": _native_lib.why_unavailable("u4_amx")}))
        return 0
    tree.w4a8_amx_quantize_tiles.argtypes = copy.w4a8_amx_quantize_tiles.argtypes
    libs = {"tree": tree, "stack": stack}
    quant_phase("permitted", libs, inputs)

    from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native, w4a8_native_from_quantized
    from w4a8_kernels.quant import quantize_per_token_int8

    w_q = torch.randint(-8, 8, (4096, 4096), generator=gen, dtype=torch.int8)
    s = torch.rand(4096, 1, generator=gen) * 0.02 + 0.001
    p = prepare_w4a8(w_q, s, -1, engine="u4_amx")
    torch.set_num_threads(2)
    w4a8_native(inputs[128][0], p)  # the process's first tile instructions
    quant_phase("after_amx", libs, inputs)
    wt = w_q.t().contiguous()
    for m, (x, _, _) in inputs.items():
        x_q, x_s = quantize_per_token_int8(x)
        for threads in (1, 2):
            torch.set_num_threads(threads)
            row = {"phase": "calls", "m": m, "threads": threads,
                   "whole": clean(lambda: w4a8_native(x, p)),
                   "gemm_only": clean(lambda: w4a8_native_from_quantized(x_q, x_s, p)),
                   "int_mm": clean(lambda: torch._int_mm(x_q, wt)),
                   "quant_tree": clean(qcall(tree, *inputs[m], threads))}
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
