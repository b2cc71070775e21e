#!/usr/bin/env bash
# The CPU checks of an Intel AMX host, on the cores this is pinned to (taskset): the kernel
# suite under each ISA cap in parallel (2 cores each), `bench` on every default path (the
# crash of an AMX host), then the AMX measurements: benchmarks/bench_cpu_ratios.py,
# bench_cpu_bounds.py and bench_under_load.py at 2 threads, and the host calibration against
# shapes it never timed (validate_cpu_classes.py --here).
#   bash benchmarks/amx_host_checks.sh OUTDIR      (on 8 cores; ends within about 8 minutes)
set -o pipefail
D=${1:?output folder}
mkdir -p "$D"
t0=$SECONDS
export CUDA_VISIBLE_DEVICES=  # the CPU half: no test or bench here touches the GPU
cores=($(python3 -c "import os; print(*sorted(os.sched_getaffinity(0)))"))
pair() { echo "${cores[$((2 * $1))]},${cores[$((2 * $1 + 1))]}"; }
AVX2_LIBS="ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2"
python3 -m workbench platforms --host > "$D/platforms_host.txt" 2>&1
python3 -m workbench bench --list > "$D/bench_list.txt" 2>&1
TESTS="tests/kernels tests/test_bench.py tests/catalog/test_kernels_catalog.py"
SKIP="not gpu_bench and not triton and not machete and not humming and not wheel_install"
i=0
for cap in none avx512 avx2; do
  env=(); [ $cap != none ] && env=(W4A8_KERNELS_MAX_ISA=$cap)
  [ $cap = avx2 ] && env+=($AVX2_LIBS)
  ( env "${env[@]}" W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-$cap timeout 420 taskset -c "$(pair $i)" \
      python3 -m pytest $TESTS -q -rs -p no:cacheprovider -k "$SKIP" > "$D/pytest_cap_$cap.txt" 2>&1 ) &
  i=$((i + 1))
done
# the crash an AMX host met, then every default path, on the fourth pair
P=$(pair 3)
for args in "--m 32 --n 1024 --k 1024 --group -1 --paths w4a8_native" "--m 1,32,128 --n 1024 --k 1024"; do
  timeout 120 taskset -c "$P" python3 -m workbench bench --platform host-cpu --threads 2 $args \
    >> "$D/bench_cli_cpu.txt" 2>&1; echo "exit $?" >> "$D/bench_cli_cpu.txt"
done
echo "bench: $((SECONDS - t0)) s"
# measurements: one at a time on the fourth pair (2 threads) while the suites run on the
# other three (shared L3 and memory: the provenance's load says so)
timeout 150 taskset -c "$P" python3 benchmarks/bench_cpu_ratios.py --threads 2 --sections 1,2 --out "$D" --tag _amx \
  > "$D/ratios_log.txt" 2>&1; echo "ratios: $((SECONDS - t0)) s"
timeout 100 taskset -c "$P" python3 benchmarks/bench_cpu_bounds.py --threads 2 --quick --out "$D" \
  > "$D/bounds_log.txt" 2>&1; echo "bounds: $((SECONDS - t0)) s"
timeout 60 taskset -c "$P" python3 benchmarks/bench_under_load.py --cycles 2 --phase-s 3 \
  --out "$D/cpu_under_load_amx.json" > "$D/under_load_log.txt" 2>&1; echo "under load: $((SECONDS - t0)) s"
timeout 100 taskset -c "$P" python3 -m workbench predict --platform host-cpu --m 1,16,128 --n 64 --k 64 \
  > "$D/predict_64.txt" 2>&1
timeout 30 taskset -c "$P" python3 -m workbench bench --platform host-cpu --threads 2 --m 1,16,128 --n 64 --k 64 \
  --paths w4a8_native,w4a16_fallback,dense > "$D/bench_64.txt" 2>&1
echo "64 x 64: $((SECONDS - t0)) s"
timeout 120 taskset -c "$P" python3 benchmarks/validate_cpu_classes.py --here --rounds 2 > "$D/validate_log.txt" 2>&1
cp benchmarks/results/cpu_class_validation.json "$D/" 2>/dev/null
echo "validation: $((SECONDS - t0)) s"
wait
echo "suites: $((SECONDS - t0)) s"
for f in "$D"/pytest_cap_*.txt; do echo "$f: $(tail -1 "$f")"; done
