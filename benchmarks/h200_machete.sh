#!/usr/bin/env bash
# One device call (< 240 s): vLLM's Machete W4A16 kernels, built here by
# benchmarks/build_machete.sh into the ignored .machete/, tested on the GPU against the float64
# reference, then timed beside Humming W4A16 (bf16 activations, g128) at the M and shapes below.
# Carried ignored folders: .machete/ (the library, no install needed) and .whl/ (humming-kernels
# as vLLM pins it, installed into /tmp/site as benchmarks/h200_engines.sh does).
#   OUT=results_dir [COMMIT=sha] [GROUP_SIZES=128,-1] bash benchmarks/h200_machete.sh [SHAPES] [MS] [BENCH_BUDGET_S]
set -o pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
: "${OUT:?set OUT to the results folder}"
t0=$SECONDS
LIB=.machete/libmachete_w4a16.so
[ -f "$LIB" ] || { echo "no $LIB: build it with benchmarks/build_machete.sh and carry .machete" >&2; exit 1; }
cp .machete/BUILD.txt "$OUT/machete_build.txt" 2>/dev/null
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    || echo "the .whl/ wheels did not install: Humming will say why it is not timed"
fi
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv | tee "$OUT/h200_smi.txt"
python3 -c "
import torch
from w4a8_kernels import machete_lib
print(torch.__version__, torch.version.cuda, machete_lib.available(), machete_lib.built_schedules())
" 2>&1 | tee "$OUT/machete_probe.txt" || exit 1
echo "setup: $((SECONDS - t0)) s"
timeout 75 python3 -m pytest tests/kernels/test_vllm_machete.py -q -rs -p no:cacheprovider 2>&1 \
  | tee "$OUT/h200_pytest_machete.txt" | tail -25
echo "tests: $((SECONDS - t0)) s"
# gpu_bench stops starting new M once its budget is spent; the hard timeout covers the one in flight.
timeout $(( ${3:-110} + 30 )) python3 benchmarks/gpu_bench.py --out "$OUT" \
    --commit "${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" --phases bench \
    --budget-s "${3:-110}" --no-peers --engines vllm_humming,vllm_machete \
    --paths vllm_humming,vllm_machete --groups "${GROUP_SIZES:-128}" \
    --shapes "${1:-4096x4096,8192x8192,28672x8192}" --ms "${2:-1,16,128,1024,4096}" 2>&1 \
  | tee "$OUT/h200_machete_bench_log.txt" | tail -40
echo "bench: $((SECONDS - t0)) s"
python3 benchmarks/gpu_report.py "$OUT/h200_bench.json" > "$OUT/h200_report.txt" 2>&1
tail -40 "$OUT/h200_report.txt"
echo "total: $((SECONDS - t0)) s"
