#!/usr/bin/env bash
# One call on the lent H100 host (< 9 minutes): on its AMX CPU, two pinned cores, the AMX GEMM
# with K in slices against the sources before it (bits and time, benchmarks/amx_kslice_probe.py),
# the AMX tests on it, and the host calibration held to unseen shapes; then, on its GPU,
# Humming's int8-activation kernel (vLLM's per-channel W4A8 path) on four layer shapes the
# H100's file holds for the other paths only.
#   OUT=dir bash benchmarks/amx_kslice_run.sh     (carried: .whl/ .carry/amx_base_csrc)
. benchmarks/lent_host_setup.sh
{ lscpu; nvidia-smi; } > "$D/machine.txt" 2>&1
export CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache
grep -q -m1 amx_int8 /proc/cpuinfo || echo "no AMX on this CPU"
W4A8_BASE_CSRC=.carry/amx_base_csrc taskset -c 2,3 timeout 120 python3 benchmarks/amx_kslice_probe.py \
  > "$D/amx_kslice_probe.txt" 2>&1
echo "probe: $((SECONDS - t0)) s"; cut -c1-600 "$D/amx_kslice_probe.txt" | grep -v provenance | tail -14
taskset -c 2,3 timeout 100 python3 -m pytest tests/kernels/test_amx_order.py tests/kernels/test_admission.py \
  tests/kernels/test_sched_stall.py tests/kernels/test_u4_decode.py tests/kernels/test_cpu_w4a8.py -q -p no:cacheprovider \
  > "$D/amx_pytest.txt" 2>&1
echo "tests: $((SECONDS - t0)) s: $(tail -1 "$D/amx_pytest.txt")"
taskset -c 2,3 timeout 130 python3 benchmarks/validate_perf.py --cpu-only --rounds 2 \
  --out "$D/perf_validation_host.json" > "$D/validate_perf_log.txt" 2>&1
echo "validate: $((SECONDS - t0)) s"; tail -5 "$D/validate_perf_log.txt"
unset CUDA_VISIBLE_DEVICES
export W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-gpu HUMMING_CACHE_DIR=/tmp/humming
timeout $(( 580 - (SECONDS - t0) )) taskset -c 0-7 python3 benchmarks/gpu_bench.py --out "$D/gpu" --phases bench \
  --budget-s $(( 540 - (SECONDS - t0) )) --no-peers --engines vllm_humming_int8 --paths vllm_humming_int8 --groups -1 \
  --shapes 6144x4096,14336x4096,10240x8192,8192x14784 --ms 1,16,128,1024,4096 > "$D/gpu_bench_log.txt" 2>&1
echo "gpu bench: $((SECONDS - t0)) s"; grep "done\|budget\|part:\|not timed" "$D/gpu_bench_log.txt" | cut -c1-200 | tail -8
echo "all: $((SECONDS - t0)) s"
