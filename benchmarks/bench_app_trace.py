"""Server time of the trace page's interactions (issue 6 budget: 300 ms each).

    python benchmarks/bench_app_trace.py [--repeats 7] [--out FILE.json]

Drives the real app through Streamlit's AppTest (no browser): each interaction is one
script rerun, the server-side work a click or keystroke costs. Every interaction is timed
`repeats` times, alternating between two values so each rerun changes what is shown, and
reported as median / 80th percentile, with the ratio to a plain rerun timed in the same
process (the baseline: routing, sidebar and page drawing with nothing changed).
AppTest's own bookkeeping is included, so these are upper bounds of the script time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _timed(at, action) -> float:
    action(at)
    t0 = time.perf_counter()
    at.run(timeout=120)
    dt = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return dt


def _step(at) -> None:
    """Next while there is a next candidate, else back to the first."""
    nxt = at.button(key="trace.next")
    (at.button(key="trace.first") if nxt.disabled else nxt).click()


def main(argv: list[str] | None = None) -> int:
    from streamlit.testing.v1 import AppTest

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.session_state["pf.preset"] = "sm90-h200"
    at.run()  # imports, caches: not part of an interaction
    at.switch_page("workbench/ui/pages/trace.py").run()

    flip = {"preset": ["x86-avx512", "sm90-h200"], "packages": [[], ["humming"]],
            "disabled": ["MacheteLinearKernel", ""], "backend": ["marlin", "auto"],
            "compare": ["xpu", "rocm-mi300x"], "tp": [2, 1]}

    def setter(name, i):
        v = flip[name][i % 2]
        return {
            "preset": lambda a: a.selectbox(key="w:pf.preset:trace").set_value(v),
            "packages": lambda a: a.multiselect(key="w:pf.packages").set_value(v),
            "disabled": lambda a: a.text_input(key="w:env.VLLM_DISABLED_KERNELS").set_value(v),
            "backend": lambda a: a.selectbox(key="w:env.linear_backend").set_value(v),
            "compare": lambda a: a.selectbox(key="w:pf.compare").set_value(v),
            "tp": lambda a: a.number_input(key="w:tp.size").set_value(v),
        }[name]

    interactions = {
        "rerun (baseline)": lambda i: (lambda a: None),
        "platform preset": lambda i: setter("preset", i),
        "packages field": lambda i: setter("packages", i),
        "VLLM_DISABLED_KERNELS": lambda i: setter("disabled", i),
        "linear_backend": lambda i: setter("backend", i),
        "compare platform": lambda i: setter("compare", i),
        "TP size": lambda i: setter("tp", i),
        "step Next / First": lambda i: _step,
    }
    # warm every interaction once (first use of a cache entry is not what a user repeats)
    for make in interactions.values():
        _timed(at, make(0))
        _timed(at, make(1))
    results = {}
    for name, make in interactions.items():
        samples = sorted(_timed(at, make(i)) * 1e3 for i in range(args.repeats))
        results[name] = {"median_ms": statistics.median(samples),
                         "p80_ms": samples[min(len(samples) - 1, int(0.8 * len(samples)))],
                         "max_ms": samples[-1]}
    base = results["rerun (baseline)"]["median_ms"]
    print(f"{'interaction':24} {'median ms':>10} {'p80 ms':>8} {'x rerun':>8}")
    for name, r in results.items():
        r["ratio_to_rerun"] = r["median_ms"] / base
        print(f"{name:24} {r['median_ms']:10.1f} {r['p80_ms']:8.1f} {r['ratio_to_rerun']:8.2f}")
    worst = max(r["median_ms"] for r in results.values())
    print(f"worst median {worst:.1f} ms (budget 300 ms); load {os.getloadavg()[0]:.1f}")
    if args.out:
        import platform

        args.out.write_text(json.dumps({"host": platform.node(), "loadavg_1m": os.getloadavg()[0],
                                        "repeats": args.repeats, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
