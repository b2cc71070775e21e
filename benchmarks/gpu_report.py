"""Headline figures from benchmarks/results/h200_bench.json, without a GPU.

    python benchmarks/gpu_report.py [path/to/h200_bench.json]

Prints issue 15's goals against the measured records (every ratio, the peers' too), the
steps in time for twice the tokens, the integer-rescale variant beside the fp32 path, the
W4A8 / W4A16 crossover per shape, and the per-shard TP timings when
h200_tp_shards.json lies beside the bench file. Reads through the core's one reader
(`workbench.results`). `load_records`, `steps` and `crossover_m` are reusable.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "results" / "h200_bench.json"
ALIGNED = [(4096, 4096), (8192, 8192), (28672, 8192)]
OURS = ("w4a8_native", "w4a8_prequant", "w4a16_fallback", "w4a8_int_rescale")
HBM_GBS = 4800.0  # datasheet; the in-graph copy reads 2.7 TB/s (a copy-engine node)


def load_records(path: Path = DEFAULT) -> tuple[dict, dict]:
    """(provenance, {(path, group_size, n, k, m): ResultRecord})."""
    from workbench.results import load_results
    res = load_results(path)
    return res.provenance, {(r.path, r.group_size, r.n, r.k, r.m): r for r in res.records}


def t(recs: dict, path: str, g: int, n: int, k: int, m: int) -> float | None:
    r = recs.get((path, g, n, k, m))
    return r.median_us if r else None


def shapes(recs: dict) -> list[tuple[int, int]]:
    return sorted({(n, k) for (p, _, n, k, _) in recs if p == "w4a16_fallback"},
                  key=lambda s: (s not in ALIGNED, s))


def group_of(k: int) -> int:
    return 128 if k % 128 == 0 else 64


def roofline_us(path: str, n: int, k: int, m: int, ceilings: dict) -> float:
    """Bound from the ceilings measured in the same run (cuBLAS 8192^3 rates) and HBM."""
    peak = ceilings["cublas_bf16_8192_tflops"] if path == "w4a16_fallback" else \
        ceilings["cublas_int8_8192_tops"]
    return max(2 * m * n * k / (peak * 1e6), (n * k / 2 + m * k * 2 + m * n * 2) / (HBM_GBS * 1e3))


def steps(recs: dict, ceilings: dict, m_max: int = 256) -> list[dict]:
    """Every step M -> 2M (powers of two, 2M <= m_max) of this project's kernels: the time
    ratio, and that ratio over the roofline's own ratio (2 where both M are math-bound)."""
    out = []
    for (path, g, n, k, m), r in recs.items():
        if path not in OURS or m & (m - 1) or 2 * m > m_max:
            continue
        r2 = recs.get((path, g, n, k, 2 * m))
        if r2 is None:
            continue
        ratio = r2.median_us / r.median_us
        ideal = roofline_us(path, n, k, 2 * m, ceilings) / roofline_us(path, n, k, m, ceilings)
        out.append({"path": path, "g": g, "n": n, "k": k, "m": m, "ratio": ratio,
                    "over_roofline": ratio / ideal})
    return out


def crossover_m(recs: dict, n: int, k: int, g: int, fast: str = "w4a8_native",
                slow: str = "w4a16_fallback"):
    """Smallest M from which `fast` beats `slow` at every larger measured M (None if never)."""
    ms = sorted({key[4] for key in recs if key[2:4] == (n, k) and key[0] == fast and key[1] == g})
    cross = None
    for m in reversed(ms):
        a, b = t(recs, fast, g, n, k, m), t(recs, slow, g, n, k, m)
        if a is None or b is None or a >= b:
            break
        cross = m
    return cross


def _ratios(recs, path, g, base, base_g, pts):
    """{(n, k, m): time(path) / time(base)} where both were measured."""
    out = {}
    for n, k, m in pts:
        a, b = t(recs, path, g(k) if callable(g) else g, n, k, m), t(recs, base, base_g, n, k, m)
        if a and b:
            out[(n, k, m)] = a / b
    return out


def _span(r: dict) -> str:
    if not r:
        return "-"
    v = list(r.values())
    gm = math.exp(sum(map(math.log, v)) / len(v))
    lo, hi = min(r, key=r.get), max(r, key=r.get)
    return (f"{min(v):.2f}-{max(v):.2f} (geomean {gm:.2f}; min at {lo[0]}x{lo[1]} M={lo[2]}, "
            f"max at {hi[0]}x{hi[1]} M={hi[2]})")


def _memory_bound(recs: dict, sh: list, ms: list) -> list[str]:
    out = ["Memory-bound middle, every shape: time ratio (<= goal passes)"]
    for label, path_, base, lo, hi, goal in [
        ("W4A16 per-channel / cuBLAS bf16, M 16-64", "w4a16_fallback", "bf16_dense", 16, 64, 0.6),
        ("W4A16 per-channel / cuBLAS bf16, M 128-512", "w4a16_fallback", "bf16_dense", 128, 512, 1.0),
        ("W4A16 g128 (g64 where K needs) / cuBLAS bf16, M 16-64", "w4a16_fallback", "bf16_dense", 16, 64, 0.6),
        ("W4A16 g128 (g64 where K needs) / cuBLAS bf16, M 128-512", "w4a16_fallback", "bf16_dense", 128, 512, 1.0),
        ("W4A8 per-channel pre-quantized / cuBLAS int8, M 32-64", "w4a8_prequant", "int8_mm", 32, 64, 0.75),
        ("W4A8 per-channel pre-quantized / cuBLAS int8, M 128-512", "w4a8_prequant", "int8_mm", 128, 512, 1.0),
        ("W4A8 g128 (g64) pre-quantized / cuBLAS int8, M 32-64", "w4a8_prequant", "int8_mm", 32, 64, 0.75),
        ("W4A8 g128 (g64) pre-quantized / cuBLAS int8, M 128-512", "w4a8_prequant", "int8_mm", 128, 512, 1.0),
    ]:
        g = -1 if "per-channel" in label else group_of
        r = _ratios(recs, path_, g, base, -1, [(n, k, m) for n, k in sh for m in ms if lo <= m <= hi])
        ok = r and max(r.values()) <= goal
        out.append(f"  {label} (goal <= {goal}): {_span(r)} {'MET' if ok else 'MISSED'}")
    return out


def _steps(recs: dict, ceil: dict) -> list[str]:
    st = steps(recs, ceil)
    lit = [s for s in st if s["ratio"] > 1.5]
    adj = sorted((s for s in st if s["over_roofline"] > 1.5), key=lambda s: -s["over_roofline"])
    cub = sum(1 for (p, g, n, k, m), r in recs.items() if p in ("bf16_dense", "int8_mm")
              and not m & (m - 1) and 2 * m <= 256 and (r2 := recs.get((p, g, n, k, 2 * m)))
              and r2.median_us / r.median_us > 1.5)
    out = [f"Steps M -> 2M up to 256 of this project's kernels: {len(st)} steps, {len(lit)} "
           f"over 1.5x in time (cuBLAS bf16/int8 themselves: {cub}, math-bound doubling), "
           f"{len(adj)} over 1.5x the roofline's own step (measured ceilings, HBM 4.8 TB/s)"]
    for s in adj[:8]:
        out.append(f"  {s['path']} g{s['g']} {s['n']}x{s['k']} M {s['m']} -> {2 * s['m']}: "
                   f"{s['ratio']:.2f}x ({s['over_roofline']:.2f}x the roofline's)")
    return out


def _prefill(recs: dict, ms: list) -> list[str]:
    big = [(n, k, m) for n, k in ALIGNED for m in ms if m >= 1024]
    out = ["Prefill, M >= 1024, aligned shapes: speed ratio (baseline time / ours; >= goal passes)"]
    for label, path_, g, base, bg, goal in [
        ("W4A8 g128 vs cuBLAS int8", "w4a8_prequant", 128, "int8_mm", -1, 1.0),
        ("W4A8 g128 vs per-channel W4A8", "w4a8_prequant", 128, "w4a8_prequant", -1, 0.9),
        ("W4A8 g128 integer rescale vs cuBLAS int8", "w4a8_int_rescale", 128, "int8_mm", -1, None),
        ("W4A8 per-channel vs cuBLAS int8", "w4a8_prequant", -1, "int8_mm", -1, None),
        ("W4A8 per-channel vs plain Triton int8", "w4a8_prequant", -1, "triton_int8_mm", -1, None),
        ("W4A16 per-channel vs cuBLAS bf16", "w4a16_fallback", -1, "bf16_dense", -1, 0.85),
        ("W4A16 g128 vs cuBLAS bf16", "w4a16_fallback", 128, "bf16_dense", -1, None),
    ]:
        r = {key: 1 / v for key, v in _ratios(recs, path_, g, base, bg, big).items()}
        verdict = "" if goal is None else (" MET" if r and min(r.values()) >= goal else " MISSED")
        out.append(f"  {label}{'' if goal is None else f' (goal >= {goal})'}: {_span(r)}{verdict}")
    return out


def _decode(recs: dict, sh: list, ms: list) -> list[str]:
    out = ["Decode: time / (1.5 x 4-bit weight-streaming bound) at M <= 16 (<= 1 passes), "
           "speedup over tinygemm at M = 1"]
    for n, k in sh:
        g = group_of(k)
        for path_, gg in (("w4a8_prequant", -1), ("w4a8_native", -1), ("w4a8_prequant", g),
                          ("w4a16_fallback", -1), ("w4a16_fallback", g)):
            vals = [recs[(path_, gg, n, k, m)] for m in ms if m <= 16 and (path_, gg, n, k, m) in recs]
            if not vals:
                continue
            worst = max(r.median_us / (1.5 * r.detail["weight_stream_bound_us"]) for r in vals)
            tiny, mine = t(recs, "tinygemm_w4a16", 128, n, k, 1), t(recs, path_, gg, n, k, 1)
            sp = f"{tiny / mine:.2f}" if tiny and mine else "-"
            out.append(f"  {n}x{k} {path_:15s} g{gg:<4d}: {worst:.2f}, M=1 {mine:.1f} us, vs tinygemm {sp}")
    return out


def _peers(recs: dict) -> list[str]:
    out = ["Peers, same run and timing (peer time / ours: > 1 ours faster)"]
    for label, mine, g, peer, pg in [
        ("W4A16 g128 vs gemlite A16W4", "w4a16_fallback", 128, "peer_w4a16", 128),
        ("W4A8 g128 (with quantizer) vs gemlite A8W4 (int8 x int4)", "w4a8_native", 128, "peer_w4a8", 128),
        ("W4A8 per-channel (with quantizer) vs gemlite A8W8 (int8)", "w4a8_native", -1, "peer_w8a8", -1),
        ("W4A16 g128 vs tinygemm", "w4a16_fallback", 128, "tinygemm_w4a16", 128),
    ]:
        pts = sorted((n, k, m) for (p, gg, n, k, m) in recs if p == peer and gg == pg)
        r = _ratios(recs, peer, pg, mine, g, pts)
        out.append(f"  {label}: {_span(r)}")
        for n, k in sorted({(n, k) for n, k, _ in r}):
            row = ", ".join(f"M={m} {r[(n, k, m)]:.2f}" for nn, kk, m in sorted(r) if (nn, kk) == (n, k))
            out.append(f"    {n}x{k}: {row}")
    return out


def _int_rescale(recs: dict, sh: list, ms: list, check: Path) -> list[str]:
    """The integer-rescale variant's speed beside the fp32 path, and both errors where
    h200_check.json lies beside the bench file."""
    r = {}
    for n, k in sh:
        g = group_of(k)
        for m in ms:
            a, b = t(recs, "w4a8_int_rescale", g, n, k, m), t(recs, "w4a8_prequant", g, n, k, m)
            if a and b:
                r[(n, k, m)] = b / a
    out = [f"Integer rescale (Marlin's numerics) speed vs the fp32-rescale path, grouped: {_span(r)}"]
    if check.exists():
        rows = json.loads(check.read_text()).get("int_rescale_error", [])
        if rows:
            f = [x["fp32_rescale_rel_fro"] for x in rows]
            i = [x["int_rescale_rel_fro"] for x in rows]
            out.append(f"  error vs float64 reference (rel. Frobenius, {len(rows)} points): fp32 rescale "
                       f"{min(f):.2e}-{max(f):.2e}, integer rescale {min(i):.2e}-{max(i):.2e}")
    return out


def _crossovers(recs: dict, sh: list) -> list[str]:
    out = ["Crossover: smallest M from which W4A8 (with its quantizer) stays faster than W4A16"]
    for n, k in sh:
        g = group_of(k)
        out.append(f"  {n}x{k}: per-channel M >= {crossover_m(recs, n, k, -1)}, "
                   f"g{g} M >= {crossover_m(recs, n, k, g)}")
    return out


def report(path: Path = DEFAULT) -> str:
    prov, recs = load_records(path)
    ceil = prov.get("ceilings") or {"cublas_bf16_8192_tflops": 789.0, "cublas_int8_8192_tops": 963.0}
    sh = shapes(recs)
    ms = sorted({key[4] for key in recs})
    out = [f"{prov.get('device')} driver {prov.get('driver')} torch {prov.get('torch')} triton "
           f"{prov.get('triton')} {prov.get('date_utc')} commit "
           f"{str(prov.get('commit'))[:10]}; ceilings {ceil}", ""]
    sections = [_memory_bound(recs, sh, ms), _steps(recs, ceil), _prefill(recs, ms), _decode(recs, sh, ms),
                _peers(recs), _int_rescale(recs, sh, ms, path.parent / "h200_check.json"),
                _crossovers(recs, sh), humming_report(recs)]
    tp = path.parent / "h200_tp_shards.json"
    if tp.exists():
        sections.append([tp_report(tp)])
    for i, lines in enumerate(sections):
        out += ([""] if i else []) + lines
    return "\n".join(out)


# Every path's time against Humming W4A16 (what vLLM runs for W4A16 with Machete disabled).
HUMMING = "vllm_humming"
# (label, path, its group beside Humming at group hg: None skips that group)
AGAINST_HUMMING = [
    ("Humming int8 activations (vLLM's, per-channel)", "vllm_humming_int8",
     lambda hg: -1 if hg == -1 else None),
    ("Humming int8 forced, grouped (not a vLLM path)", "vllm_humming_int8_forced",
     lambda hg: None if hg == -1 else hg),
    ("Machete (vLLM's W4A16 default on Hopper)", "vllm_machete", lambda hg: hg),
    ("this project's W4A8 native", "w4a8_native", lambda hg: hg),
    ("this project's W4A8 pre-quantized", "w4a8_prequant", lambda hg: hg),
    ("this project's W4A16 fallback", "w4a16_fallback", lambda hg: hg),
    ("cuBLAS bf16 (dequantized weight)", "bf16_dense", lambda hg: -1),
    ("tinygemm W4A16 g128", "tinygemm_w4a16", lambda hg: 128 if hg == 128 else None),
    ("gemlite A16W4 g128", "peer_w4a16", lambda hg: 128 if hg == 128 else None),
    ("gemlite A8W4 g128", "peer_w4a8", lambda hg: 128 if hg == 128 else None),
]


def humming_report(recs: dict) -> list[str]:
    """time(path) / time(Humming W4A16 at the same group size) at every shape and M both hold
    (< 1: faster than Humming), with the JIT time of vLLM's kernels (first call less one call)."""
    hum = {(g, n, k, m) for (p, g, n, k, m) in recs if p == HUMMING}
    if not hum:
        return ["Against Humming W4A16: no vllm_humming records in this run"]
    out = ["Against Humming W4A16 (time / Humming's at the same group size; < 1 faster)"]
    for hg in sorted({g for g, *_ in hum}):
        pts = sorted((n, k, m) for (gg, n, k, m) in hum if gg == hg)
        for label, path_, group_for in AGAINST_HUMMING:
            g = group_for(hg)
            r = {} if g is None else _ratios(recs, path_, g, HUMMING, hg, pts)
            if r:
                out.append(f"  {'per-channel' if hg == -1 else f'g{hg}'}: {label}: {_span(r)}")
    errs: dict[str, list[float]] = {}
    for (p, *_), r in recs.items():
        e = (r.detail or {}).get("engine", {}).get("rel_err_f32") if isinstance(r.detail, dict) else None
        if e is not None:
            errs.setdefault(p, []).append(e)
    for p, v in sorted(errs.items()):
        out.append(f"  {p}: relative error against the float32 product {min(v):.1e}-{max(v):.1e}")
    jit = [r.detail.get("engine", {}).get("jit_s") for (p, *_), r in recs.items()
           if p.startswith("vllm_") and isinstance(r.detail, dict)]
    jit = [v for v in jit if v is not None]
    if jit:
        out.append(f"  JIT compile of a first call (apart from run time): {min(jit):.2f}-"
                   f"{max(jit):.2f} s over {len(jit)} records, {sum(jit):.1f} s in all")
    return out


def tp_report(path: Path) -> str:
    """Per rank at TP 1/2/4/8: gate_up + down time (us) and the efficiency t1 / (tp * t_tp)."""
    from workbench.results import load_results
    rows: dict = {}
    for r in load_results(path).records:
        rows.setdefault((r.path, r.group_size, r.m, r.detail["tp"]), {})[r.detail["layer"]] = r.median_us
    out = ["Qwen2-72B MLP per rank, one H200 (the collective needs several GPUs: not measured): "
           "gate_up + down us (efficiency vs TP 1)"]
    for path_ in ("w4a8_native", "w4a16_fallback"):
        for m in sorted({key[2] for key in rows}):
            base = rows.get((path_, -1, m, 1), {})
            t1 = sum(base.values()) if len(base) == 2 else None
            cells = []
            for tp in (1, 2, 4, 8):
                v = rows.get((path_, -1, m, tp), {})
                if len(v) == 2:
                    s = sum(v.values())
                    cells.append(f"TP{tp} {s:.1f}" + (f" ({t1 / (tp * s):.2f})" if t1 else ""))
            out.append(f"  {path_} per-channel M={m}: " + ", ".join(cells))
    return "\n".join(out)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT))
