#!/usr/bin/env bash
# One device call on a Hopper machine, both halves of it at once (< 9 minutes):
#  - its GPU (cores 0-3): the GPU timer held to the harness (tests/kernels/test_gpu_timing.py,
#    Humming on a cold JIT cache), `bench` as a user runs it, the GPU kernel tests, then
#    benchmarks/gpu_bench.py on the benchmark shapes, labelled with the part the driver names;
#    vLLM's Machete built from the sdist on cores 4-7 meanwhile, then tested and timed;
#  - its CPU (cores 8-15; an Intel Xeon with AMX where the hosts have one): the CPU suite under
#    each W4A8_KERNELS_MAX_ISA cap the CPU allows, `bench` on every default path, and the AMX
#    measurements (benchmarks/amx_host_checks.sh).
# Carried, ignored: .whl/ (humming-kernels 0.1.19, compressed-tensors 0.17.0, pydantic and its
# stack, loguru) and .carry/ (the pinned vLLM sdist's csrc/ and CMakeLists.txt, CUTLASS's
# include/, as tarballs).
#   OUT=dir [GPU_BUDGET_S=200] [SHAPES=...] [MS=...] bash benchmarks/hopper_host_run.sh
set -o pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
: "${OUT:?set OUT to the results folder}"
t0=$SECONDS
R=$OUT/run
mkdir -p "$R"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache
mkdir -p /tmp/src && for t in .carry/*.tar.gz; do tar -xzf "$t" -C /tmp/src; done
{ lscpu; nvidia-smi; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > "$R/machine.txt" 2>&1
git rev-parse HEAD > "$R/commit.txt" 2>/dev/null

# -- the CPU half, in the background ---------------------------------------------------------
( taskset -c 8-15 bash benchmarks/amx_host_checks.sh "$R/cpu" ) > "$R/cpu_log.txt" 2>&1 &
cpu_pid=$!

# -- Machete from the sdist, in the background -----------------------------------------------
( WORKBENCH_VLLM_SRC=$(ls -d /tmp/src/vllm-*/ | head -1) CUTLASS_DIR=/tmp/src/cutlass-v4.7.0 JOBS=4 \
  taskset -c 4-7 bash benchmarks/build_machete.sh ) > "$R/machete_build_log.txt" 2>&1 &
build_pid=$!

# -- the GPU half -----------------------------------------------------------------------------
export HUMMING_CACHE_DIR=/tmp/humming-cold
timeout 150 taskset -c 0-3 python3 -m pytest tests/kernels/test_gpu_timing.py -q -rs -p no:cacheprovider \
  > "$R/gpu_timing_pytest.txt" 2>&1
echo "timer test: $((SECONDS - t0)) s"; tail -5 "$R/gpu_timing_pytest.txt"
timeout 90 taskset -c 0-3 python3 -m workbench bench --m 1,128,4096 --n 4096 --k 4096 \
  > "$R/bench_cli_gpu.txt" 2>&1
echo "bench: $((SECONDS - t0)) s"; cat "$R/bench_cli_gpu.txt" | head -30
timeout 120 taskset -c 0-3 python3 -m pytest tests/kernels/test_triton_kernels.py tests/kernels/test_vllm_humming.py \
  -q -rs -p no:cacheprovider -x > "$R/gpu_pytest.txt" 2>&1
echo "gpu tests: $((SECONDS - t0)) s"; tail -3 "$R/gpu_pytest.txt"
left=$(( 400 - (SECONDS - t0) ))
timeout $(( left + 20 )) taskset -c 0-3 python3 benchmarks/gpu_bench.py --out "$R/gpu" \
  --commit "$(cat "$R/commit.txt")" --phases bench --budget-s "$left" --no-peers \
  --engines vllm_humming,vllm_humming_int8 --shapes "${SHAPES:-4096x4096,8192x8192,28672x8192,4096x14336,7392x8192}" \
  --ms "${MS:-1,16,128,1024,4096}" > "$R/gpu_bench_log.txt" 2>&1
echo "gpu bench: $((SECONDS - t0)) s"; tail -3 "$R/gpu_bench_log.txt"
wait $build_pid && echo "machete built: $((SECONDS - t0)) s" || echo "machete build failed"
if [ -f .machete/libmachete_w4a16.so ]; then
  cp .machete/BUILD.txt "$R/machete_build.txt"; cp .machete/libmachete_w4a16.so "$R/"
  timeout 60 taskset -c 0-3 python3 -m pytest tests/kernels/test_vllm_machete.py -q -rs -p no:cacheprovider \
    > "$R/machete_pytest.txt" 2>&1; tail -2 "$R/machete_pytest.txt"
  left=$(( 500 - (SECONDS - t0) ))
  [ $left -gt 30 ] && timeout $(( left + 20 )) taskset -c 0-3 python3 benchmarks/gpu_bench.py --out "$R/machete" \
    --commit "$(cat "$R/commit.txt")" --phases bench --budget-s "$left" --no-peers --engines vllm_machete \
    --paths vllm_machete --groups 128,-1 --shapes "4096x4096,8192x8192,28672x8192" --ms "1,16,128,1024,4096" \
    > "$R/machete_bench_log.txt" 2>&1
  echo "machete bench: $((SECONDS - t0)) s"
fi
wait $cpu_pid; echo "cpu half: $((SECONDS - t0)) s"; tail -30 "$R/cpu_log.txt"
tar -czf "$OUT/run.tar.gz" -C "$OUT" run && echo "packed: $(du -h "$OUT/run.tar.gz" | cut -f1)"
