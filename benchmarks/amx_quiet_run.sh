#!/usr/bin/env bash
# One device call for an Intel AMX host's CPU, measured quiet (< 9 minutes): first the AMX
# measurements alone on the machine (GPU idle, nothing else running), two cores pinned as a
# 2-core machine would give them, then the CPU suite under each ISA cap, vLLM's own CPU ops
# built from the sdist (benchmarks/cpu_vllm_kernels.sh) and, on the GPU, the H100 shapes the
# first call left (benchmarks/gpu_bench.py) and Machete (its library carried in .machete-h100/).
# Carried, ignored: .whl/, .carry/ (as benchmarks/hopper_host_run.sh), .machete-h100/.
#   OUT=dir bash benchmarks/amx_quiet_run.sh
set -o pipefail
export PYTHONUNBUFFERED=1
: "${OUT:?set OUT to the results folder}"
t0=$SECONDS
R=$OUT/run
D=$R/cpu
mkdir -p "$D"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache
mkdir -p /tmp/src && for t in .carry/*.tar.gz; do tar -xzf "$t" -C /tmp/src; done
git rev-parse HEAD > "$R/commit.txt" 2>/dev/null
lscpu > "$R/machine.txt"
P=2,3
cpu() { CUDA_VISIBLE_DEVICES= taskset -c "$P" "$@"; }
# -- quiet: nothing else runs ------------------------------------------------------------------
cpu python3 -m workbench platforms --host > "$D/platforms_host.txt" 2>&1  # builds and admits the engines
cpu timeout 150 python3 benchmarks/bench_cpu_ratios.py --threads 2 --sections 1,2 --out "$D" --tag _amx \
  > "$D/ratios_log.txt" 2>&1; echo "ratios: $((SECONDS - t0)) s"; grep "^\[" "$D/ratios_log.txt"
cpu timeout 90 python3 benchmarks/bench_cpu_bounds.py --threads 2 --quick --out "$D" > "$D/bounds_log.txt" 2>&1
echo "bounds: $((SECONDS - t0)) s"; grep "^\[" "$D/bounds_log.txt"
for t in 1 2; do
  cpu timeout 60 python3 -m workbench bench --platform host-cpu --threads $t --m 32,128 --n 4096 --k 4096 \
    --group -1 --paths w4a8_native,int8_mm --repeats 9 > "$D/bench_threads_$t.txt" 2>&1
done
echo "threads: $((SECONDS - t0)) s"; grep -h "^w4a8\|^int8" "$D"/bench_threads_*.txt
cpu timeout 60 python3 benchmarks/bench_under_load.py --cycles 2 --phase-s 3 --out "$D/cpu_under_load_amx.json" \
  > "$D/under_load_log.txt" 2>&1; echo "under load: $((SECONDS - t0)) s"; tail -4 "$D/under_load_log.txt"
cpu timeout 60 python3 -m workbench bench --platform host-cpu --threads 2 --m 1,16,128 --n 64 --k 64 --group -1 \
  --paths w4a8_native,w4a16_fallback,dense > "$D/bench_64.txt" 2>&1
cpu timeout 120 python3 -m workbench predict --platform host-cpu --m 1,16,128 --n 64 --k 64 > "$D/predict_64.txt" 2>&1
echo "64 x 64: $((SECONDS - t0)) s"; cat "$D/predict_64.txt" | head -8
# -- then the rest at once ---------------------------------------------------------------------
P=8,9 cpu timeout 200 python3 benchmarks/validate_cpu_classes.py --here --rounds 2 > "$D/validate_log.txt" 2>&1 &
(W4A8_VLLM_SDIST=$(ls -d /tmp/src/vllm-*/ | head -1) THREADS=2 QUICK=1 PYTHON=python3 CUDA_VISIBLE_DEVICES= timeout 300 \
  taskset -c 10-13 bash benchmarks/cpu_vllm_kernels.sh > "$D/vllm_cpu_log.txt" 2>&1; \
  cp benchmarks/results/cpu_ratios_vllm_cpu_*.json "$D/" 2>/dev/null) &
i=0
for cap in none avx512 avx2; do
  env=(); [ $cap != none ] && env=(W4A8_KERNELS_MAX_ISA=$cap)
  [ $cap = avx2 ] && env+=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2)
  cores=$((4 + 2 * i)),$((5 + 2 * i)); [ $i = 2 ] && cores=14,15
  ( env "${env[@]}" CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-$cap timeout 240 taskset -c $cores \
      python3 -m pytest tests/kernels tests/test_bench.py tests/catalog/test_kernels_catalog.py -q -rs \
      -p no:cacheprovider -k "not triton and not humming and not machete and not gpu_bench and not wheel_install" \
      > "$D/pytest_cap_$cap.txt" 2>&1 ) &
  i=$((i + 1))
done
mkdir -p .machete && cp .machete-h100/libmachete_w4a16.so .machete/
left=$(( 480 - (SECONDS - t0) ))
[ $left -gt 40 ] && timeout $(( left + 20 )) taskset -c 0,1 python3 benchmarks/gpu_bench.py --out "$R/gpu" \
  --commit "$(cat "$R/commit.txt")" --phases bench --budget-s "$left" --no-peers \
  --engines vllm_humming,vllm_humming_int8,vllm_machete --shapes "28672x8192,4096x14336,7392x8192" \
  --ms "1,16,128,1024,4096" > "$R/gpu_bench_log.txt" 2>&1
echo "gpu bench: $((SECONDS - t0)) s"
wait
echo "all: $((SECONDS - t0)) s"
for f in "$D"/pytest_cap_*.txt; do echo "$f: $(tail -1 "$f")"; done
tail -12 "$D/vllm_cpu_log.txt"; tail -6 "$D/validate_log.txt"
tar -czf "$OUT/run.tar.gz" -C "$OUT" run && echo "packed: $(du -h "$OUT/run.tar.gz" | cut -f1)"
