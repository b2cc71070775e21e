#!/usr/bin/env bash
# The test suite on a lent host's CPU (written for an Intel AMX host), as CI would run it (no GPU: CUDA hidden), under each
# W4A8_KERNELS_MAX_ISA cap at once on separate cores (< 10 minutes), after the host calibration's check alone, beside the GPU timing tests
# on cores 0-3 (`bench` and the Kernels page's measuring child against the harness, Humming's
# JIT on a cold cache). Left out, because this image lacks what they
# need and nothing can be installed there: the Streamlit pages (tests/ui, the app catalog) and
# the notebooks (Jupyter). vLLM's CPU ops build from the carried sdist.
# It runs on any lent host's CPU (lscpu first, in machine.txt); VALIDATE=0 leaves out the
# calibration check, which holds only where an AMX preset applies.
#   OUT=dir [VALIDATE=0] bash benchmarks/amx_suites_run.sh     (carried: .whl/, .carry/)
. benchmarks/lent_host_setup.sh
mkdir -p /tmp/src && for t in .carry/*.tar.gz; do tar -xzf "$t" -C /tmp/src; done
lscpu > "$D/machine.txt"
# first, alone on the machine: the host calibration held to unseen shapes, and the 64 x 64 layer
if [ "${VALIDATE:-1}" = 1 ]; then
CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache taskset -c 2,3 timeout 120 python3 \
  benchmarks/validate_perf.py --cpu-only --rounds 2 --out "$D/perf_validation_host.json" > "$D/validate_perf_log.txt" 2>&1
echo "validate: $((SECONDS - t0)) s"; grep -i "median\|p90\|band" "$D/validate_perf_log.txt" | tail -6
CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache taskset -c 2,3 timeout 40 python3 -m workbench bench \
  --platform host-cpu --threads 2 --m 1,16,128 --n 64 --k 64 --group -1 --paths w4a8_native,w4a16_fallback,bf16_dense \
  --repeats 15 > "$D/bench_64.txt" 2>&1
CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache taskset -c 2,3 timeout 40 python3 -m workbench predict \
  --platform host-cpu --m 1,16,128 --n 64 --k 64 --group -1 > "$D/predict_64.txt" 2>&1
fi
i=0
for cap in none avx512 avx2; do
  env=(); [ $cap != none ] && env=(W4A8_KERNELS_MAX_ISA=$cap)
  [ $cap = avx2 ] && env+=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2)
  cores=$((4 + 4 * i))-$((7 + 4 * i))
  ( env "${env[@]}" CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-$cap \
      W4A8_VLLM_SDIST=$(ls -d /tmp/src/vllm-*/ | head -1) timeout 430 taskset -c $cores \
      python3 -m pytest tests -q -rs -p no:cacheprovider --ignore=tests/ui --ignore=tests/test_notebooks.py \
      --ignore=tests/catalog/test_app_catalog.py > "$D/pytest_cap_$cap.txt" 2>&1 ) &
  i=$((i + 1))
done
export W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-gpu
timeout 300 taskset -c 0-3 python3 -m pytest tests/kernels/test_gpu_timing.py -q -rs -p no:cacheprovider \
  > "$D/gpu_timing_pytest.txt" 2>&1; echo "gpu tests: $((SECONDS - t0)) s: $(tail -1 "$D/gpu_timing_pytest.txt")"
grep -E "^E |FAILED" "$D/gpu_timing_pytest.txt" | head -8
wait
echo "all: $((SECONDS - t0)) s"
for f in "$D"/pytest_cap_*.txt; do echo "$f: $(tail -1 "$f")"; grep "^FAILED" "$f" | head -8; done
tar -czf "$OUT/run.tar.gz" -C "$OUT" run
