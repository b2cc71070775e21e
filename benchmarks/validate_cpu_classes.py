"""Check the CPU presets' model across CPU classes; writes benchmarks/results/cpu_class_validation.json.

    python benchmarks/validate_cpu_classes.py [--here [--rounds R]]

The model of a CPU preset is the committed CPU results' fits (an AVX2 AMD EPYC, 1 thread)
carried to the preset's ISA, bandwidth, clock and cores (workbench/perf/cpu_classes.py). Its
held-out check is a machine of other classes the fits never saw: the AMX Xeon of
benchmarks/results/cpu_bounds_t2.json (2 threads), the same machine capped to AVX2
(cpu_bounds_t2_avx2.json) and at 1 thread (cpu_bounds_t1.json), at N = K = 4096 and
M = 1 (decode, weights cold), 16, 128, 512. Each run is costed as a part of its class with
the run's own cores and its measured cold bandwidth; its clock is not recorded (a VM's
"Intel Xeon Processor"), so 2.0 GHz, Sapphire Rapids' base clock, is assumed: what this
check rests on.

--here also benches this machine (its class, 1 thread) at shapes the committed fits never
timed, in interleaved rounds with the load recorded, and costs it as a part of its class with
its own clock (/proc/cpuinfo), one core and its measured streaming bandwidth; then again in a
child process with W4A8_KERNELS_MAX_ISA=avx2 and torch's libraries held to AVX2 (a second
class where the CPU has AVX-512; the same class, as a repeat, on an AVX2-only CPU). Each run
is costed as the preset of the class it ran in: where that is not the fits' class (AVX2),
the basis reads "scaled across CPU classes" and the band is widened by the measured spread.
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.perf.cpu import committed_calibration  # noqa: E402
from workbench.perf.fit import error_stats  # noqa: E402
from workbench.perf.hardware import hardware_for  # noqa: E402
from workbench.perf.predict import predict_cpu  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
RUNS = {"cpu_bounds_t2.json": "x86-spr-amx", "cpu_bounds_t2_avx2.json": "x86-avx2", "cpu_bounds_t1.json": "x86-spr-amx"}
PATHS = {"w4a8_g128": ("w4a8_native", 128), "w4a8_per_channel": ("w4a8_native", -1),
         "w4a16_fallback": ("w4a16_fallback", 128), "dense": ("dense", -1)}
ASSUMED_CLOCK_MHZ = 2000.0
_CLASS_PRESET = {"avx2": "x86-avx2", "avx512": "x86-avx512", "amx": "x86-spr-amx"}


HERE_SHAPES = ((5120, 2560), (2048, 8192))
HERE_MS = (1, 16, 128)


def _here(cal, rounds: int) -> tuple[list, dict]:
    import os
    import platform as _platform

    import torch

    from w4a8_kernels._native_lib import ISA_CAP_ENV, cpu_flags, isa_cap
    from workbench.bench import host_provenance
    from workbench.perf.cpu import measure_throughputs, measure_host, plan_for
    from workbench.perf.cpu_classes import host_class

    torch.set_num_threads(1)
    mhz = 0.0
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            mhz = float(line.split(":")[1])
            break
    cap = isa_cap()
    preset = _CLASS_PRESET[host_class(cpu_flags(), cap).value]
    run = f"this machine, {ISA_CAP_ENV}={cap}" if cap else "this machine"
    load = [round(os.getloadavg()[0], 2)]
    thr = measure_throughputs()
    samples = measure_host(plan_for(HERE_SHAPES, HERE_MS, ["w4a8_native", "w4a16_fallback"]), rounds=rounds,
                           on_round=lambda r, s: load.append(round(os.getloadavg()[0], 2)))
    hw = replace(hardware_for(preset), units=1, clock_mhz=mhz or hardware_for(preset).clock_mhz,
                 mem_gbs=thr["stream_gbs"])
    points = []
    for smp in samples:
        p = predict_cpu(hw, smp.path, smp.m, smp.n, smp.k, 128, preset, cal=cal)
        points.append({"run": run, "class_as": preset, "isa_cap": cap, "threads": 1, "record": smp.path,
                       "path": smp.path, "m": smp.m, "n": smp.n, "k": smp.k, "measured_us": round(smp.us, 1),
                       "predicted_us": round(p.predicted_us, 1), "low_us": round(p.low_us, 1),
                       "high_us": round(p.high_us, 1), "basis": p.basis,
                       "err": round(p.predicted_us / smp.us - 1, 4), "in_band": p.low_us <= smp.us <= p.high_us})
    return points, {**host_provenance(), "run": run, "class": preset, "machine": _platform.machine(),
                    "cpu_mhz": mhz, "stream_gbs": round(thr["stream_gbs"], 2), "loadavg_1m_per_round": load,
                    "statistic": f"fastest call over {rounds} rounds (bench min_ms, 3 repeats a round)"}


def _here_capped(rounds: int) -> tuple[list, dict]:
    """The --here run in a child process under the AVX2 cap (the cap is read as the kernels
    load, and torch's libraries pick their kernels at start)."""
    import os
    import subprocess

    from w4a8_kernels._native_lib import AVX2_LIBRARY_CAPS, ISA_CAP_ENV

    env = {**os.environ, ISA_CAP_ENV: "avx2", **AVX2_LIBRARY_CAPS}
    out = subprocess.run([sys.executable, __file__, "--here-json", "--rounds", str(rounds)], env=env,
                         capture_output=True, text=True, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    return got["points"], got["provenance"]


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--here", action="store_true", help="also bench this machine, whole and AVX2-capped")
    ap.add_argument("--here-json", action="store_true", help=argparse.SUPPRESS)  # the capped child
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the --here benches")
    args = ap.parse_args()
    if not 1 <= args.rounds <= 10:
        ap.error(f"--rounds {args.rounds}; accepted: 1 to 10")
    cal = committed_calibration()
    if args.here_json:
        pts, prov = _here(cal, args.rounds)
        print(json.dumps({"points": pts, "provenance": prov}))
        return
    points = []
    for name, preset in RUNS.items():
        d = json.loads((RESULTS / name).read_text())
        prov = d["provenance"]
        hw = replace(hardware_for(preset), units=int(prov["threads"]), clock_mhz=ASSUMED_CLOCK_MHZ,
                     mem_gbs=float(d["bandwidth"]["cold_1gib"]["gbs_p50"]))
        n = k = int(prov["n"])
        timed = [(1, rec, d["decode"]["cold"].get(rec)) for rec in PATHS]
        timed += [(int(m), rec, d["m"][m]["timings"].get(rec)) for m in d["m"] for rec in PATHS]
        for m, rec, t in timed:
            if not t:
                continue
            path, g = PATHS[rec]
            p = predict_cpu(hw, path, m, n, k, g, preset, cal=cal)
            meas = t["p50_ms"] * 1e3
            points.append({"run": name, "class_as": preset, "isa_cap": prov.get("isa_cap"),
                           "threads": prov["threads"], "record": rec, "path": path, "m": m, "n": n, "k": k,
                           "measured_us": round(meas, 1), "predicted_us": round(p.predicted_us, 1),
                           "low_us": round(p.low_us, 1), "high_us": round(p.high_us, 1), "basis": p.basis,
                           "err": round(p.predicted_us / meas - 1, 4), "in_band": p.low_us <= meas <= p.high_us})
    here_prov = []
    if args.here:
        for one in (lambda: _here(cal, args.rounds), lambda: _here_capped(args.rounds)):
            got, prov = one()
            points += got
            here_prov.append(prov)
    # a roofline-only figure is a bound, not a cost: checked as one, left out of the errors
    bounds = [p for p in points if p["basis"] == "roofline"]
    bound_holds = sum(p["measured_us"] >= p["predicted_us"] for p in bounds)
    points = [p for p in points if p["basis"] != "roofline"]
    by_run = {}
    for name in [*RUNS, *sorted({p["run"] for p in points} - set(RUNS))]:
        ps = [p for p in points if p["run"] == name]
        if not ps:
            continue
        by_run[name] = {**error_stats([p["err"] for p in ps]),
                        "band_coverage": round(sum(p["in_band"] for p in ps) / max(len(ps), 1), 4)}
    out = {"what": __doc__.strip().splitlines()[0], "assumed_clock_mhz": ASSUMED_CLOCK_MHZ,
           "fitted_on": cal.provenance, **error_stats([p["err"] for p in points]),
           "band_coverage": round(sum(p["in_band"] for p in points) / max(len(points), 1), 4),
           "by_run": by_run, "this_machine": here_prov or None, "roofline_bounds": {"n": len(bounds), "measured_at_or_above": bound_holds},
           "points": points, "bound_points": bounds}
    (RESULTS / "cpu_class_validation.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "points"}, indent=1))
    for p in points:
        print(p["run"], p["record"], p["m"], p["measured_us"], p["predicted_us"], p["low_us"], p["high_us"], p["in_band"])


if __name__ == "__main__":
    main()
