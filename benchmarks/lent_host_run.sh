#!/usr/bin/env bash
# One call on whichever lent Hopper host comes (< 9.5 minutes).
#  - Its CPU, where it has AMX, on two pinned cores (2, 3): the AMX tests; where the AMX call's
#    time goes (amx_scaling_probe.py: whole call, GEMM alone, quantizer alone); item 4's ratios
#    (bench_cpu_ratios.py section 1, twice); the host calibration held to unseen shapes; the
#    64 x 64 layer timed and predicted.
#  - Its GPU, on an H200 only, at the same time on cores 8-15: the harness on eight layer
#    shapes the H200's files did not hold (this project's paths, the libraries, Machete from
#    .machete/). The CPU figures of such a call are flagged as measured beside it.
#   OUT=dir [BUDGET_S=560] [COMMIT=sha] bash benchmarks/lent_host_run.sh     (carried: .whl/ .machete/)
# COMMIT: the commit the carried tree is (the host gets it without .git), for the provenance.
# BUDGET_S: where the whole run must end. AMX_TESTS=0 leaves out the AMX tests (the engines
# still pass their self-test to be used); VALIDATE=0 the host calibration check.
. benchmarks/lent_host_setup.sh
{ lscpu; nvidia-smi; } > "$D/machine.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $gpu"
budget=${BUDGET_S:-560}
left() { echo $(( budget - (SECONDS - t0) )); }

cpu() { CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache taskset -c 2,3 "$@"; }
cpu_part() {
  if ! grep -q -m1 amx_int8 /proc/cpuinfo; then echo "no AMX on this CPU"; return; fi
  [ "${AMX_TESTS:-1}" = 1 ] && cpu timeout 100 python3 -m pytest tests/kernels/test_amx_order.py tests/kernels/test_admission.py \
    tests/kernels/test_sched_stall.py tests/kernels/test_u4_decode.py -q \
    -p no:cacheprovider > "$D/amx_pytest.txt" 2>&1
  [ "${AMX_TESTS:-1}" = 1 ] && echo "tests: $((SECONDS - t0)) s: $(tail -1 "$D/amx_pytest.txt")"
  cpu timeout 60 python3 benchmarks/amx_scaling_probe.py > "$D/amx_scaling.json" 2> "$D/amx_scaling_err.txt"
  echo "where the AMX call's time goes: $((SECONDS - t0)) s: $(cut -c1-400 "$D/amx_scaling.json")"
  for run in 1 2; do
    [ "$(left)" -gt 200 ] || break
    cpu timeout 100 python3 benchmarks/bench_cpu_ratios.py --sections 1 --threads 2 --out "$D" --tag "amx_run$run" \
      > "$D/ratios_log_$run.txt" 2>&1
    echo "ratios $run: $((SECONDS - t0)) s"; grep "^\[1\]" "$D/ratios_log_$run.txt" | cut -c1-160
  done
  if [ "${VALIDATE:-1}" = 1 ] && [ "$(left)" -gt 140 ]; then
    cpu timeout 130 python3 benchmarks/validate_perf.py --cpu-only --rounds 3 --out "$D/perf_validation_host.json" \
      > "$D/validate_perf_log.txt" 2>&1
    echo "validate: $((SECONDS - t0)) s"; tail -5 "$D/validate_perf_log.txt"
    cpu timeout 25 python3 -m workbench bench --platform host-cpu --threads 2 --m 1,16,128 --n 64 --k 64 --group -1 \
      --paths w4a8_native,w4a16_fallback,bf16_dense --repeats 15 > "$D/bench_64.txt" 2>&1
    cpu timeout 25 python3 -m workbench predict --platform host-cpu --m 1,16,128 --n 64 --k 64 --group -1 \
      > "$D/predict_64.txt" 2>&1
  fi
}

case "$gpu" in
  *H200*)
    echo "the CPU part runs beside the GPU harness (cores 2-3 and 8-15)" | tee "$D/concurrent.txt"
    cpu_part > "$D/cpu_part_log.txt" 2>&1 &
    cpu_pid=$!
    W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-gpu HUMMING_CACHE_DIR=/tmp/humming timeout "$(left)" \
      taskset -c 8-15 python3 benchmarks/gpu_bench.py --out "$D/gpu" --commit "${COMMIT:-unknown}" --phases bench \
      --budget-s $(( $(left) - 40 )) --no-peers --engines vllm_machete \
      --shapes 4096x11008,3584x18944,6144x4096,2112x7168,14336x4096,28672x4096,10240x8192,8192x28672 \
      --ms 1,16,32,64,128,256,512,1024,2048,4096,8192 > "$D/gpu_bench_log.txt" 2>&1
    echo "gpu bench: $((SECONDS - t0)) s"; grep "done\|budget\|part:\|not timed" "$D/gpu_bench_log.txt" | cut -c1-200 | tail -10
    wait "$cpu_pid"; cat "$D/cpu_part_log.txt" ;;
  *) cpu_part ;;
esac
echo "all: $((SECONDS - t0)) s"
