"""Peak memory of reading one layer of a large checkpoint, against reading all of it.

    python benchmarks/bench_checkpoint_memory.py [--layers 16] [--n 16384] [--k 8192] [--dir DIR] [--keep]

Writes a compressed-tensors W4A16 `pack-quantized` checkpoint of `layers` Linear layers
[N, K] (16 x 16384 x 8192 at 4 bits = 1.07 GB), then measures in fresh child processes the
peak resident memory (Linux VmHWM, reset through /proc/self/clear_refs after imports) of:

- listing the checkpoint (`open_checkpoint`: config and headers only);
- `load_layer` of one layer (the workbench path: safetensors `safe_open`, that layer's tensors);
- `safetensors.torch.load_file` of the whole file (the baseline a naive reader pays).

safetensors returns memory-mapped tensors, so each child reads every byte it loaded (a max
over a uint8 view, which allocates nothing) before the peak is taken.

Reported as MB and as ratios to the layer's bytes on disk. Results go to stdout as JSON and to
benchmarks/results/checkpoint_memory.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, time
sys.path.insert(0, {repo!r})
import torch, safetensors.torch
from workbench.checkpoints import open_checkpoint

def hwm_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS

path, mode, layer = sys.argv[1], sys.argv[2], sys.argv[3]
ck = open_checkpoint(path) if mode != "baseline" else None
reset_peak()
base = hwm_kb()
t0 = time.perf_counter()
def touch(t):
    # safetensors hands out memory-mapped tensors: read every byte so its pages count.
    return int(t.contiguous().view(-1).view(torch.uint8).max())

if mode == "list":
    n = len(open_checkpoint(path).layers)
elif mode == "layer":
    q = ck.load_layer(layer)
    n = sum(touch(t) for t in (q.qweight, q.scales))
else:
    n = sum(touch(t) for t in safetensors.torch.load_file(path + "/model.safetensors").values())
elapsed = time.perf_counter() - t0
print(json.dumps({{"peak_delta_kb": hwm_kb() - base, "seconds": elapsed, "result": n}}))
"""


def write_checkpoint(path: Path, layers: int, n: int, k: int) -> tuple[int, int]:
    """Random packed int4 layers in the compressed-tensors pack-quantized layout."""
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for i in range(layers):
        p = f"model.layers.{i}.mlp.down_proj"
        tensors[f"{p}.weight_packed"] = torch.randint(-2**31, 2**31 - 1, (n, k // 8), generator=gen, dtype=torch.int32)
        tensors[f"{p}.weight_scale"] = (torch.rand(n, k // 128, generator=gen) * 0.01 + 1e-3).to(torch.bfloat16)
        tensors[f"{p}.weight_shape"] = torch.tensor([n, k])
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    layer_bytes = sum(tensors[f"model.layers.0.mlp.down_proj.{t}"].numel() * tensors[f"model.layers.0.mlp.down_proj.{t}"].element_size()
                      for t in ("weight_packed", "weight_scale"))
    weights = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128,
               "dynamic": False}
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "bfloat16",
              "quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                      "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                                                    "format": "pack-quantized"}},
                                      "ignore": ["lm_head"], "quantization_status": "compressed"}}
    (path / "config.json").write_text(json.dumps(config))
    return layer_bytes, (path / "model.safetensors").stat().st_size


def measure(path: Path, mode: str, layer: str) -> dict:
    code = _CHILD.format(repo=str(REPO))
    out = subprocess.run([sys.executable, "-c", code, str(path), mode, layer], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated checkpoint")
    args = ap.parse_args()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="wb-bigckpt-"))
    path = root / "big-w4a16-pack"
    try:
        t0 = time.perf_counter()
        layer_bytes, file_bytes = write_checkpoint(path, args.layers, args.n, args.k)
        write_s = time.perf_counter() - t0
        layer = f"model.layers.{args.layers // 2}.mlp.down_proj"
        runs = {mode: measure(path, mode, layer) for mode in ("list", "layer", "baseline")}
        mb = 1024 * 1024
        result = {
            "checkpoint_bytes": file_bytes, "layer_bytes": layer_bytes,
            "shape_per_layer": [args.n, args.k], "layers": args.layers, "write_seconds": round(write_s, 2),
            "list_peak_mb": round(runs["list"]["peak_delta_kb"] * 1024 / mb, 1),
            "load_layer_peak_mb": round(runs["layer"]["peak_delta_kb"] * 1024 / mb, 1),
            "load_file_peak_mb": round(runs["baseline"]["peak_delta_kb"] * 1024 / mb, 1),
            "load_layer_peak_over_layer_bytes": round(runs["layer"]["peak_delta_kb"] * 1024 / layer_bytes, 2),
            "load_file_peak_over_layer_bytes": round(runs["baseline"]["peak_delta_kb"] * 1024 / layer_bytes, 2),
            "load_layer_seconds": round(runs["layer"]["seconds"], 3),
            "load_file_seconds": round(runs["baseline"]["seconds"], 3),
            "machine": f"{platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}",
        }
        print(json.dumps(result, indent=2))
        out = REPO / "benchmarks" / "results" / "checkpoint_memory.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        if not args.keep:
            shutil.rmtree(root if not args.dir else path, ignore_errors=True)


if __name__ == "__main__":
    main()
