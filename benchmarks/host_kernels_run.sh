#!/usr/bin/env bash
# The kernel tests on whichever lent host's CPU comes (< 5 minutes): its lscpu, each C engine's
# self-test verdict (`bench --list`), then tests/kernels under each W4A8_KERNELS_MAX_ISA cap at
# once on separate cores, CUDA hidden as in CI (GPU, Triton, Machete, Humming and wheel tests
# left out: they have their own runs).
#   OUT=dir [COMMIT=sha] bash benchmarks/host_kernels_run.sh     (carried: .whl/)
. benchmarks/lent_host_setup.sh
{ lscpu; echo "commit: ${COMMIT:-unknown}"; } > "$D/machine.txt"
grep -m1 "model name" /proc/cpuinfo; grep -o -w "avx2\|avx512f\|avx512_vnni\|avx512_bf16\|amx_int8" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache timeout 120 python3 -m workbench bench --list > "$D/bench_list.txt" 2>&1
sed -n "/native engines/,\$p" "$D/bench_list.txt"
i=0
for cap in none avx512 avx2; do
  env=(); [ $cap != none ] && env=(W4A8_KERNELS_MAX_ISA=$cap)
  [ $cap = avx2 ] && env+=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2)
  cores=$((4 + 4 * i))-$((7 + 4 * i))
  ( env "${env[@]}" CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-$cap timeout $(( 280 - (SECONDS - t0) )) \
      taskset -c $cores python3 -m pytest tests/kernels -q -rs -p no:cacheprovider \
      -k "not gpu_bench and not triton and not machete and not humming and not wheel_install" \
      > "$D/kernels_cap_$cap.txt" 2>&1 ) &
  i=$((i + 1))
done
wait
echo "all: $((SECONDS - t0)) s"
for f in "$D"/kernels_cap_*.txt; do echo "$f: $(tail -1 "$f")"; grep "^FAILED" "$f" | head -8; done
tar -czf "$OUT/run.tar.gz" -C "$OUT" run
