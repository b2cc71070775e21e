"""The C engines built with Ubuntu's default hardening against plain gcc, on this machine.

Ubuntu's gcc 13 adds `-D_FORTIFY_SOURCE=3 -fstack-clash-protection -fcf-protection=full` to
every build; on an AMX host that left the quantizer's bf16 widening loop scalar, 14x slower
(benchmarks/results/amx_emr_quantizer/). This builds every engine the CPU admits twice, with
`CC=gcc` and with a wrapper adding those flags (each build in its own cache, self-tested as
usual), and times w4a8_native per engine, group and M in child processes, alternating
compilers over `--rounds`; each figure is the fastest call over the rounds (1 thread, N = K =
4096, bf16 activations). A ratio near 1 says the build flags cost nothing.

    python benchmarks/bench_hardening_flags.py [--rounds 3] [--out benchmarks/results/hardening_flags.json]
"""
from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "kernels")]

UBUNTU_DEFAULTS = ("-D_FORTIFY_SOURCE=3", "-fstack-clash-protection", "-fcf-protection=full")
CHILD = r'''
import json, sys, time, torch
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/kernels"]
from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native
from w4a8_kernels.int8_gemm import engine_available
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
w = torch.randint(-8, 8, (4096, 4096), generator=g, dtype=torch.int8)
out = {}
for eng in ("u4_amx", "u4_vnni512", "u4_avx2", "avx2_u8s8"):
    if not engine_available(eng)[0]:
        continue
    for gs in (-1, 128):
        s = torch.rand(4096, 1 if gs == -1 else 4096 // gs, generator=g) + 0.5
        p = prepare_w4a8(w, s, gs, engine=eng)
        for m in (1, 16, 128):
            x = torch.randn(m, 4096, generator=g).to(torch.bfloat16)
            w4a8_native(x, p)
            ts = []
            for _ in range(9):
                t0 = time.perf_counter()
                w4a8_native(x, p)
                ts.append(time.perf_counter() - t0)
            out[f"{eng} g{gs} M{m}"] = min(ts) * 1e3
print(json.dumps(out))
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "hardening_flags.json"))
    args = ap.parse_args()
    from workbench.bench import host_provenance

    tmp = Path(tempfile.mkdtemp())
    wrapper = tmp / "gcc-hardened"
    wrapper.write_text(f'#!/bin/sh\nexec gcc {" ".join(UBUNTU_DEFAULTS)} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    compilers = {"gcc": "gcc", "hardened": str(wrapper)}
    runs: dict[str, list[dict]] = {c: [] for c in compilers}
    for _ in range(args.rounds):
        for name, cc in compilers.items():
            env = {**os.environ, "CC": cc, "W4A8_WORKBENCH_CACHE": str(tmp / f"cache-{name}")}
            r = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], env=env, capture_output=True,
                               text=True, timeout=900)
            if r.returncode != 0:
                print(r.stderr[-2000:], file=sys.stderr)
                return 1
            runs[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    rows = []
    for key in runs["gcc"][0]:
        a = min(r[key] for r in runs["gcc"])
        b = min(r[key] for r in runs["hardened"])
        rows.append({"case": key, "gcc_ms": round(a, 4), "hardened_ms": round(b, 4), "ratio": round(b / a, 3)})
        print(f"{key:24s} gcc {a:8.3f} ms  hardened {b:8.3f} ms  ratio {b / a:.2f}")
    result = {"provenance": host_provenance({"script": "benchmarks/bench_hardening_flags.py", "threads": 1,
                                             "compiler": gcc, "hardening": list(UBUNTU_DEFAULTS),
                                             "rounds": args.rounds, "statistic": "fastest call over rounds"}),
              "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
