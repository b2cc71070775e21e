#!/usr/bin/env bash
# The AMX measurements alone on two pinned cores of an idle AMX host (issue figures: the AMX
# tests, bench_cpu_ratios.py sections 1-2, thread scaling, decode bounds, one busy process).
#   OUT=dir bash benchmarks/amx_ratios_run.sh    (carried: .whl/)
set -o pipefail
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=
D=$OUT/run; mkdir -p $D; t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache
P=2,3
taskset -c $P timeout 60 python3 -m pytest tests/kernels/test_amx_order.py tests/kernels/test_admission.py tests/kernels/test_sched_stall.py -q -p no:cacheprovider > $D/amx_pytest.txt 2>&1; tail -1 $D/amx_pytest.txt
taskset -c $P timeout 100 python3 benchmarks/bench_cpu_ratios.py --threads 2 --sections 1,2 --out $D --tag _amx > $D/ratios_log.txt 2>&1; grep "^\[" $D/ratios_log.txt
for t in 1 2; do taskset -c $P timeout 40 python3 -m workbench bench --platform host-cpu --threads $t --m 32,128 --n 4096 --k 4096 --group -1 --paths w4a8_native,int8_mm --repeats 9 > $D/bench_threads_$t.txt 2>&1; grep -h "^w4a8\|^int8" $D/bench_threads_$t.txt; done
taskset -c $P timeout 60 python3 benchmarks/bench_cpu_bounds.py --threads 2 --quick --out $D > $D/bounds_log.txt 2>&1; grep "^\[" $D/bounds_log.txt
taskset -c $P timeout 50 python3 benchmarks/bench_under_load.py --cycles 2 --phase-s 3 --out $D/cpu_under_load_amx.json > $D/under_load_log.txt 2>&1; tail -3 $D/under_load_log.txt
lscpu > $D/machine.txt; echo "all: $((SECONDS - t0)) s"
tar -czf $OUT/run.tar.gz -C $OUT run
