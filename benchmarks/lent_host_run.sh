#!/usr/bin/env bash
# One call on whichever lent Hopper host comes (< 9.5 minutes), in order:
#  - its CPU, where it has AMX, two pinned cores: the AMX tests;
#  - the host calibration held to unseen shapes, and the 64 x 64 layer timed and predicted;
#  - its GPU: on an H200, the harness on eight layer shapes the H200's files did not hold (this
#    project's paths, the libraries, Machete from .machete/); on an H100, Humming's int8-activation
#    kernel (vLLM's per-channel W4A8 path) on four shapes the H100's file holds for other paths.
#   OUT=dir [BUDGET_S=560] [COMMIT=sha] bash benchmarks/lent_host_run.sh     (carried: .whl/ .machete/)
# COMMIT: the commit the carried tree is (the host gets it without .git), for the provenance.
# BUDGET_S: where the whole run must end; the GPU part gets what the CPU part leaves of it.
# AMX_TESTS=0 leaves out the AMX tests (the engines still pass their self-test to be used);
# VALIDATE=0 the host calibration check.
. benchmarks/lent_host_setup.sh
{ lscpu; nvidia-smi; } > "$D/machine.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $gpu"
cpu() { CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache taskset -c 2,3 "$@"; }
if grep -q -m1 amx_int8 /proc/cpuinfo; then
  [ "${AMX_TESTS:-1}" = 1 ] && cpu timeout 80 python3 -m pytest tests/kernels/test_amx_order.py tests/kernels/test_admission.py \
    tests/kernels/test_sched_stall.py tests/kernels/test_u4_decode.py -q -p no:cacheprovider > "$D/amx_pytest.txt" 2>&1
  [ "${AMX_TESTS:-1}" = 1 ] && echo "tests: $((SECONDS - t0)) s: $(tail -1 "$D/amx_pytest.txt")"
else echo "no AMX on this CPU"; fi
if [ "${VALIDATE:-1}" = 1 ]; then
  cpu timeout 130 python3 benchmarks/validate_perf.py --cpu-only --rounds 2 --out "$D/perf_validation_host.json" \
    > "$D/validate_perf_log.txt" 2>&1
  echo "validate: $((SECONDS - t0)) s"; tail -5 "$D/validate_perf_log.txt"
  cpu timeout 25 python3 -m workbench bench --platform host-cpu --threads 2 --m 1,16,128 --n 64 --k 64 --group -1 \
    --paths w4a8_native,w4a16_fallback,bf16_dense --repeats 15 > "$D/bench_64.txt" 2>&1
  cpu timeout 25 python3 -m workbench predict --platform host-cpu --m 1,16,128 --n 64 --k 64 --group -1 \
    > "$D/predict_64.txt" 2>&1
fi
export W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-gpu HUMMING_CACHE_DIR=/tmp/humming
left=$(( ${BUDGET_S:-560} - (SECONDS - t0) ))
case "$gpu" in
  *H200*) timeout "$left" taskset -c 0-7 python3 benchmarks/gpu_bench.py --out "$D/gpu" --commit "${COMMIT:-unknown}" --phases bench \
    --budget-s $(( left - 40 )) --no-peers --engines vllm_machete \
    --shapes 4096x11008,3584x18944,6144x4096,2112x7168,14336x4096,28672x4096,10240x8192,8192x28672 \
    --ms 1,16,32,64,128,256,512,1024,2048,4096,8192 > "$D/gpu_bench_log.txt" 2>&1 ;;
  *H100*) timeout "$left" taskset -c 0-7 python3 benchmarks/gpu_bench.py --out "$D/gpu" --commit "${COMMIT:-unknown}" --phases bench \
    --budget-s $(( left - 40 )) --no-peers --engines vllm_humming_int8 --paths vllm_humming_int8 --groups -1 \
    --shapes 6144x4096,14336x4096,10240x8192,8192x14784 --ms 1,16,128,1024,4096 > "$D/gpu_bench_log.txt" 2>&1 ;;
esac
echo "gpu bench: $((SECONDS - t0)) s"; grep "done\|budget\|part:\|not timed" "$D/gpu_bench_log.txt" | cut -c1-200 | tail -10
echo "all: $((SECONDS - t0)) s"
