"""The CPU kernels' "Done when" ratios, measured in one process on this machine.

    python benchmarks/bench_cpu_ratios.py [--threads 1] [--quick] [--out benchmarks/results]

N = K = 4096 (bf16 activations, RTN-quantized normal(0, 0.02) weights, bf16 scales):

1. per-channel W4A8 native / torch._int_mm alone on already-quantized int8 (M >= 32),
   timed round-robin and each alone (blocks of one path's calls, see `alone`), and / FBGEMM's
   int8 GEMM alone (this CPU's int8 bound);
2. group-128 W4A8 native / per-channel W4A8 native (M >= 128), and the naive loop
   (one integer GEMM per group) / per-channel;
3. W4A16 fallback / the best of its candidates at every M (tinygemm, dequantize + fp32
   GEMM, dequantize + bf16 GEMM where bf16 is native);
4. the M sweep (1 .. 8192) of W4A8 native against the W4A16 fallback: crossover M;
5. vLLM's Dynamic4bitLinearKernel path / W4A16 fallback: the slowdown factor;
6. (--sections 6) vLLM's own CPU ops, built from its sdist (w4a8_kernels.vllm_cpu):
   int4_scaled_mm_cpu / W4A8 native and cpu_gemm_wna16 / W4A16 fallback, per-channel and
   group 128, with each one's error against the float64 reference (and the op's distance from
   this project's emulation of it) at M = 32. A path that cannot run here is recorded with why.

Every ratio compares calls timed round-robin in the same rounds (see
workbench.bench), so load from other processes falls on both sides. Each ratio is given
by median CPU time of the calling thread ("cpu": with --threads 1 all the work runs in
that thread, so time other processes held the core is left out) and by median wall
time ("wall"). On a shared machine the CPU-time ratio is the one to read. Results go to
cpu_ratios.json (ratios, with the records behind them) and cpu_sweep_m.json / .csv.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from w4a8_kernels.registry import get_path  # noqa: E402
from workbench.bench import (  # noqa: E402
    bench_weight, host_provenance, int4_weight_of, summarize, synthetic_bench_layer,
    write_csv, write_json,
)
from workbench.sweeps import crossover, slowdown  # noqa: E402

N = K = 4096


def _ready(candidates: dict[str, tuple], m: int, seed: int) -> tuple[dict, float]:
    """label -> (path, prepared, inputs) on the same bf16 activations, each warmed up (and the
    fallback tuned for m), and the slowest path's one timed call in seconds."""
    gen = torch.Generator().manual_seed(seed + m)
    x = torch.randn(m, K, generator=gen).to(torch.bfloat16)
    ready = {}
    slowest = 0.0
    for label, (path_name, state) in candidates.items():
        path = get_path(path_name)
        inputs = path.make_input(x.to(path.activation_dtype) if path.activation_dtype else x, state)
        path.run(inputs, state)
        t0 = time.perf_counter()
        path.run(inputs, state)
        slowest = max(slowest, time.perf_counter() - t0)
        ready[label] = (path, state, inputs)
    return ready, slowest


def _call(path, state, inputs, wall: list, cpu: list) -> None:
    """One timed call: its wall time and the calling thread's CPU time."""
    c0, t0 = time.thread_time(), time.perf_counter()
    path.run(inputs, state)
    wall.append(time.perf_counter() - t0)
    cpu.append(time.thread_time() - c0)


def interleaved(candidates: dict[str, tuple], m: int, repeats: int, seed: int = 0) -> dict:
    """Round-robin timing of several (path, prepared) pairs on the same activations."""
    ready, slowest = _ready(candidates, m, seed)
    # fast calls get more rounds (about 2 s per path, at most 200): the median of many
    # short calls is what steadies a ratio on a shared machine
    repeats = max(repeats, min(200, int(2.0 / max(slowest, 1e-4))))
    samples = {label: [] for label in ready}
    cpu = {label: [] for label in ready}
    items = list(ready.items())
    order = random.Random(seed + m)
    for _ in range(repeats):
        # a fresh random order each round: the call after a large one finds colder caches
        # (or, after a path sharing its weight, warmer ones); a fixed or rotated order
        # would give every path the same predecessor each round
        order.shuffle(items)
        for label, (path, state, inputs) in items:
            _call(path, state, inputs, samples[label], cpu[label])
    return {label: summarize(s, cpu[label]) for label, s in samples.items()}


def alone(candidates: dict[str, tuple], m: int, blocks: int = 6, per_block: int = 8,
          seed: int = 0) -> dict:
    """Each path timed alone: blocks of consecutive calls of one path, the blocks of the
    paths alternating (so the machine's load still falls on all alike), each block's first
    call left out. In a round-robin the call after torch's int8 GEMM meets torch's OpenMP
    workers still spinning on the cores (libgomp spins for milliseconds after a parallel
    region), and the call after ours meets our pool's; here neither meets the other's."""
    ready, slowest = _ready(candidates, m, seed)
    per_block = max(2, min(per_block, int(0.5 / max(slowest, 1e-4))))  # a CPU where a call takes seconds
    samples = {label: [] for label in ready}
    cpu = {label: [] for label in ready}
    for b in range(blocks):
        for label, (path, state, inputs) in (list(ready.items())[::-1] if b % 2 else ready.items()):
            path.run(inputs, state)
            for _ in range(per_block):
                _call(path, state, inputs, samples[label], cpu[label])
    return {label: summarize(s, cpu[label]) for label, s in samples.items()}


def ratio(t: dict, a: str, b: str) -> dict:
    """a / b by median CPU time of the calling thread, and by median wall time."""
    return {"cpu": t[a].cpu_median_ms / t[b].cpu_median_ms, "wall": t[a].median_ms / t[b].median_ms}


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--quick", action="store_true", help="fewer M and repeats (a smoke run)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--tag", default="", help="suffix for the result file names")
    ap.add_argument("--sections", default="1,2,3,4",
                    help="which parts to run (1: per-channel vs int8, 2: group vs channel, "
                         "3: W4A16 fallback, 4: M sweep and Dynamic4bit, 6: vLLM's own CPU "
                         "ops, built from its sdist); a partial run "
                         "updates those parts of an existing cpu_ratios.json")
    ap.add_argument("--max-call-s", type=float, default=20.0,
                    help="stop timing a path at larger M once one call takes longer (default 20)")
    return ap.parse_args()


def _note(result: dict, key: str, m: int, timings: dict) -> None:
    result["timings_ms"].setdefault(key, {})[m] = {k: t.__dict__ for k, t in timings.items()}


def _per_channel_vs_int8(prep: dict, ms: list[int], reps: int, result: dict) -> dict:
    """1. per-channel native against the integer GEMM alone (_int_mm takes seconds here:
    it gets its own, shorter round-robin with native; FBGEMM gets the full one)."""
    r1 = {}
    for m in ms:
        t = interleaved({k: prep[k] for k in ("native_channel", "int8_fbgemm")}, m, reps)
        pair = {k: prep[k] for k in ("native_channel", "int8_mm")}
        slow = interleaved(pair, m, 1 if m >= 128 else 3)
        each = alone(pair, m)
        _note(result, "per_channel_vs_int8", m, {
            **t, "int8_mm": slow["int8_mm"], "native_channel_with_int_mm": slow["native_channel"],
            "int8_mm_alone": each["int8_mm"], "native_channel_alone": each["native_channel"]})
        r1[m] = {"native_over_int_mm": ratio(slow, "native_channel", "int8_mm"),
                 "native_over_int_mm_alone": ratio(each, "native_channel", "int8_mm"),
                 "native_over_fbgemm": ratio(t, "native_channel", "int8_fbgemm")}
        print(f"[1] M={m}: native/int_mm round-robin {r1[m]['native_over_int_mm']}, each alone "
              f"{r1[m]['native_over_int_mm_alone']}, native/fbgemm {r1[m]['native_over_fbgemm']}",
              flush=True)
    return r1


def _group_vs_channel(prep: dict, ms: list[int], reps: int, result: dict) -> dict:
    """2. group-128 against per-channel, and the naive loop against per-channel."""
    r2 = {}
    for m in ms:
        t = interleaved({k: prep[k] for k in ("native_channel", "native_g128", "group_loop_g128")}, m,
                        reps if m <= 512 else 3)
        _note(result, "group_vs_channel", m, t)
        r2[m] = {"g128_over_channel": ratio(t, "native_g128", "native_channel"),
                 "naive_loop_over_channel": ratio(t, "group_loop_g128", "native_channel")}
        print(f"[2] M={m}: g128/channel {r2[m]['g128_over_channel']}, "
              f"naive loop/channel {r2[m]['naive_loop_over_channel']}", flush=True)
    return r2


def _fallback_vs_best(g128, ms: list[int], reps: int, result: dict) -> dict:
    """3. the W4A16 fallback against the best of its candidates.

    One prepared weight shared by all of them: the same bytes at the same addresses, so
    page and cache placement cannot make one path look faster than another."""
    from w4a8_kernels.cpu_w4a16 import fallback_candidates, fallback_choice

    shared = get_path("w4a16_fallback").prepare(g128)
    names = [f"w4a16_{c}" for c in fallback_candidates(shared)]
    fb = {name: (name, shared) for name in ["w4a16_fallback", *names]}
    r3 = {}
    for m in ms:
        t = interleaved(fb, m, reps + 2 if m <= 512 else 5)  # tunes the fallback for m first
        _note(result, "w4a16_fallback", m, t)
        best_cpu = min(t[name].cpu_median_ms for name in names)
        best_wall = min(t[name].median_ms for name in names)
        r3[m] = {"fallback_over_best": {"cpu": t["w4a16_fallback"].cpu_median_ms / best_cpu,
                                        "wall": t["w4a16_fallback"].median_ms / best_wall},
                 "choice": fallback_choice(fb["w4a16_fallback"][1], m),
                 **{f"{name[6:]}_cpu_ms": t[name].cpu_median_ms for name in names}}
        print(f"[3] M={m}: fallback/best {r3[m]['fallback_over_best']} (ran {r3[m]['choice']}; "
              + ", ".join(f"{name[6:]} {t[name].cpu_median_ms:.2f} ms" for name in names) + " CPU)",
              flush=True)
    return r3


def _sweep_and_dynamic4bit(quick: bool, max_call_s: float, result: dict):
    """4 + 5. the M sweep, crossover, Dynamic4bit slowdown (records for the app and notebooks)."""
    layer = synthetic_bench_layer(N, K, 128)
    ms4 = [1, 8, 64, 512] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    say = lambda d, t, msg: print(f"[4] {d}/{t} {msg}", flush=True)  # noqa: E731
    weight = int4_weight_of(layer)
    recs4 = bench_weight(weight, layer.source_weight, ["w4a8_native", "w4a16_fallback"], ms4,
                         repeats=3, max_call_s=max_call_s, progress=say,
                         layer_name=f"{layer.name} (M sweep)")
    ms5 = [1, 4, 16] if quick else [1, 2, 4, 8, 16, 32]
    recs5 = bench_weight(weight, layer.source_weight, ["vllm_dynamic4bit", "w4a16_fallback", "w4a8_native"],
                         ms5, repeats=3, max_call_s=max_call_s, progress=say,
                         layer_name=f"{layer.name} (Dynamic4bit)")
    clock = "cpu" if torch.get_num_threads() == 1 else "wall"
    cross = crossover(recs4, "w4a8_native", "w4a16_fallback", clock=clock)
    slow = slowdown(recs5, "vllm_dynamic4bit", "w4a16_fallback", clock=clock)
    result["clock"] = clock
    result["crossover_w4a8_native_vs_w4a16_fallback"] = cross.to_dict()
    result["dynamic4bit_slowdown_vs_w4a16_fallback"] = slow.to_dict()
    print(f"[4] crossover M = {cross.m} (ratio {cross.ratio}, separated {cross.separated}, "
          f"holds above {cross.holds_above})", flush=True)
    print(f"[5] Dynamic4bit / W4A16 fallback: {[(m, round(f, 1)) for m, f in slow.points]}", flush=True)
    return recs4 + recs5, cross, slow


VLLM_CPU = {"native": "w4a8_native", "vllm_int4": "vllm_int4_scaled_mm",
            "fallback": "w4a16_fallback", "vllm_wna16": "vllm_cpu_gemm_wna16"}


def _vllm_errors(weight, prep: dict) -> dict:
    """Each path's relative error at M = 32 against its float64 reference (W4A8 on the op's own
    activation codes, W4A16), and int4_scaled_mm_cpu's largest distance from the emulation in
    bf16 ulps (same codes, so only the float32 sums' rounding may differ)."""
    from w4a8_kernels.engine_paths import prepare_int4_scaled_mm, vllm_int4_scaled_mm
    from w4a8_kernels.quant import quantize_per_token_uint8_zp128
    from w4a8_kernels.reference import w4a8_reference_from_quantized, w4a16_reference

    x = torch.randn(32, K, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    u8, xs = quantize_per_token_uint8_zp128(x)
    ref8 = w4a8_reference_from_quantized((u8.to(torch.int16) - 128).to(torch.int8), xs, weight.w_q,
                                         weight.scales, weight.group_size, weight.zeros)
    ref16 = w4a16_reference(x, weight.w_q, weight.scales, weight.group_size, weight.zeros)
    out = {}
    for label, (name, state) in prep.items():
        path = get_path(name)
        y = path.run(path.make_input(x, state), state).double()
        ref = ref16 if path.computes == "w4a16" else ref8
        out[label] = {"rel_err": float((y - ref).norm() / ref.norm()),
                      "reference": f"float64 {path.computes} reference"}
        if name == "vllm_int4_scaled_mm":
            emu = vllm_int4_scaled_mm(x, prepare_int4_scaled_mm(weight.w_q, weight.scales,
                                                                weight.group_size, weight.zeros))
            e = emu.double()
            diff = (y - e).abs()
            # in bf16 ulps of the larger of the two, over outputs above 1/1000 of the largest (a
            # sum near zero differs by float32's rounding, many ulps of itself: the largest
            # difference is also given against the largest output)
            big = torch.maximum(y.abs(), e.abs())
            keep = big >= 1e-3 * ref.abs().max()
            ulps = diff[keep] / torch.pow(2.0, torch.floor(torch.log2(big[keep])) - 7)
            out[label]["vs_emulation"] = {
                "equal_fraction": float((y == e).float().mean()),
                "max_bf16_ulps": float(ulps.max()) if ulps.numel() else 0.0,
                "max_abs_diff_over_max_abs_ref": float(diff.max() / ref.abs().max())}
    return out


def _vllm_cpu_ops(quick: bool, reps: int, result: dict) -> dict:
    """6. vLLM's own CPU ops beside this project's paths, per-channel and group 128."""
    r6: dict = {"unavailable": {}}
    live = {}
    for label, name in VLLM_CPU.items():
        ok, why = get_path(name).probe()
        if ok:
            live[label] = name
        else:
            r6["unavailable"][name] = why
            print(f"[6] {name} cannot run here: {why}", flush=True)
    builds = {}
    for group in (-1, 128):
        weight = int4_weight_of(synthetic_bench_layer(N, K, group))
        prep = {}
        for label, name in live.items():
            t0 = time.perf_counter()
            prep[label] = (name, get_path(name).prepare(weight))  # builds and admits at first use
            if name.startswith("vllm_"):
                builds.setdefault(name, round(time.perf_counter() - t0, 1))
        key = "per_channel" if group == -1 else "group128"
        r6[key] = {"errors_m32": _vllm_errors(weight, prep)}
        for m in ([1, 5, 32] if quick else [1, 4, 5, 16, 32, 128, 512]):
            t = interleaved(prep, m, reps if m <= 128 else 3)
            _note(result, f"vllm_cpu_{key}", m, t)
            row = {f"{label}_cpu_ms": t[label].cpu_median_ms for label in t}
            for a, b in (("vllm_int4", "native"), ("vllm_wna16", "fallback"), ("vllm_wna16", "native")):
                if a in t and b in t:
                    row[f"{a}_over_{b}"] = ratio(t, a, b)
            r6[key][m] = row
            print(f"[6] {key} M={m}: " + ", ".join(f"{k} {v['cpu']:.2f} (wall {v['wall']:.2f})"
                                                 for k, v in row.items() if isinstance(v, dict)),
                  flush=True)
    from w4a8_kernels import vllm_cpu
    # first_prepare_s: this run's first preparation (the build and self-test where it built)
    r6["builds"] = {name: {"first_prepare_s": s, "build": vllm_cpu.build_info(name[5:]),
                           "self_test": vllm_cpu.self_test(name[5:]).__dict__}
                    for name, s in builds.items()}
    return r6


def _merged(path: Path, result: dict, sections: set[str], prov: dict) -> dict:
    """A partial run's result folded into the existing file: the other parts kept, both
    provenances recorded."""
    old = json.loads(path.read_text())
    for key, value in result["ratios"].items():
        old.setdefault("ratios", {})[key] = value
    for key, value in result["timings_ms"].items():
        old.setdefault("timings_ms", {})[key] = value
    for key in ("crossover_w4a8_native_vs_w4a16_fallback", "dynamic4bit_slowdown_vs_w4a16_fallback", "clock"):
        if key in result:
            old[key] = result[key]
    old.setdefault("updates", []).append({"sections": sorted(sections), "provenance": prov,
                                          "seconds": result["seconds"]})
    return old


def main() -> int:
    args = _args()
    sections = set(args.sections.split(","))
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    reps = 3 if args.quick else 7
    prov = host_provenance({"script": "benchmarks/bench_cpu_ratios.py", "n": N, "k": K,
                            "activations": "bfloat16", "weights": "RTN int4 of normal(0, 0.02), bf16 scales"})
    from w4a8_kernels.cpu_w4a8 import rank_engines
    prov["int8_engines_per_channel"] = [list(e) for e in rank_engines(False)]
    prov["int8_engines_grouped"] = [list(e) for e in rank_engines(True)]
    t_start = time.time()
    chan = int4_weight_of(synthetic_bench_layer(N, K, -1))
    g128 = int4_weight_of(synthetic_bench_layer(N, K, 128))
    prep = {
        "native_channel": ("w4a8_native", get_path("w4a8_native").prepare(chan)),
        "native_g128": ("w4a8_native", get_path("w4a8_native").prepare(g128)),
        "group_loop_g128": ("w4a8_group_loop", get_path("w4a8_group_loop").prepare(g128)),
        "int8_mm": ("int8_mm", get_path("int8_mm").prepare(chan)),
        "int8_fbgemm": ("int8_fbgemm", get_path("int8_fbgemm").prepare(chan)),
    }
    engines = {k: getattr(v[1], "engine", None) for k, v in prep.items()}
    prov["engines"] = {k: (e.value if e is not None else None) for k, e in engines.items()}
    result: dict = {"provenance": prov, "ratios": {}, "timings_ms": {}}
    if "1" in sections:
        r1 = _per_channel_vs_int8(prep, [32, 128] if args.quick else [32, 128, 256], reps, result)
        if r1:
            result["ratios"]["per_channel_native_over_int8"] = r1
    if "2" in sections:
        r2 = _group_vs_channel(prep, [128, 512] if args.quick else [128, 512, 2048], reps, result)
        if r2:
            result["ratios"]["group128_over_per_channel"] = r2
    del prep
    if "3" in sections:
        ms3 = [1, 8, 64, 512] if args.quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
        r3 = _fallback_vs_best(g128, ms3, reps, result)
        if r3:
            result["ratios"]["w4a16_fallback_over_best_path"] = r3
    if "4" in sections:
        recs, cross, slow = _sweep_and_dynamic4bit(args.quick, args.max_call_s, result)
    if "6" in sections:
        result["ratios"]["vllm_cpu_ops"] = _vllm_cpu_ops(args.quick, reps, result)
    result["seconds"] = round(time.time() - t_start, 1)
    prov["loadavg_1m_end"] = host_provenance()["loadavg_1m"]
    tag = f"_{args.tag}" if args.tag else ""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"cpu_ratios{tag}.json"
    if sections != {"1", "2", "3", "4"} and path.exists():
        result = _merged(path, result, sections, prov)
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    if "4" in sections:
        write_json(recs, out / f"cpu_sweep_m{tag}.json", prov,
                   extra={"crossover": cross.to_dict(), "dynamic4bit_slowdown": slow.to_dict()})
        write_csv(recs, out / f"cpu_sweep_m{tag}.csv", prov)
    print(f"wrote {path} in {round(time.time() - t_start, 1)} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
