"""Where the app's cold start goes: what the first session imports and computes, stage by stage.

    python benchmarks/bench_app_cold_start.py [--runs 3]

Each run is a fresh interpreter doing, in order, what the landing page's first script run
does: import streamlit (the server has it already; the baseline), read the host, open the
bundled sample checkpoint (its config goes through the compressed-tensors reader), trace
its layer; then, for scale, what importing torch would add (the landing page must not:
the last line says whether any stage imported it). Reported per stage: CPU seconds (user +
system, so other load on the machine does not inflate them), the wall seconds, and each
stage as a multiple of the streamlit import. The browser test measures the whole cold
start end to end (tests/ui/artifacts/timings.json).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
out = []
def stage(name, fn):
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    out.append((name, time.process_time() - c0, time.perf_counter() - w0))
stage("import streamlit", lambda: __import__("streamlit"))
from workbench.platforms import detect_host
stage("detect_host()", detect_host)
stage("import workbench.checkpoints + dispatch",
      lambda: (__import__("workbench.checkpoints"), __import__("workbench.dispatch")))
from workbench.checkpoints import open_checkpoint, trace_layer
box = {}
stage("open_checkpoint(sample)", lambda: box.setdefault("c", open_checkpoint(
    os.path.join(sys.argv[1], "sample_models", "ct-w4a8-int-g128"))))
stage("trace the layer", lambda: trace_layer(box["c"].spec("model.layers.0.mlp.down_proj"), "host", {}))
landing_imported_torch = "torch" in sys.modules
stage("import torch (not on the landing path)", lambda: __import__("torch"))
print(json.dumps({"stages": out, "landing_imported_torch": landing_imported_torch}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    runs = []
    for _ in range(args.runs):
        res = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT)], capture_output=True, text=True,
                             check=True)
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    imported = any(r["landing_imported_torch"] for r in runs)
    runs = [r["stages"] for r in runs]
    names = [s[0] for s in runs[0]]
    cpu = {n: statistics.median(r[i][1] for r in runs) for i, n in enumerate(names)}
    wall = {n: statistics.median(r[i][2] for r in runs) for i, n in enumerate(names)}
    base = cpu["import streamlit"]
    print(f"{'stage':42} {'CPU s':>7} {'wall s':>7} {'x streamlit':>11}")
    for n in names:
        print(f"{n:42} {cpu[n]:7.2f} {wall[n]:7.2f} {cpu[n] / base:11.1f}")
    landing = [n for n in names if not n.startswith("import torch")]
    print(f"{'landing total':42} {sum(cpu[n] for n in landing):7.2f} {sum(wall[n] for n in landing):7.2f}")
    print(f"landing stages imported torch: {imported}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
