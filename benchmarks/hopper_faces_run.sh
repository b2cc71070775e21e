#!/usr/bin/env bash
# One call on the lent Hopper host (< 6 minutes): first its AMX CPU's host calibration held to
# unseen shapes, quiet on two pinned cores (validate_perf.py --cpu-only), then the GPU harness
# on four more layer shapes for this project's paths and the libraries (the H100's file held
# five), and `bench` on the GPU as a user runs it (Humming's JIT compile shown apart).
#   OUT=dir bash benchmarks/hopper_faces_run.sh     (carried: .whl/)
. benchmarks/lent_host_setup.sh
lscpu > "$D/machine.txt"; nvidia-smi > "$D/nvidia_smi.txt" 2>&1
CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache taskset -c 2,3 timeout 200 python3 \
  benchmarks/validate_perf.py --cpu-only --rounds 2 --out "$D/perf_validation_host.json" > "$D/validate_perf_log.txt" 2>&1
echo "validate: $((SECONDS - t0)) s"; grep -i "median\|p90\|band" "$D/validate_perf_log.txt" | tail -6
CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache taskset -c 2,3 timeout 60 python3 -m workbench predict \
  --platform host-cpu --m 1,16,128 --n 64 --k 64 --group -1 > "$D/predict_64.txt" 2>&1
export W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-gpu
timeout 200 taskset -c 0-3 python3 benchmarks/gpu_bench.py --out "$D/gpu" --phases bench --budget-s 150 --no-peers \
  --engines "" --shapes "${SHAPES:-8192x14784,6144x4096,14336x4096,10240x8192}" --ms 1,16,128,1024,4096 \
  > "$D/gpu_bench_log.txt" 2>&1; echo "gpu bench: $((SECONDS - t0)) s"; tail -3 "$D/gpu_bench_log.txt"
timeout 150 taskset -c 0-3 python3 -m workbench bench --m 1,128,4096 --n 4096 --k 4096 \
  --paths vllm_humming,cublas_bf16,triton_w4a8,triton_w4a16 > "$D/bench_gpu.txt" 2>&1; head -16 "$D/bench_gpu.txt"
echo "all: $((SECONDS - t0)) s"
tar -czf "$OUT/run.tar.gz" -C "$OUT" run
