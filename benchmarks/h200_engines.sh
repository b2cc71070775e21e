#!/usr/bin/env bash
# One device call: the kernels vLLM runs on CUDA (Humming), their GPU tests first, then their
# timings beside this project's Triton kernels. Wheels for what the GPU image lacks are carried
# in the ignored .whl/ (humming-kernels 0.1.19 as vLLM pins it, compressed-tensors and its needs):
#   OUT=results_dir [PATHS=a,b] [SKIP_TESTS=1] bash benchmarks/h200_engines.sh [SHAPES] [MS] [BUDGET_S]
set -o pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv | tee $OUT/h200_smi.txt
python3 -c "import torch, humming, w4a8_kernels, workbench; print(torch.__version__, humming.__file__)" || exit 1
[ -n "$SKIP_TESTS" ] || timeout 240 python3 -m pytest tests/kernels/test_vllm_humming.py tests/kernels/test_gpu_bench_engines.py \
    -q -rs -p no:cacheprovider 2>&1 | tee $OUT/h200_pytest_engines.txt | tail -25
python3 benchmarks/gpu_bench.py --out $OUT --commit "${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" \
    --phases bench --budget-s ${3:-300} --no-peers --paths "${PATHS:-}" --shapes ${1:-4096x4096,8192x8192,28672x8192} \
    --ms ${2:-1,16,64,256,1024,4096} 2>&1 | tail -40
python3 benchmarks/gpu_report.py $OUT/h200_bench.json > $OUT/h200_report.txt 2>&1; tail -60 $OUT/h200_report.txt
