"""Validate the performance model; writes benchmarks/results/perf_validation.json.

    python benchmarks/validate_perf.py [--skip-host | --cpu-only | --published-only] [--rounds R]
                                       [--results path/to/h200_bench.json]

1. Leave-one-shape-out on the H200 records: for each (N, K), calibrate on the other shapes'
   records, predict the held-out shape's points for the four paths (w4a8_native,
   w4a16_fallback, bf16_dense, int8_mm); |predicted / measured - 1| and band coverage.
2. This CPU: bench the calibration shapes and other shapes in one process, interleaved
   (rounds in a random shape order, the load recorded), fit the calibration on its shapes
   only and compare its predictions with the others; `--cpu-only` runs just this (about a
   minute) and replaces the file's "host" part.
3. Published kernel figures (workbench/perf/published.json) against the model, each point
   left out of its family's calibration and of every efficiency and rate read from points, and
   checked without any sustained rate read from its own source. Each is predicted in its
   benchmark's regime (workbench/perf/regime.py: the L2 where the source re-reads one weight
   copy that fits the part's L2, DRAM otherwise, as in a model forward); the points whose
   measured time beats half their DRAM read are flagged `l2_resident` and summarised apart. A
   part with no model but its roofline is checked as a bound. `--published-only` re-runs just
   this (seconds).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.perf.fit import error_stats  # noqa: E402
from workbench.perf.calibrate import (H200_RESULTS, fit_records, key_for, measured_copy_bw, point_for,  # noqa: E402
                                      records_of)
from workbench.perf.hardware import hardware_for  # noqa: E402
from workbench.perf.predict import prediction_band  # noqa: E402
from workbench.results import load_results  # noqa: E402

FOUR = ("w4a8_native", "w4a16_fallback", "bf16_dense", "int8_mm")
HUMMING = ("vllm_humming", "vllm_humming_int8")
FITTED = ("w4a8_native", "w4a8_prequant", "w4a16_fallback", "bf16_dense", "int8_mm", "triton_int8_mm",
          "quantizer")
# Host shapes the calibration never times (its own are workbench.perf.cpu.CALIBRATION_SHAPES).
# the held-out shapes: two large, and a small one where the per-call floor is most of a call
HOST_SHAPES = ((4096, 4096), (5120, 2560), (96, 160))
HOST_MS = (1, 8, 48, 128)
HOST_PATHS = ("w4a8_native", "w4a16_fallback", "bf16_dense", "dense")


def _legacy_configs(path: Path, recs: list) -> list:
    """Records of the pre-schema H200 file with the config each launched, rebuilt from the
    tables the file carries (its M buckets: <= 16, <= 512, larger), as the kernels then fitted
    them (grouped W4A8 block_k = g; W4A16 block_k <= g; block_k dividing Kp / 2)."""
    from dataclasses import replace as _replace

    from w4a8_kernels.triton_pack import padded_k
    from w4a8_kernels.triton_runtime import TileConfig, fit_block_k

    tables = json.loads(path.read_text()).get("tables")
    if not tables:
        return recs
    out = []
    for r in recs:
        kind = {"w4a8_native": "w4a8", "w4a8_prequant": "w4a8", "w4a16_fallback": "w4a16"}.get(r.path)
        if kind is None or r.config is not None:
            out.append(r)
            continue
        bucket = "decode" if r.m <= 16 else "mid" if r.m <= 512 else "prefill"
        per_channel = r.group_size in (-1, r.k)
        cfg = TileConfig(**tables[kind][f"{bucket}|{'channel' if per_channel else 'group'}"])
        half_k = padded_k(r.k, 128 if per_channel else r.group_size) // 2
        if not per_channel and kind == "w4a8":
            cfg = _replace(cfg, block_k=r.group_size)
        elif not per_channel and cfg.block_k > r.group_size:
            cfg = _replace(cfg, block_k=r.group_size)
        cfg = fit_block_k(cfg, half_k) if per_channel or kind == "w4a16" else cfg
        from dataclasses import asdict

        out.append(_replace(r, config=asdict(cfg)))
    return out


def h200_loso(path: Path, fitted: tuple[str, ...] = FITTED, checked: tuple[str, ...] = FOUR) -> dict:
    """Every shape of a results file held out in turn: the `checked` paths' records of it
    predicted from the `fitted` paths' records of the other shapes."""
    from workbench.perf.calibrate import launch_config

    res = load_results(path)
    hw = hardware_for(res.platform or "sm90-h200")
    recs = _legacy_configs(path, records_of(res, fitted))
    shapes = sorted({(r.n, r.k) for r in recs})
    points = []
    for shape in shapes:
        fits, tiles = fit_records([r for r in recs if (r.n, r.k) != shape], hw.units, hw.mem_gbs * 1e3, hw.llc_mb,
                                  measured_copy_bw(res))
        for r in recs:
            if (r.n, r.k) != shape or r.path not in checked:
                continue
            fit = fits.get(key_for(r.path, r.m, r.n, r.k, r.group_size, launch_config(r)))
            if fit is None:
                points.append({"path": r.path, "n": r.n, "k": r.k, "group_size": r.group_size, "m": r.m,
                               "measured_us": r.median_us, "predicted_us": None})
                continue
            us = fit.predict(point_for(r.path, r.m, r.n, r.k, r.group_size, hw.units, tile=tiles.get(key_for(r.path, r.m, r.n, r.k, r.group_size)),
                                       config=launch_config(r), l2_mb=hw.llc_mb))
            lo, hi = prediction_band(us, fit.err_lo, fit.err_hi, "measured")
            points.append({"path": r.path, "n": r.n, "k": r.k, "group_size": r.group_size, "m": r.m,
                           "measured_us": r.median_us, "predicted_us": round(us, 3), "low_us": round(lo, 3),
                           "high_us": round(hi, 3), "err": round(us / r.median_us - 1, 4),
                           "in_band": lo <= r.median_us <= hi})
    done = [p for p in points if p["predicted_us"] is not None]
    out = {"results": path.name, "results_provenance": res.provenance, "shapes": shapes,
           "all": {**error_stats([p["err"] for p in done]),
                   "band_coverage": round(sum(p["in_band"] for p in done) / max(len(done), 1), 4),
                   "band_width_median": _band_width(done)},
           "by_path": {}, "unpredicted": len(points) - len(done), "points": points}
    for path_name in checked:
        ps = [p for p in done if p["path"] == path_name]
        out["by_path"][path_name] = {**error_stats([p["err"] for p in ps]),
                                     "band_coverage": round(sum(p["in_band"] for p in ps) / max(len(ps), 1), 4),
                                     "band_width_median": _band_width(ps)}
    return out


def _band_width(points: list) -> float | None:
    """The median band width, high / low, of predicted points."""
    import statistics

    ws = [p["high_us"] / p["low_us"] for p in points if p.get("low_us")]
    return round(statistics.median(ws), 3) if ws else None


def host_check(rounds: int = 2) -> dict:
    """Calibrate and measure in one process, interleaved: each round benches the calibration
    shapes and the held-out shapes in a fresh random order (load falls on both alike), with
    the load average recorded per round. The calibration is fitted on its shapes' samples
    only, then predicts the held-out ones; it is cached as this machine's calibration."""
    import torch

    from workbench.bench import host_provenance
    from workbench.perf.cpu import (SLOW_PATHS, CALIBRATION_MS, CALIBRATION_SHAPES, FLOOR_SHAPES, bench_paths,
                                    measure_throughputs, engine_steps, measure_host, plan_for)

    t0 = time.perf_counter()
    load = [{"round": "start", "loadavg_1m": round(os.getloadavg()[0], 2)}]
    thr = measure_throughputs()
    steps = engine_steps()
    cal_shapes, held = {*CALIBRATION_SHAPES, *FLOOR_SHAPES}, set(HOST_SHAPES)
    assert held.isdisjoint(cal_shapes)

    def on_round(r: int, seconds: float) -> None:
        load.append({"round": r, "seconds": round(seconds, 1), "loadavg_1m": round(os.getloadavg()[0], 2)})

    # Every shape benches the same paths (the calibration's and the fallback whole, which
    # chooses its variant per M itself): a call's neighbours in the bench's shuffled rounds
    # set how cold its caches are (dense read 25% faster among four paths than among nine).
    # vLLM's slow Dynamic4bit loop is left out of the held-out shapes (not checked).
    paths = sorted(set(bench_paths()) | set(HOST_PATHS))
    plan = {**plan_for((*CALIBRATION_SHAPES, *FLOOR_SHAPES), CALIBRATION_MS, paths),
            **plan_for(HOST_SHAPES, HOST_MS, [p for p in paths if p not in SLOW_PATHS])}
    samples = measure_host(plan, rounds=rounds, steps=steps, on_round=on_round)
    return {"calibration_shapes": CALIBRATION_SHAPES, "validation_shapes": HOST_SHAPES,
            "calibration_ms": CALIBRATION_MS, "validation_ms": HOST_MS, "rounds": rounds,
            "statistic": "per point, its fastest call over all rounds (bench min_ms, 3 repeats a round, "
                         "15 on layers of at most 256 x 256)",
            "engine_steps": steps, "seconds": round(time.perf_counter() - t0, 1), "load": load,
            "provenance": host_provenance(),
            **score_host(samples, cal_shapes, held, steps, thr, torch.get_num_threads(),
                         time.perf_counter() - t0, {**host_provenance(), "from": "benchmarks/validate_perf.py"})}


def score_host(samples: list, cal_shapes: set, held: set, steps: tuple, thr: dict, threads: int,
               seconds: float, prov: dict, save: bool = True) -> dict:
    """The calibration fitted on its shapes' samples only, its predictions against the held-out
    shapes' samples, and both kept in the result (the fit is cached as this machine's)."""
    from workbench.perf.cpu import bench_paths, fit_host, host_key, save_host_calibration
    from workbench.perf.predict import predict_cpu

    fitted = set(bench_paths())  # what a live calibration fits (the fallback by its variants)
    cal = fit_host([s for s in samples if (s.n, s.k) in cal_shapes and
                    (s.path in fitted or s.path.startswith("w4a8_native@"))], host_key(), thr,
                   threads, seconds, prov, steps)
    if save:
        save_host_calibration(cal)
    measured = [s for s in samples if (s.n, s.k) in held and
                (s.path in HOST_PATHS or s.path.startswith("w4a8_native@"))]
    points = []
    for s in measured:
        path = "w4a8_native" if s.path.startswith("w4a8_native") else s.path
        p = predict_cpu(None, path, s.m, s.n, s.k, 128, "host", cal=cal)
        if p.predicted_us is None:
            continue
        points.append({"path": path, "kernel": p.kernel, "n": s.n, "k": s.k, "m": s.m,
                       "measured_us": round(s.us, 2), "predicted_us": round(p.predicted_us, 2),
                       "err": round(p.predicted_us / s.us - 1, 4), "in_band": p.low_us <= s.us <= p.high_us})
    by_path = {path: {**error_stats([p["err"] for p in points if p["path"] == path]),
                      "band_coverage": _coverage([p for p in points if p["path"] == path])}
               for path in sorted({p["path"] for p in points})}
    worst = max((max(p["predicted_us"] / p["measured_us"], p["measured_us"] / p["predicted_us"]) for p in points),
                default=None)
    return {"measured": {"stream_gbs": round(cal.stream_gbs, 2), "fp32_tflops": round(cal.fp32_tflops, 4),
                         "bf16_tflops": round(cal.bf16_tflops, 4), "int8_tops": round(cal.int8_tops, 4)},
            **error_stats([p["err"] for p in points]), "worst_factor": None if worst is None else round(worst, 3),
            "band_coverage": _coverage(points), "by_path": by_path, "points": points,
            # the fit and every sample behind it: a CPU class's committed calibration
            # (workbench.perf.cpu.class_calibration) and a refit (--refit) read them from here
            "calibration": cal.to_json(),
            "samples": [{"path": s.path, "n": s.n, "k": s.k, "m": s.m, "us": round(s.us, 3),
                         "rounds": s.rounds} for s in samples]}


def refit_host(path: Path) -> dict:
    """A validation file's CPU check scored again from its own samples by this model (the
    timings are the run's; the fit and the predictions are this code's)."""
    from workbench.perf.cpu import Sample

    doc = json.loads(path.read_text())
    host = doc["host"]
    cal = host["calibration"]
    samples = [Sample(**s) for s in host["samples"]]
    cal_shapes = {tuple(s) for s in host["calibration_shapes"]}
    from workbench.perf.cpu import FLOOR_SHAPES

    cal_shapes |= {s for s in FLOOR_SHAPES if any((x.n, x.k) == s for x in samples)}
    thr = {k: cal[k] for k in ("stream_gbs", "fp32_tflops", "bf16_tflops", "int8_tops")}
    steps = tuple(tuple(x) for x in host["engine_steps"])
    host.update(score_host(samples, cal_shapes, {tuple(s) for s in host["validation_shapes"]}, steps, thr,
                           cal["threads"], cal["seconds"], cal["provenance"], save=False))
    host["refit"] = {"commit": _commit(), "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                     "why": "the run's samples fitted and scored again by this commit's model"}
    return doc


def _coverage(points: list) -> float:
    return round(sum(p["in_band"] for p in points) / max(len(points), 1), 4)


def _held_out_rates(hw, source: str):
    """The part with every sustained rate that was read from `source` itself left out, so a
    published point never checks a rate taken from its own table."""
    from dataclasses import replace

    own = {t for t, link in (hw.sustained.get("links") or {}).items() if link == source}
    if not own:
        return hw, ()
    return replace(hw, sustained={t: v for t, v in hw.sustained.items() if t not in own}), tuple(sorted(own))


def _l2_resident(p: dict, hw, measured_us: float) -> bool:
    """The source re-reads one weight copy every timed call, that weight fits in the part's
    L2, and reading it from DRAM would take at least half the measured time: the call's
    weight stream can come from the L2, which a model forward's never does."""
    from workbench.perf.families import FAMILIES

    nbytes = p["n"] * p["k"] * FAMILIES[p["family"]].weight_bits / 8
    dram_us = nbytes / (hw.mem_gbs * 1e3)
    return bool(p.get("weight_reused")) and nbytes <= hw.llc_mb * 1e6 and dram_us >= 0.5 * measured_us


def published_table() -> dict:
    from workbench.perf.families import point_us, published_points
    from workbench.perf.predict import (eta_of_point, predict_dense, predict_family, predict_gpu, calibrate_gpu,
                                        regime_of_point)

    rows, bounds = [], []
    for p in published_points():
        hw = hardware_for(p["part"])
        meas = point_us(p, lambda part, n, k, m: predict_gpu(hardware_for(part), "bf16_dense", m, n, k, -1).predicted_us)
        fam = p["family"]
        regime = regime_of_point(p, hw)  # the source's benchmark condition, not its time
        held = ()
        if fam.startswith("dense"):
            hw_eval, held = _held_out_rates(hw, p["source"])
            src_eval, held_src = _held_out_rates(hardware_for(calibrate_gpu().platform), p["source"])
            held = tuple(sorted({*(f"{hw.preset} {t}" for t in held), *(f"{src_eval.preset} {t}" for t in held_src)}))
            got = predict_dense(hw_eval, fam, p["m"], p["n"], p["k"], src=src_eval, exclude=p, regime=regime)
            if got.basis == "roofline":  # a bound, not a cost: checked as one
                bounds.append({**p, "measured_us": round(meas, 2), "roofline_us": round(got.predicted_us, 2),
                               "holds": bool(meas >= got.predicted_us), "why": got.note})
                continue
            pred, band = got.predicted_us, (got.low_us, got.high_us)
            how = f"{got.path} ({got.basis}): {got.note}; this point left out of every rate and efficiency read from points"
            if held:  # what the rate taken from this very table gives: in-sample, no check
                own = predict_dense(hw, fam, p["m"], p["n"], p["k"], exclude=p, regime=regime).predicted_us
                p = {**p, "err_with_own_rate": round(own / meas - 1, 4)}
        else:
            got = predict_family(hw, fam, p["m"], p["n"], p["k"], p["group_size"], exclude=p, regime=regime)
            pred = got[0] if got else None
            band = (got[1], got[2]) if got else None
            how = f"family {fam}, this point left out of its calibration; {regime.sentence}"
        rows.append({**p, "measured_us": round(meas, 2), "predicted_us": None if pred is None else round(pred, 2),
                     "err": None if pred is None else round(pred / meas - 1, 4), "model": how,
                     "regime": str(regime), "sustained_held_out": list(held),
                     "l2_resident": _l2_resident(p, hw, meas),
                     "in_band": None if band is None else bool(band[0] <= meas <= band[1]),
                     "implied_eta": None if fam.startswith("dense") else eta_of_point(p)})
    done = [r for r in rows if r["err"] is not None]

    def summary(rs):
        return {**error_stats([r["err"] for r in rs]),
                "band_coverage": round(sum(bool(r["in_band"]) for r in rs) / max(len(rs), 1), 4)}

    def by(key, rs=done):
        return {v: summary([r for r in rs if r[key] == v]) for v in sorted({r[key] for r in rs})}

    every = rows + bounds
    return {"n_points": len(every), "n_sources": len({r["source"] for r in every}),
            "parts": sorted({r["part"] for r in every}), "n_costed": len(done), **summary(done),
            "without_l2_resident": summary([r for r in done if not r["l2_resident"]]),
            "without_l2_resident_by_part": by("part", [r for r in done if not r["l2_resident"]]),
            "l2_resident": summary([r for r in done if r["l2_resident"]]),
            "l2_resident_by_part": by("part", [r for r in done if r["l2_resident"]]),
            "by_regime": by("regime"),
            "rate_held_out": {**summary([r for r in done if r["sustained_held_out"]]),
                              "in_sample_with_own_rate": error_stats(
                                  [r["err_with_own_rate"] for r in done if "err_with_own_rate" in r])},
            "by_part": by("part"), "by_family": by("family"), "by_source": by("source"),
            "roofline_bounds": {"n": len(bounds), "measured_at_or_above": sum(b["holds"] for b in bounds),
                                "parts": sorted({b["part"] for b in bounds})},
            "rows": rows, "bound_rows": bounds}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=H200_RESULTS)
    ap.add_argument("--skip-host", action="store_true", help="leave out the CPU check (CI)")
    ap.add_argument("--cpu-only", action="store_true",
                    help="only the CPU check (about a minute), merged into the existing --out file")
    ap.add_argument("--published-only", action="store_true",
                    help="only the published-figures check (seconds), merged into the existing --out file")
    ap.add_argument("--engines-only", action="store_true",
                    help="only the check of vLLM's own kernels (Humming) on their H200 records, merged "
                         "into the existing --out file; writes their committed calibration")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the CPU check")
    ap.add_argument("--refit", type=Path, metavar="FILE",
                    help="score a validation file's CPU check again from its own samples with this model "
                         "(rewrites FILE's host part)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "perf_validation.json")
    args = ap.parse_args()
    if args.cpu_only and args.skip_host:
        ap.error("--cpu-only and --skip-host leave nothing to run")
    if args.published_only and (args.cpu_only or args.skip_host):
        ap.error("--published-only runs one part alone: not with --cpu-only or --skip-host")
    if not 1 <= args.rounds <= 20:
        ap.error(f"--rounds {args.rounds}; accepted: 1 to 20")
    t = time.perf_counter()
    prov = {"script": "benchmarks/validate_perf.py", "commit": _commit(),
            "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "loadavg_1m": os.getloadavg()[0]}
    if args.refit:
        doc = refit_host(args.refit)
        args.refit.write_text(json.dumps(doc, indent=1) + "\n")
        _print_host(doc["host"])
        return
    if args.engines_only:  # the other parts stay as the file has them
        from workbench.perf.calibrate import ENGINE_FILES, RESULTS_DIR, write_committed_calibration

        doc = json.loads(args.out.read_text()) if args.out.is_file() else {}
        from workbench.perf.calibrate import H100_RESULTS

        # the H200's engine files, then the H100's own: its main file holds this project's
        # kernels, the libraries and Humming together
        files = [(RESULTS_DIR / name, paths, paths) for name, paths in ENGINE_FILES.items()]
        files.append((H100_RESULTS, FITTED + HUMMING, FOUR + HUMMING))
        for path, fitted, checked in files:
            if not path.is_file():
                continue
            key = f"{path.stem.removesuffix('_bench')}_leave_one_shape_out"  # h200_engines_..., h100_...
            doc[key] = {**h200_loso(path, fitted, checked), "run": prov}
            print(f"calibration: {write_committed_calibration(path)}")
            print(f"{path.name} {', '.join(checked)} leave-one-shape-out:", json.dumps(doc[key]["all"]))
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        return
    if args.published_only:  # the H200 and CPU parts stay as the file has them
        doc = json.loads(args.out.read_text()) if args.out.is_file() else {}
        doc["published"] = published_table()
        doc.setdefault("provenance", {})["published_rerun"] = prov
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        _print_published(doc["published"])
        return
    if args.cpu_only:  # the GPU and published parts stay as the file has them
        doc = json.loads(args.out.read_text()) if args.out.is_file() else {}
        doc["host"] = {**host_check(args.rounds), "run": prov}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        _print_host(doc["host"])
        return
    # the sections this run does not redo (the engines', the H100's, the host's with
    # --skip-host) stay as the file has them
    doc = json.loads(args.out.read_text()) if args.out.is_file() else {}
    doc.update({"provenance": prov, "h200_leave_one_shape_out": h200_loso(args.results),
                "published": published_table()})
    if not args.skip_host:
        doc["host"] = host_check(args.rounds)
    doc["provenance"]["seconds"] = round(time.perf_counter() - t, 1)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    if args.results == H200_RESULTS:  # the committed file's calibration, for a fast first predict
        from workbench.perf.calibrate import write_committed_calibration

        print(f"calibration: {write_committed_calibration()}")
    h = doc["h200_leave_one_shape_out"]
    print("H200 leave-one-shape-out:", json.dumps(h["all"]))
    for name, s in h["by_path"].items():
        print(f"  {name}: {json.dumps(s)}")
    pub = doc["published"]
    _print_published(pub)
    if "host" in doc:
        _print_host(doc["host"])


def _print_published(pub: dict) -> None:
    print(f"published: {pub['n_points']} points, {pub['n_sources']} sources, {len(pub['parts'])} parts; "
          f"{pub['n_costed']} costed: median {pub.get('median_abs_err')} p90 {pub.get('p90_abs_err')} "
          f"band {pub.get('band_coverage')}; without L2-resident: {json.dumps(pub['without_l2_resident'])}; "
          f"roofline bounds {json.dumps(pub['roofline_bounds'])}")
    for group in ("by_part", "by_family", "by_source"):
        for name, st in pub[group].items():
            print(f"  {name}: {json.dumps(st)}")


def _print_host(h: dict) -> None:
    print(f"host: median {h.get('median_abs_err')} p90 {h.get('p90_abs_err')} band {h['band_coverage']}"
          f" ({h.get('n')} points, {h['seconds']} s, load {[r['loadavg_1m'] for r in h['load']]})")
    for path, st in h["by_path"].items():
        print(f"  {path}: {json.dumps(st)}")


if __name__ == "__main__":
    main()
