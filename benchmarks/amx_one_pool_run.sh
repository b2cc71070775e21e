#!/usr/bin/env bash
# An AMX host's CPU checks after the AMX engine moved to one pool (< 9 minutes): quiet on two
# pinned cores, the AMX tests, the item-4 ratios (per-channel / torch._int_mm round-robin and
# each alone, g128 / per-channel), decode against its streaming bounds, one busy process beside
# it, and the host calibration held to unseen shapes with every sample kept (its "calibration"
# is the AMX class's committed one); beside them on other cores, vLLM's own CPU ops built from
# the carried sdist (cpu_gemm_wna16 with the AMX tile permission asked of torch).
#   OUT=dir bash benchmarks/amx_one_pool_run.sh     (carried: .whl/, .carry/)
. benchmarks/lent_host_setup.sh
export CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache
mkdir -p /tmp/src && for t in .carry/vllm-*.tar.gz; do tar -xzf "$t" -C /tmp/src; done
git rev-parse HEAD > "$D/commit.txt" 2>/dev/null; lscpu > "$D/machine.txt"
P=2,3
cpu() { taskset -c "$P" "$@"; }
cpu python3 -m workbench platforms --host > "$D/platforms_host.txt" 2>&1  # builds and admits the engines
grep -i "u4_amx\|verdict\|admitted" "$D/platforms_host.txt" | head -6
# QUIET=1: nothing beside the measurements (the VM's cores may be hyperthread siblings: a
# build on cores 8-15 loaded the pinned pair, 2 of 2 quiet phases were flagged)
[ -z "$QUIET" ] && ( W4A8_VLLM_SDIST=$(ls -d /tmp/src/vllm-*/ | head -1) THREADS=2 QUICK=1 PYTHON=python3 \
    timeout 300 taskset -c 8-15 bash benchmarks/cpu_vllm_kernels.sh > "$D/vllm_cpu_log.txt" 2>&1
  cp benchmarks/results/cpu_ratios_vllm_cpu_*.json "$D/" 2>/dev/null ) &
[ -z "$QUIET" ] && cpu timeout 90 python3 -m pytest tests/kernels/test_amx_order.py tests/kernels/test_admission.py \
  tests/kernels/test_sched_stall.py tests/kernels/test_u4_decode.py -q -p no:cacheprovider > "$D/amx_pytest.txt" 2>&1
echo "tests: $((SECONDS - t0)) s: $(tail -1 "$D/amx_pytest.txt")"
cpu timeout 150 python3 benchmarks/bench_cpu_ratios.py --threads 2 --sections 1,2 --out "$D" --tag amx \
  > "$D/ratios_log.txt" 2>&1; echo "ratios: $((SECONDS - t0)) s"; grep "^\[" "$D/ratios_log.txt"
cpu timeout 90 python3 benchmarks/bench_cpu_bounds.py --threads 2 --quick --out "$D" > "$D/bounds_log.txt" 2>&1
echo "bounds: $((SECONDS - t0)) s"; grep "^\[" "$D/bounds_log.txt"
cpu timeout 60 python3 benchmarks/bench_under_load.py --cycles 2 --phase-s 3 --out "$D/cpu_under_load_amx.json" \
  > "$D/under_load_log.txt" 2>&1; echo "under load: $((SECONDS - t0)) s"; tail -3 "$D/under_load_log.txt"
cpu timeout 150 python3 benchmarks/validate_perf.py --cpu-only --rounds 2 --out "$D/perf_validation_host.json" \
  > "$D/validate_perf_log.txt" 2>&1
echo "validate: $((SECONDS - t0)) s"; grep -i "median\|p90\|band" "$D/validate_perf_log.txt" | tail -8
cpu timeout 60 python3 -m workbench bench --platform host-cpu --threads 2 --m 1,16,128 --n 64 --k 64 --group -1 \
  --paths w4a8_native,w4a16_fallback,dense --repeats 9 > "$D/bench_64.txt" 2>&1
cpu timeout 60 python3 -m workbench predict --platform host-cpu --m 1,16,128 --n 64 --k 64 --group -1 \
  > "$D/predict_64.txt" 2>&1; head -4 "$D/bench_64.txt"; head -4 "$D/predict_64.txt"
# torch's OpenMP workers told not to spin after a parallel region: how much of what is left
# is theirs (a diagnosis, not a setting the project makes)
mkdir -p "$D/passive"
OMP_WAIT_POLICY=PASSIVE cpu timeout 90 python3 benchmarks/bench_cpu_bounds.py --threads 2 --quick --out "$D/passive" \
  > "$D/passive/bounds_log.txt" 2>&1; grep "^\[" "$D/passive/bounds_log.txt"
OMP_WAIT_POLICY=PASSIVE cpu timeout 100 python3 benchmarks/bench_cpu_ratios.py --threads 2 --sections 1 --quick \
  --out "$D/passive" --tag amx > "$D/passive/ratios_log.txt" 2>&1; grep "^\[" "$D/passive/ratios_log.txt"
echo "quiet part: $((SECONDS - t0)) s"
wait
grep -E "ADMITTED|REFUSED|passed|failed|SIGILL" "$D/vllm_cpu_log.txt" | head -8
echo "all: $((SECONDS - t0)) s"
tar -czf "$OUT/run.tar.gz" -C "$OUT" run
