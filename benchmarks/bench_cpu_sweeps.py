"""Alignment, tensor-parallel and group-size sweeps on this CPU, as data for the app and notebooks.

    python benchmarks/bench_cpu_sweeps.py [--threads 1] [--quick] [--out benchmarks/results]

- alignment: N = 4096, 4100, 4104, 4160 at K = 4096, group 128 (4100 and 4104 break
  torch's N % 16 for its int4 kernel; 4100 breaks every N % 8 rule);
- tensor parallel: the linears of Llama-3.1-8B and the down_proj of Qwen2.5-72B at
  TP 1, 2, 4, 8 (TP 8 gives K = 3696, not a multiple of 128: benchmarked per-channel);
- group size: per-channel, 32, 64, 128 at N = K = 4096.
Each writes <name>.json (records with provenance) and <name>.csv.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.bench import host_provenance, write_csv, write_json  # noqa: E402
from workbench.models import partition_table  # noqa: E402
from workbench.sweeps import sweep_alignment, sweep_group, sweep_partitions  # noqa: E402

PATHS = ("w4a8_native", "w4a16_fallback", "w4a16_tinygemm", "w4a16_dequant")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    ms = (1, 64) if args.quick else (1, 128)
    kw = {"repeats": 3 if args.quick else 5, "max_call_s": 5.0}
    say = lambda d, t, msg: print(f"  {d}/{t} {msg}", flush=True)  # noqa: E731

    def save(name, recs, extra=None):
        prov = host_provenance({"script": "benchmarks/bench_cpu_sweeps.py", "sweep": name})
        write_json(recs, out / f"{name}.json", prov, extra=extra)
        write_csv(recs, out / f"{name}.csv", prov)
        print(f"wrote {out}/{name}.json/.csv", flush=True)

    t0 = time.time()
    print("alignment sweep", flush=True)
    save("cpu_sweep_alignment", sweep_alignment(paths=PATHS + ("vllm_dynamic4bit",), ms=ms,
                                                progress=say, **kw))
    print("tensor-parallel sweep", flush=True)
    recs = sweep_partitions("Llama-3.1-8B", ms=ms, paths=PATHS, progress=say, **kw)
    recs += sweep_partitions("Qwen2.5-72B", layers=("down_proj",), ms=ms, paths=PATHS,
                             progress=say, **kw)
    save("cpu_sweep_tp", recs, extra={"partitions": partition_table(["Llama-3.1-8B", "Qwen2.5-72B"])})
    print("group-size sweep", flush=True)
    save("cpu_sweep_group", sweep_group(paths=("w4a8_native", "w4a8_group_loop", "w4a16_fallback"),
                                        ms=ms, progress=say, **kw))
    print(f"done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
