#!/usr/bin/env bash
# One call on a lent host with an AMX CPU (< 9 minutes): the AMX tests and the tile-model
# tests, then the group-pass probe (amx_group_pass_probe.py), alone on two pinned cores
# (2, 3); then the kernel tests under each W4A8_KERNELS_MAX_ISA cap at once, on cores 4-15.
# Run on a tree with benchmarks/results/amx_emr_group_pass/group_pass.patch applied.
#   OUT=dir [PASSES="0 2 4 8"] bash benchmarks/amx_group_pass_run.sh     (carried: .whl/)
. benchmarks/lent_host_setup.sh
lscpu > "$D/machine.txt"
if ! grep -q -m1 amx_int8 /proc/cpuinfo; then echo "no AMX on this CPU: $(grep -m1 "model name" /proc/cpuinfo)"; exit 0; fi
cpu() { CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache taskset -c 2,3 "$@"; }
cpu timeout 150 python3 -m pytest tests/kernels/test_amx_order.py tests/kernels/test_amx_tile_model.py \
  tests/kernels/test_admission.py tests/kernels/test_sched_stall.py -q -rs -p no:cacheprovider > "$D/amx_pytest.txt" 2>&1
echo "amx tests: $((SECONDS - t0)) s: $(tail -1 "$D/amx_pytest.txt")"; grep "^FAILED" "$D/amx_pytest.txt" | head
THREADS=2 cpu timeout 260 python3 benchmarks/amx_group_pass_probe.py ${PASSES:-0 2 4 8} > "$D/probe.jsonl" 2> "$D/probe_err.txt"
echo "probe: $((SECONDS - t0)) s"; grep -v provenance "$D/probe.jsonl" | cut -c1-600; tail -3 "$D/probe_err.txt"
i=0
for cap in none avx512 avx2; do
  env=(); [ $cap != none ] && env=(W4A8_KERNELS_MAX_ISA=$cap)
  [ $cap = avx2 ] && env+=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2)
  cores=$((4 + 4 * i))-$((7 + 4 * i))
  ( env "${env[@]}" CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-$cap timeout $(( 500 - (SECONDS - t0) )) \
      taskset -c $cores python3 -m pytest tests/kernels -q -rs -p no:cacheprovider \
      -k "not gpu_bench and not triton and not machete and not humming and not wheel_install" \
      > "$D/kernels_cap_$cap.txt" 2>&1 ) &
  i=$((i + 1))
done
wait
echo "all: $((SECONDS - t0)) s"
for f in "$D"/kernels_cap_*.txt; do echo "$f: $(tail -1 "$f")"; grep "^FAILED" "$f" | head -8; done
tar -czf "$OUT/run.tar.gz" -C "$OUT" run
