"""Which part of the AMX library's quantizer into tiles is slow on an AMX host, and under which
compiler settings (M = 128, K = 4096, one thread there: 1.8 ms; 0.13 ms on an AVX-512 Xeon of the
same model, family 6 model 207, built by gcc 12.2; amx_quant_probe.py showed it is so before the
process runs any tile instruction). "widen_loop": the bf16 widening as the plain loop it was.

Builds the tree's w4a8_amx.c here with the tree's flags and with extra ones, and with one part
of the quantizer left out (timing only, the bits then differ), and times each quantize call in
clean loops on one thread: bf16 and float32 activations. Prints the compiler's defaults and
one JSON line per build; writes the tree build's disassembly to --asm.

    python benchmarks/amx_quant_bisect.py [--asm FILE]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "kernels")]

from w4a8_kernels import _native_lib  # noqa: E402

CSRC = ROOT / "kernels" / "w4a8_kernels" / "csrc"
i64, ptr = ctypes.c_int64, ctypes.c_void_p
PLAIN = ["-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=0", "-fno-stack-protector",
         "-fno-stack-clash-protection", "-fcf-protection=none"]
TILES_LOOP = "    for (int64_t kb = 0; kb < j->k64; ++kb) tile_of_rows(blk + kb * 64, kp, bt + kb * 256);\n  }"
QUANT_CALL = "      if (m < j->M && quantize_row("


def knockout(text: str, what: str) -> str:
    if what == "no_tiles":  # codes quantized into the block buffer, never laid out as tiles
        assert TILES_LOOP in text
        return text.replace(TILES_LOOP, "    __asm__ volatile(\"\" ::: \"memory\");\n  }")
    if what == "no_quant":  # rows left as zeros, laid out as tiles
        assert QUANT_CALL in text
        return text.replace(QUANT_CALL, "      if (0 && quantize_row(")
    return text


def loop_widen(header: str) -> str:
    """w4a8_quant.h with the bf16 widening as the plain loop it was (left to the compiler)."""
    start = header.index("  int64_t k = 0;\n#if defined(__AVX512F__)\n  for (; k + 16 <= K; k += 16)")
    end = header.index("  for (; k < K; ++k) {", start)
    return header[:start] + "  int64_t k = 0;\n" + header[end:]


def build(tmp: Path, name: str, text: str, extra: list[str], widen_loop: bool = False) -> Path:
    d = tmp / name
    d.mkdir()
    (d / "w4a8_amx.c").write_text(text)
    for h in CSRC.glob("*.h"):
        body = h.read_text()
        (d / h.name).write_text(loop_widen(body) if widen_loop and h.name == "w4a8_quant.h" else body)
    out = d / "lib.so"
    flags = [*_native_lib._COMMON, *_native_lib.VARIANTS["u4_amx"][1], *extra]
    subprocess.run(["gcc", *flags, str(d / "w4a8_amx.c"), "-o", str(out), "-lm"], check=True)
    return out


def time_quant(lib: ctypes.CDLL, x: torch.Tensor, is_bf16: int) -> dict:
    m = x.shape[0]
    bt, xs = torch.empty(-(-m // 32) * 32 * 4096, dtype=torch.int8), torch.empty(m)
    q = lib.w4a8_amx_quantize_tiles
    q.argtypes = [ptr, ctypes.c_int, i64, i64, i64, i64, i64, i64, ptr, ptr, ctypes.c_int]

    def f():
        return q(x.data_ptr(), is_bf16, m, 4096, x.stride(0), 4096, 4096, bt.numel() // 4096,
                 bt.data_ptr(), xs.data_ptr(), 1)

    for _ in range(3):
        f()
    ts = []
    for _ in range(15):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return {"median_ms": round(statistics.median(ts) * 1e3, 4), "min_ms": round(min(ts) * 1e3, 4)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--asm", default=None)
    args = ap.parse_args()
    info = {"gcc": subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]}
    macros = subprocess.run(["gcc", "-dM", "-E", "-O3", "-"], input="", capture_output=True, text=True).stdout
    info["fortify"] = [ln for ln in macros.splitlines() if "FORTIFY" in ln]
    opts = subprocess.run(["gcc", "-Q", "-O3", "--help=common"], capture_output=True, text=True).stdout
    info["defaults"] = [" ".join(ln.split()) for ln in opts.splitlines()
                        if any(k in ln for k in ("stack-clash", "cf-protection", "stack-protector "))]
    print(json.dumps(info), flush=True)
    torch.set_num_threads(1)
    x = torch.randn(128, 4096, generator=torch.Generator().manual_seed(0))
    xb = x.to(torch.bfloat16)
    text = (CSRC / "w4a8_amx.c").read_text()
    tmp = Path(tempfile.mkdtemp())
    builds = {"tree": ("", [], False), "widen_loop": ("", [], True),
              "widen_loop_plain_flags": ("", PLAIN, True), "O2": ("", ["-O2"], False),
              "no_tiles": ("no_tiles", [], False), "no_quant": ("no_quant", [], False)}
    for name, (what, extra, widen) in builds.items():
        so = build(tmp, name, knockout(text, what), extra, widen)
        lib = ctypes.CDLL(str(so))
        row = {"build": name, "bf16": time_quant(lib, xb, 1), "f32": time_quant(lib, x, 0)}
        print(json.dumps(row), flush=True)
        if name == "tree" and args.asm:
            dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(so)], capture_output=True,
                                 text=True).stdout
            Path(args.asm).write_text(dis)
    return 0


if __name__ == "__main__":
    sys.exit(main())
