"""The AMX engine's per-channel GEMM with K in slices (run_pair_channel, weight tiles served
from L1 to several token blocks) against the same library without it, and both against
torch._int_mm on the same int8 operands, in one process on an AMX host: each library built
from its own sources and admitted by its own self-test, outputs compared bit for bit.

    W4A8_BASE_CSRC=dir python benchmarks/amx_kslice_probe.py     (prints JSON lines)

dir: the C sources before the change. Candidates: the current sources with KSLICE 8 and 16,
and with the token tiles loaded without the streaming hint.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cpu_ratios import alone, ratio  # noqa: E402
from w4a8_kernels import _native_lib  # noqa: E402
from w4a8_kernels.registry import get_path  # noqa: E402
from workbench.bench import host_provenance, int4_weight_of, synthetic_bench_layer  # noqa: E402

HERE = _native_lib.csrc_dir()


def variant_dir(tag: str, kslice: int, b_load: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=f"amx_{tag}_"))
    for f in HERE.iterdir():
        shutil.copy(f, d)
    src = (d / "w4a8_amx.c").read_text()
    src = src.replace("#define KSLICE 8\n", f"#define KSLICE {kslice}\n")
    src = src.replace("#define B_LOAD _tile_stream_loadd\n", f"#define B_LOAD {b_load}\n")
    (d / "w4a8_amx.c").write_text(src)
    return d


def build(csrc: Path):
    os.environ[_native_lib.CSRC_ENV] = str(csrc)
    try:
        return _native_lib._build("u4_amx")
    finally:
        del os.environ[_native_lib.CSRC_ENV]


def use(lib) -> None:
    _native_lib._state["u4_amx"] = {"lib": lib, "why": ""}


def amx(w):
    """The weight prepared for the AMX engine by name (auto may rank another first at M = 64)."""
    from w4a8_kernels.cpu_w4a8 import prepare_w4a8
    return prepare_w4a8(w.w_q, w.scales, w.group_size, w.zeros, engine="u4_amx")


def main() -> None:
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    libs = {"base": build(Path(os.environ["W4A8_BASE_CSRC"]))}
    for tag, ks, bl in (("k8", 8, "_tile_stream_loadd"), ("k16", 16, "_tile_stream_loadd"),
                        ("k8_plain_b", 8, "_tile_loadd")):
        libs[tag] = build(variant_dir(tag, ks, bl))
    print(json.dumps({"provenance": host_provenance({"script": "benchmarks/amx_kslice_probe.py"})}), flush=True)
    native = get_path("w4a8_native")
    # bits: every candidate against the base, shapes with a K tail (65 steps) and ragged M
    for n, k, ms in ((4096, 4096, (33, 64, 100, 128, 300)), (1000, 4160, (64, 97, 200))):
        w = int4_weight_of(synthetic_bench_layer(n, k, -1))
        use(libs["base"])
        st = amx(w)
        for m in ms:
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
            outs = {}
            for tag, lib in libs.items():
                use(lib)
                outs[tag] = native.run(native.make_input(x, st), st)
            print(json.dumps({"bits": [n, k, m], **{t: bool(torch.equal(o, outs["base"])) for t, o in outs.items()}}),
                  flush=True)
    w = int4_weight_of(synthetic_bench_layer(4096, 4096, -1))
    use(libs["base"])
    prep = {"native": ("w4a8_native", amx(w)), "int8_mm": ("int8_mm", get_path("int8_mm").prepare(w))}
    for m in (32, 128, 256):
        row = {"m": m}
        for tag, lib in libs.items():
            use(lib)
            t = alone(prep, m)
            row[tag] = {"native_ms": round(t["native"].median_ms, 3), "int_mm_ms": round(t["int8_mm"].median_ms, 3),
                        "native_over_int_mm": round(ratio(t, "native", "int8_mm")["wall"], 3)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
