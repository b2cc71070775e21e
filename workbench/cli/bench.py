"""`python -m workbench bench`: time kernel paths on one layer, print or save the records.

    python -m workbench bench --m 1,32,128 --n 4096 --k 4096 --group 128 \\
        --paths w4a8_native,w4a16_fallback,int8_mm,bf16_dense,vllm_dynamic4bit --json

prints one JSON record per (path, M) with at least path, m, n, k, group_size,
median_ms, rel_error, kernel_rel_error and available (false, with why, where a path
cannot run here). Two references, named in each record's `error_references`:
  rel_error         against the unquantized weights: x @ W^T in float64, W the float
                    weight the layer was quantized from (what quantization costs in all)
  kernel_rel_error  against the float64 reference of the quantized layer, computed as
                    the path computes (w4a8_kernels.reference: the kernel's own error)
`--out results.json` (or .csv) also writes the records with their provenance; `--list`
shows every path and whether it can run here. Sizes are checked against this machine's
available memory before anything is allocated.
"""
from __future__ import annotations

import argparse
import json
import sys

from workbench.cli.inputs import float_in, int_in, m_list, name_list, output_file, shown
from workbench.errors import InvalidInputError
from workbench.limits import MAX_DIM
from workbench.memory import bench_bytes, check_fits

_DEFAULT_PATHS = "w4a8_native,w4a16_fallback"  # on a CPU host; see default_bench_paths
_DIM = int_in(1, MAX_DIM)
ERROR_REFERENCES = {
    "rel_error": "unquantized weights (x @ W^T in float64)",
    "kernel_rel_error": "float64 reference of the quantized layer (w4a8_kernels.reference)",
}


def check_size(n: int, k: int, ms: list[int], paths: int) -> None:
    """Refuse a layer and token counts that would not fit, before anything is allocated."""
    check_fits(bench_bytes(n, k, max(ms), paths),
               f"N = {n}, K = {k}, M up to {max(ms)} with {paths} path(s)",
               "use a smaller --m, --n or --k")


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="time W4A8 and W4A16 kernel paths on this machine",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", default="1,32,128", help="token counts, comma-separated (default 1,32,128)")
    p.add_argument("--n", type=_DIM, default=4096, help="out_features N (default 4096)")
    p.add_argument("--k", type=_DIM, default=4096, help="in_features K (default 4096)")
    p.add_argument("--group", type=int_in(1, 2**31 - 1, also=(-1,)), default=128,
                   help="group size; -1 per-channel (default 128)")
    p.add_argument("--asym", action="store_true", help="asymmetric weights (zero points)")
    p.add_argument("--paths", help="kernel paths, comma-separated (default: on a GPU host what vLLM "
                   "runs there (vllm_humming, vllm_humming_int8 where humming is installed), the "
                   "Triton stand-ins and cublas_bf16; on a CPU host " + _DEFAULT_PATHS + ")")
    p.add_argument("--platform", choices=("host", "host-cpu"), default="host",
                   help="which part of this machine the default paths run on: 'host' is its GPU "
                   "where it has one, 'host-cpu' its CPU (default host)")
    p.add_argument("--model", help="bench a real model's shard instead (see workbench.models)")
    p.add_argument("--layer", help="with --model: qkv_proj, o_proj, gate_up_proj, down_proj, ...")
    p.add_argument("--tp", type=int_in(1, 1024), help="with --model: tensor parallel size (default 1)")
    p.add_argument("--repeats", type=int_in(1, 1000), default=5)
    p.add_argument("--warmup", type=int_in(0, 100), default=1)
    p.add_argument("--threads", type=int_in(1, 1024), help="torch threads (default: torch's)")
    p.add_argument("--seed", type=int_in(0, 2**31 - 1), default=0)
    p.add_argument("--max-call-s", type=float_in(0, 3600), default=10.0,
                   help="stop timing a path at larger M once one call exceeds this (default 10)")
    p.add_argument("--json", action="store_true", help="one JSON record per line")
    p.add_argument("--out", help="also write the records with provenance (.json or .csv)")
    p.add_argument("--list", action="store_true", help="list the paths and whether they run here")
    p.set_defaults(func=run)


def _layer(args):
    from workbench.bench import synthetic_bench_layer
    if args.model is not None:
        from workbench.models import partitions
        args.tp = args.tp or 1
        parts = partitions(args.model, args.tp)
        names = [q.layer for q in parts]
        if args.layer not in names:
            raise InvalidInputError(f"--layer: {shown(args.layer)}; {args.model} at TP {args.tp} "
                                    f"has {', '.join(names)}")
        part = parts[names.index(args.layer)]
        n, k = part.n, part.k
    else:
        given = [f for f, v in (("--layer", args.layer), ("--tp", args.tp)) if v is not None]
        if given:
            raise InvalidInputError(f"{', '.join(given)}: given without --model, the only source "
                                    "they apply to")
        n, k = args.n, args.k
    if n <= 0 or k <= 0:
        raise InvalidInputError(f"--n and --k must be positive, got N = {n}, K = {k}")
    g = args.group
    if g != -1 and (g <= 0 or k % g):
        raise InvalidInputError(f"--group: {g} does not divide K = {k}; accepted: -1 or a divisor of K")
    check_size(n, k, args.ms, len(args.path_names))
    return synthetic_bench_layer(n, k, g, seed=args.seed, symmetric=not args.asym)


def _noise_line(records, prov: dict) -> str:
    """The run's widest p80/p20 band and its load against the cores, a warning past the limits."""
    from workbench.noise import SPREAD_LIMIT, timing_noise

    check = prov.get("load_check") or {}
    noise = timing_noise([r.to_dict() for r in records], (prov.get("loadavg_1m"), check.get("load_end")))
    spread = ("-" if noise.worst_spread is None else
              f"{noise.worst_spread:.2f}x ({noise.worst_path} at M = {noise.worst_m})")
    load = "-" if noise.load is None else f"{noise.load:.1f}"
    others = ("" if noise.others_cores is None else
              f"; other processes kept {noise.others_cores:.1f} of them busy")
    line = f"noise: widest p80/p20 {spread}; load {load} on {noise.cores} core(s){others}"
    if noise.noisy:
        why = ([f"a band above {SPREAD_LIMIT}x"] if noise.spread_high else []) + (
            [f"other processes took the cores {noise.threads} thread(s) needed"] if noise.crowded else []) + (
            ["a load average above the core count"] if noise.load is not None and noise.load > noise.cores
            else [])
        line += f"\nwarning: noisy timings ({' and '.join(why)}): medians may move between runs"
        if noise.overloaded:
            line += "; the run is flagged loaded (load_check in the --out file's provenance)"
    return line


def run(args) -> int:
    from workbench.bench import bench_layer_weight, host_provenance, write_csv, write_json
    from workbench.execution import execution_path, execution_path_names, path_role
    from workbench.noise import cpu_sample, load_check

    if args.list:
        for name in execution_path_names():
            path = execution_path(name)
            ok, why = path.probe()
            print(f"{name:22s} {'yes' if ok else 'no ':3s} {path.summary}" + (f"  [{why}]" if why else ""))
        from workbench.bench import engine_verdicts
        print("native engines (built here, admitted after a self-test in a child process):")
        for variant, standing in engine_verdicts().items():
            print(f"  {variant:20s} {standing}")
        return 0
    if args.paths is None:
        from workbench.execution import default_bench_paths
        from workbench.platforms import resolve_platform

        args.paths = ",".join(default_bench_paths(resolve_platform(args.platform)))
    paths = name_list(args.paths, "--paths", execution_path_names())
    args.path_names, args.ms = paths, m_list(args.m)
    if args.out is not None:
        output_file(args.out, "--out", (".json", ".csv"))  # checked before the minutes of timing
    if args.threads is not None:
        import torch  # imported here: the CLI starts fast for every other command

        torch.set_num_threads(args.threads)
    layer = _layer(args)
    ms = args.ms
    prov = host_provenance()
    start = cpu_sample()
    records = bench_layer_weight(layer, paths, ms, warmup=args.warmup, repeats=args.repeats,
                                 max_call_s=args.max_call_s, seed=args.seed)
    # structured, in the provenance every written record carries: a loaded run is flagged
    prov["load_check"] = load_check(start, cpu_sample(), prov["threads"]).to_dict()
    if args.json:
        for r in records:
            print(json.dumps({**r.to_dict(), "error_references": ERROR_REFERENCES}))
        if prov["load_check"]["loaded"]:  # stdout stays one record a line
            print(_noise_line(records, prov), file=sys.stderr)
    else:
        print(f"{layer.name}  threads={prov['threads']}  torch {prov['torch']}  {prov['cpu']}")
        print(f"{'path':22s} {'M':>6s} {'median ms':>10s} {'p20-p80':>17s} {'err vs W':>9s} "
              f"{'err vs ref':>10s}  note")
        for r in records:
            if r.median_ms is None:
                print(f"{r.path:22s} {r.m:6d} {'-':>10s} {'':17s} {'':9s} {'':10s}  {r.why}")
                continue
            spread = f"{r.p20_ms:.3g}-{r.p80_ms:.3g}"
            err, kerr = (f"{e:.2e}" if e is not None else "-" for e in (r.rel_error, r.kernel_rel_error))
            gpu = ([f"first call {r.first_call_s:.3g} s (compile included, not a sample)",
                    f"eager {r.eager_ms:.3g} ms with launch"] if r.first_call_s is not None else [])
            note = "; ".join(filter(None, [path_role(r.path), r.detail or r.why, *gpu]))
            print(f"{r.path:22s} {r.m:6d} {r.median_ms:10.3f} {spread:>17s} {err:>9s} {kerr:>10s}  "
                  f"{note}")
        if any(r.first_call_s is not None for r in records):
            print("GPU times are device time: CUDA-graph replays over copies of the operands that "
                  "pass the L2 (vLLM runs decode in CUDA graphs); 'eager' is one Python call's host "
                  "time with its launch and a synchronize")
        print(f"relative errors: 'err vs W' against the {ERROR_REFERENCES['rel_error']}; "
              f"'err vs ref' against the {ERROR_REFERENCES['kernel_rel_error']}")
        print(_noise_line(records, prov))
    if args.out is not None:
        write = write_csv if args.out.endswith(".csv") else write_json
        out = write(records, args.out, prov)
        print(f"wrote {out}", file=sys.stderr)
    return 0
