"""llama.cpp's ggml Q4_0 x Q8_0 matmul beside this project's W4A8 kernels, in one run.

    python benchmarks/bench_ggml.py [--m 1,16,128] [--n 4096 --k 4096] [--rounds 30]

ggml is optional: `ggml-python` 0.0.45 builds from its sdist (`pip install --no-binary
:all: ggml-python==0.0.45`, cmake and a C++ compiler needed). Where it is not importable
the script says why and exits 0. ggml's Q4_0 weight (blocks of 32, one fp16 scale each)
is quantized from the same float weight ours is; for an F32 right-hand side ggml
quantizes the activations to Q8_0 (blocks of 32) inside the matmul, so both sides
include their activation quantization. Timings are round-robin, one process, with every
thread torch is given (ggml gets the same count): wall time, or this process's CPU time
with `--threads 1`.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def ggml_module():
    """(the ggml module, "") or (None, why it cannot be had)."""
    try:
        import ggml  # noqa: PLC0415
    except Exception as exc:  # ImportError, or OSError from its shared library
        return None, (f"ggml-python is not importable ({type(exc).__name__}: {exc}); install "
                      "it from its sdist: pip install --no-binary :all: ggml-python==0.0.45")
    return ggml, ""


class GgmlQ4Matmul:
    """y = x @ W^T by ggml_mul_mat with W in Q4_0 (x converted to Q8_0 by ggml)."""

    def __init__(self, ggml, w: torch.Tensor, m: int, threads: int):
        n, k = w.shape
        self.ggml, self.m, self.n, self.k, self.threads = ggml, m, n, k, threads
        w_bytes = ggml.ggml_row_size(ggml.GGML_TYPE_Q4_0, k) * n
        q8_bytes = ggml.ggml_row_size(ggml.GGML_TYPE_Q8_0, k) * m
        mem = (w_bytes + 4 * (k * m + n * m) + q8_bytes + 8 * ggml.ggml_tensor_overhead()
               + ggml.ggml_graph_overhead() + (64 << 20))
        params = ggml.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=False)
        self.ctx = ggml.ggml_init(params)
        self.a = ggml.ggml_new_tensor_2d(self.ctx, ggml.GGML_TYPE_Q4_0, k, n)
        self.b = ggml.ggml_new_tensor_2d(self.ctx, ggml.GGML_TYPE_F32, k, m)
        src = w.to(torch.float32).contiguous()
        ggml.ggml_quantize_chunk(ggml.GGML_TYPE_Q4_0,
                                 ctypes.cast(src.data_ptr(), ctypes.POINTER(ctypes.c_float)),
                                 ggml.ggml_get_data(self.a), 0, n, k, None)
        self.c = ggml.ggml_mul_mat(self.ctx, self.a, self.b)  # ne = [N, M]
        self.graph = ggml.ggml_new_graph(self.ctx)
        ggml.ggml_build_forward_expand(self.graph, self.c)
        self.weight_bytes = w_bytes

    def set_input(self, x: torch.Tensor) -> None:
        x = x.to(torch.float32).contiguous()
        ctypes.memmove(self.ggml.ggml_get_data(self.b), x.data_ptr(), x.numel() * 4)

    def run(self) -> None:
        self.ggml.ggml_graph_compute_with_ctx(self.ctx, self.graph, self.threads)

    def output(self) -> torch.Tensor:
        buf = (ctypes.c_float * (self.m * self.n)).from_address(self.ggml.ggml_get_data(self.c))
        return torch.frombuffer(buf, dtype=torch.float32).view(self.m, self.n).clone()

    def close(self) -> None:
        self.ggml.ggml_free(self.ctx)


def main() -> int:
    from cpu_rounds import clock_for, rel_error, round_robin, synthetic_weight  # noqa: PLC0415
    from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native  # noqa: PLC0415
    from workbench.bench import host_provenance  # noqa: PLC0415

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", default="1,16,128")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None, help="torch and ggml threads (default: all)")
    ap.add_argument("--out", default="", help="write the JSON here too")
    args = ap.parse_args()
    ggml, why = ggml_module()
    if ggml is None:
        print(f"skipped: {why}")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    clock = clock_for(threads)
    result = {"provenance": host_provenance({"script": "benchmarks/bench_ggml.py", "n": args.n,
                                              "k": args.k, "ggml_python": "0.0.45"}), "m": {}}
    for m in [int(v) for v in args.m.split(",")]:
        w_float, per_channel, g128 = synthetic_weight(args.n, args.k)
        x = torch.randn(m, args.k, generator=torch.Generator().manual_seed(m))
        g = GgmlQ4Matmul(ggml, w_float, m, threads)
        g.set_input(x)
        pc = prepare_w4a8(*per_channel, -1)
        gp = prepare_w4a8(*g128, 128)
        fns = {"ggml_q4_0": g.run, "w4a8_per_channel": lambda: w4a8_native(x, pc),
               "w4a8_g128": lambda: w4a8_native(x, gp)}
        t = round_robin(fns, args.rounds if m < 64 else max(5, args.rounds // 5), clock)
        ref = x.double() @ w_float.double().t()
        g.run()
        errs = {"ggml_q4_0": rel_error(g.output(), ref),
                "w4a8_per_channel": rel_error(w4a8_native(x, pc), ref),
                "w4a8_g128": rel_error(w4a8_native(x, gp), ref)}
        g.close()
        row = {name: {**t[name], "rel_error_vs_float": errs[name]} for name in fns}
        row["ratios"] = {f"{name}_over_ggml": t[name]["p50_ms"] / t["ggml_q4_0"]["p50_ms"]
                         for name in ("w4a8_per_channel", "w4a8_g128")}
        row["engines"] = {"w4a8_per_channel": pc.engine_for(m).value, "w4a8_g128": gp.engine_for(m).value}
        result["m"][m] = row
        print(f"M={m}: ggml Q4_0 {t['ggml_q4_0']['p50_ms']:.3f} ms, ours per-channel "
              f"{t['w4a8_per_channel']['p50_ms']:.3f} ms ({row['ratios']['w4a8_per_channel_over_ggml']:.2f}x), "
              f"g128 {t['w4a8_g128']['p50_ms']:.3f} ms ({row['ratios']['w4a8_g128_over_ggml']:.2f}x); "
              f"rel error vs float: ggml {errs['ggml_q4_0']:.4f}, ours {errs['w4a8_g128']:.4f}",
              flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
