"""Time the dispatch simulator: one trace, the docs-versus-code matrix, and a batch.

    python benchmarks/bench_dispatch.py [--repeats 200]

Reports medians in this process; the issue's budget is 1 ms for one trace and 0.5 s for the
whole matrix on a 2-core machine. The baseline is parsing the same MP config alone, so the
ratio shows what the rules add on top of input validation.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from workbench.dispatch import MPConfig, trace_mp, trace_scheme
from workbench.dispatch.docs_matrix import compute_matrix
from workbench.dispatch.versions import DEFAULT_VERSION

C1 = {"weight_type": "int4", "act_type": "bfloat16", "group_size": 128, "zero_points": False,
      "out_type": None, "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 4096]}
W4A8 = {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True},
        "format": "int-quantized", "layer_name": "l", "in_features": 4096, "out_features": 4096,
        "params_dtype": "bfloat16"}


def median_s(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    no_humming = {"preset": "sm90-h200", "packages": []}
    base = median_s(lambda: MPConfig.from_json(C1), args.repeats)
    results = {
        "parse_mp_config_ms": base * 1e3,
        "trace_mp_h200_ms": median_s(lambda: trace_mp(C1, no_humming), args.repeats) * 1e3,
        "trace_scheme_x86_ms": median_s(lambda: trace_scheme(W4A8, "x86-avx512"), args.repeats) * 1e3,
        "matrix_s": median_s(compute_matrix, max(5, args.repeats // 20)),
    }
    sample = (Path(__file__).resolve().parents[1] / "tests" / "fixtures" / f"vllm-{DEFAULT_VERSION}"
              / "vllm_oracle_sample.json")
    cases = json.loads(sample.read_text())

    def batch():
        for c in cases:
            fn = trace_mp if c["level"] == "mp" else trace_scheme
            fn(c["input"], c["platform"], c["env"])

    results["oracle_batch_86_cases_ms"] = median_s(batch, max(5, args.repeats // 20)) * 1e3
    results["trace_vs_parse_ratio"] = results["trace_mp_h200_ms"] / results["parse_mp_config_ms"]
    print(json.dumps({k: round(v, 4) for k, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
