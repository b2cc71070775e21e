"""A candidate for the AMX engine's grouped GEMM, tried and dropped: the weight held per
group (run_groups, GROUP_PASS blocks of 16 tokens a pass) against the paired epilogue
(GROUP_PASS 0: every group through run_pair), in one process on an AMX host. Each library
is built from the sources with GROUP_PASS set, admitted by its own self-test in a child
process, and its outputs compared bit for bit with GROUP_PASS 0's. Prints JSON lines.
The candidate is a patch on the engine (results: benchmarks/results/amx_emr_group_pass/):

    patch -p1 < benchmarks/results/amx_emr_group_pass/group_pass.patch
    THREADS=2 python benchmarks/amx_group_pass_probe.py [PASSES ...]   (default 0 2 4 8)
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cpu_ratios import alone  # noqa: E402
from w4a8_kernels import _native_lib  # noqa: E402
from w4a8_kernels.cpu_w4a8 import prepare_w4a8  # noqa: E402
from w4a8_kernels.registry import get_path  # noqa: E402
from workbench.bench import host_provenance, int4_weight_of, synthetic_bench_layer  # noqa: E402


def build(passes: int):
    d = Path(tempfile.mkdtemp(prefix=f"amx_gp{passes}_"))
    for f in _native_lib.csrc_dir().iterdir():
        shutil.copy(f, d)
    src = (d / "w4a8_amx.c").read_text()
    src, n = re.subn(r"#define GROUP_PASS \d+\n", f"#define GROUP_PASS {passes}\n", src)
    assert n == 1, "no GROUP_PASS define in w4a8_amx.c"
    (d / "w4a8_amx.c").write_text(src)
    os.environ[_native_lib.CSRC_ENV] = str(d)
    try:
        return _native_lib._build("u4_amx")
    finally:
        del os.environ[_native_lib.CSRC_ENV]


def use(lib) -> None:
    _native_lib._state["u4_amx"] = {"lib": lib, "why": ""}


def main() -> None:
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    passes = [int(a) for a in sys.argv[1:]] or [0, 2, 4, 8]
    libs = {p: build(p) for p in passes}
    base = passes[0]
    print(json.dumps({"provenance": host_provenance({"script": "benchmarks/amx_group_pass_probe.py"})}), flush=True)
    native = get_path("w4a8_native")
    for n, k, g, ms in ((4096, 4096, 128, (1, 33, 128, 300, 520)), (1000, 4160, 64, (64, 97)),
                        (200, 8192, 128, (290,)), (96, 1024, 256, (70,))):
        w = int4_weight_of(synthetic_bench_layer(n, k, g))
        use(libs[base])
        st = prepare_w4a8(w.w_q, w.scales, w.group_size, w.zeros, engine="u4_amx")
        for m in ms:
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
            outs = {}
            for p, lib in libs.items():
                use(lib)
                outs[p] = native.run(native.make_input(x, st), st)
            print(json.dumps({"bits": [n, k, g, m], **{str(p): bool(torch.equal(o, outs[base]))
                                                        for p, o in outs.items()}}), flush=True)
    prep = {}
    for g in (128, -1):
        w = int4_weight_of(synthetic_bench_layer(4096, 4096, g))
        use(libs[base])
        prep["g128" if g == 128 else "channel"] = ("w4a8_native", prepare_w4a8(
            w.w_q, w.scales, w.group_size, w.zeros, engine="u4_amx"))
    for m in (128, 512, 2048):
        rows = {p: {"g128": [], "channel": []} for p in libs}
        for _ in range(3):  # rounds: the libraries alternate, so the host's state falls on all
            for p, lib in libs.items():
                use(lib)
                t = alone(prep, m, blocks=4, per_block=6)
                rows[p]["g128"].append(t["g128"].median_ms)
                rows[p]["channel"].append(t["channel"].median_ms)
        out = {"m": m}
        for p, r in rows.items():
            out[str(p)] = {"g128_ms": [round(v, 3) for v in r["g128"]],
                           "channel_ms": [round(v, 3) for v in r["channel"]],
                           "g128_over_channel": [round(a / b, 3) for a, b in zip(r["g128"], r["channel"])]}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
