#!/usr/bin/env bash
# The pinned vLLM's own CPU int4 ops on this host, run for real: int4_scaled_mm_cpu (the W4A8 route
# CPUWNA16LinearKernel takes on AMX hosts) and cpu_gemm_wna16 (its W4A16 route), built from the
# sdist as torch extensions (w4a8_kernels.vllm_cpu), each admitted by a child-process self-test,
# then tested against the float64 reference and this project's emulation, and timed beside
# w4a8_native (benchmarks/bench_cpu_ratios.py --sections 6).
#
#   W4A8_VLLM_SDIST=/path/to/vllm-<pinned>.tar.gz [THREADS=N] [QUICK=1] bash benchmarks/cpu_vllm_kernels.sh
#
# W4A8_VLLM_SDIST: the sdist (tarball, sha256-checked, or its unpacked folder); without it the
#   sdist is fetched from PyPI. The builds go to the user cache (W4A8_WORKBENCH_CACHE overrides).
# THREADS: torch threads for the timing (default: torch's); QUICK=1: fewer M and repeats.
# Writes benchmarks/results/cpu_ratios_vllm_cpu_<host>.json and a log beside it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python}
HOST=$(hostname -s 2>/dev/null || echo host)
OUT=benchmarks/results
LOG=$OUT/cpu_vllm_kernels_$HOST.log
mkdir -p "$OUT"
exec > >(tee "$LOG") 2>&1

echo "== host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs"
echo "   ISA: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx512f|avx512_bf16|avx512_vnni|amx_tile|amx_int8|amx_bf16)$' | tr '\n' ' ')"
echo "   $(c++ --version | head -1); torch $($PY -c 'import torch; print(torch.__version__)')"
echo "   sdist: ${W4A8_VLLM_SDIST:-${WORKBENCH_VLLM_SRC:-(PyPI)}}"

echo "== build and self-test (child processes; build seconds in each verdict)"
$PY - <<'EOF'
import time
from w4a8_kernels import vllm_cpu as V
for kernel in V.KERNELS:
    t0 = time.perf_counter()
    v = V.self_test(kernel, use_cache=False)
    info = V.build_info(kernel) or {}
    print(f"{kernel}: {'ADMITTED' if v.ok else 'REFUSED'} {v.why}".rstrip())
    print(f"   vLLM library flags: {info.get('library')}, build {info.get('build_s')} s, "
          f"self-test {v.seconds} s (wall {time.perf_counter() - t0:.1f} s)")
    for check in v.checks:
        print(f"   {check}")
EOF

echo "== bench --list (what runs here, and why not)"
$PY -m workbench bench --list | grep -E "^(vllm_int4|vllm_cpu|w4a8_native|w4a16_fallback)" || true

echo "== tests (a failure is reported and the timing still runs)"
$PY -m pytest -q -p no:cacheprovider -rs tests/kernels/test_vllm_cpu.py tests/kernels/test_engine_paths.py \
  tests/kernels/test_quant.py tests/test_execution.py tests/kernels/test_registry_and_bad_input.py \
  || echo "== TESTS FAILED (rc=$?)"

echo "== timing beside w4a8_native (N = K = 4096)"
ARGS=(--sections 6 --tag "vllm_cpu_$HOST")
[ -n "${THREADS:-}" ] && ARGS+=(--threads "$THREADS")
[ -n "${QUICK:-}" ] && ARGS+=(--quick)
$PY benchmarks/bench_cpu_ratios.py "${ARGS[@]}"
echo "log: $LOG"
