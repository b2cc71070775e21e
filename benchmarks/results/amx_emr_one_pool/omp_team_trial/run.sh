#!/usr/bin/env bash
# experiment (not committed): our pool vs torch's OpenMP team for the C engines' items
set -o pipefail
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=
D=$OUT/run; mkdir -p $D; t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache
taskset -c 2,3 python3 -m workbench platforms --host > $D/platforms.txt 2>&1; grep "native engine" $D/platforms.txt
for team in 0 1; do
  export W4A8_SCHED_TEAM=$team
  taskset -c 2,3 timeout 120 python3 benchmarks/bench_cpu_ratios.py --threads 2 --sections 1 --out $D/t$team --tag amx > $D/ratios_$team.txt 2>&1
  echo "team=$team ratios $((SECONDS-t0))s"; grep "^\[" $D/ratios_$team.txt
  taskset -c 2,3 timeout 60 python3 benchmarks/bench_cpu_bounds.py --threads 2 --quick --out $D/t$team > $D/bounds_$team.txt 2>&1
  echo "team=$team bounds $((SECONDS-t0))s"; grep "^\[decode\]" $D/bounds_$team.txt; grep "^\[M=128\]" $D/bounds_$team.txt | cut -c1-120
  taskset -c 2,3 timeout 60 python3 benchmarks/bench_under_load.py --cycles 2 --phase-s 3 --out $D/t$team/under_load.json > $D/load_$team.txt 2>&1
  echo "team=$team load $((SECONDS-t0))s"; grep "^w4a8_native\|^M =" $D/load_$team.txt
done
tar -czf $OUT/run.tar.gz -C $OUT run
