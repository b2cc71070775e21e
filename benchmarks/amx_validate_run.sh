#!/usr/bin/env bash
# The host calibration held to unseen shapes on an AMX host, alone on the machine, two pinned
# cores (about 90 s), and the 64 x 64 layer predicted and timed.
#   OUT=dir bash benchmarks/amx_validate_run.sh     (carried: .whl/)
. benchmarks/lent_host_setup.sh
export CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache
lscpu > "$D/machine.txt"
taskset -c 2,3 timeout 120 python3 benchmarks/validate_perf.py --cpu-only --rounds 2 \
  --out "$D/perf_validation_host.json" > "$D/validate_perf_log.txt" 2>&1
echo "validate: $((SECONDS - t0)) s"; tail -5 "$D/validate_perf_log.txt"
taskset -c 2,3 timeout 40 python3 -m workbench bench --platform host-cpu --threads 2 --m 1,16,128 --n 64 --k 64 \
  --group -1 --paths w4a8_native,w4a16_fallback,bf16_dense --repeats 15 > "$D/bench_64.txt" 2>&1
taskset -c 2,3 timeout 40 python3 -m workbench predict --platform host-cpu --m 1,16,128 --n 64 --k 64 --group -1 \
  > "$D/predict_64.txt" 2>&1
head -11 "$D/bench_64.txt" | tail -9; head -10 "$D/predict_64.txt"
echo "all: $((SECONDS - t0)) s"
