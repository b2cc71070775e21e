#!/usr/bin/env bash
# One call on the lent Hopper host (< 6 minutes): first its AMX CPU's host calibration held to
# unseen shapes, quiet on two pinned cores (validate_perf.py --cpu-only), then the GPU timing
# tests (`bench` and the Kernels page's measuring child against the harness, Humming's JIT on
# a cold cache) and `bench` on the GPU as a user runs it.
#   OUT=dir bash benchmarks/hopper_faces_run.sh     (carried: .whl/)
set -o pipefail
export PYTHONUNBUFFERED=1
: "${OUT:?set OUT to the results folder}"
t0=$SECONDS
D=$OUT/run
mkdir -p "$D"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels
lscpu > "$D/machine.txt"; nvidia-smi > "$D/nvidia_smi.txt" 2>&1
CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache taskset -c 2,3 timeout 200 python3 \
  benchmarks/validate_perf.py --cpu-only --rounds 2 --out "$D/perf_validation_host.json" > "$D/validate_perf_log.txt" 2>&1
echo "validate: $((SECONDS - t0)) s"; grep -i "median\|p90\|band" "$D/validate_perf_log.txt" | tail -6
CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache taskset -c 2,3 timeout 60 python3 -m workbench predict \
  --platform host-cpu --m 1,16,128 --n 64 --k 64 --group -1 > "$D/predict_64.txt" 2>&1
export W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-gpu
timeout 300 taskset -c 0-3 python3 -m pytest tests/kernels/test_gpu_timing.py -q -rs -p no:cacheprovider \
  > "$D/gpu_timing_pytest.txt" 2>&1; echo "gpu tests: $((SECONDS - t0)) s: $(tail -1 "$D/gpu_timing_pytest.txt")"
grep -E "^E |FAILED" "$D/gpu_timing_pytest.txt" | head -8
timeout 150 taskset -c 0-3 python3 -m workbench bench --m 1,128,4096 --n 4096 --k 4096 \
  --paths vllm_humming,cublas_bf16,triton_w4a8,triton_w4a16 > "$D/bench_gpu.txt" 2>&1; head -14 "$D/bench_gpu.txt"
echo "all: $((SECONDS - t0)) s"
tar -czf "$OUT/run.tar.gz" -C "$OUT" run
