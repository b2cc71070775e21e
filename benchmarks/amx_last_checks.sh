#!/usr/bin/env bash
# An AMX host's remaining CPU checks in one device call (< 5 minutes): quiet on two pinned
# cores, the host calibration held to shapes it never timed (validate_perf.py --cpu-only) and
# the 64 x 64 layer's prediction, then the AMX engine's thread scaling (amx_scaling_probe.py);
# beside them on other cores, vLLM's own CPU ops built from the carried sdist, tested and
# timed (cpu_vllm_kernels.sh), then the bad-input tests that build them.
#   OUT=dir bash benchmarks/amx_last_checks.sh     (carried: .whl/, .carry/)
set -o pipefail
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=
: "${OUT:?set OUT to the results folder}"
t0=$SECONDS
D=$OUT/run
mkdir -p "$D"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache
mkdir -p /tmp/src && for t in .carry/vllm-*.tar.gz; do tar -xzf "$t" -C /tmp/src; done
export W4A8_VLLM_SDIST=$(ls -d /tmp/src/vllm-*/ | head -1)  # the one sdist carried
( THREADS=2 QUICK=1 PYTHON=python3 timeout 270 taskset -c 8-15 bash benchmarks/cpu_vllm_kernels.sh \
    > "$D/vllm_cpu_log.txt" 2>&1; cp benchmarks/results/cpu_ratios_vllm_cpu_*.json "$D/" 2>/dev/null
  timeout 60 taskset -c 8-15 python3 -m pytest tests/kernels/test_registry_and_bad_input.py -q -rs \
    -p no:cacheprovider -k "vllm" > "$D/registry_vllm_pytest.txt" 2>&1 ) &
P=2,3
taskset -c $P timeout 150 python3 benchmarks/validate_perf.py --cpu-only --rounds 2 > "$D/validate_perf_log.txt" 2>&1
cp benchmarks/results/perf_validation.json "$D/" 2>/dev/null
echo "validate: $((SECONDS - t0)) s"; grep -i "median\|p90\|band" "$D/validate_perf_log.txt" | tail -8
taskset -c $P timeout 60 python3 -m workbench predict --platform host-cpu --m 1,16,128 --n 64 --k 64 --group -1 \
  > "$D/predict_64.txt" 2>&1; cat "$D/predict_64.txt" | head -8
taskset -c $P timeout 90 python3 benchmarks/amx_scaling_probe.py > "$D/amx_scaling.json" 2> "$D/amx_scaling_err.txt"
cat "$D/amx_scaling.json"
OMP_WAIT_POLICY=PASSIVE taskset -c $P timeout 90 python3 benchmarks/amx_scaling_probe.py > "$D/amx_scaling_passive.json" 2>&1
cat "$D/amx_scaling_passive.json"
echo "quiet part: $((SECONDS - t0)) s"
wait
echo "all: $((SECONDS - t0)) s"
grep -E "ADMITTED|REFUSED|passed|failed" "$D/vllm_cpu_log.txt" | head; tail -3 "$D/registry_vllm_pytest.txt"
tail -15 "$D/vllm_cpu_log.txt"
tar -czf "$OUT/run.tar.gz" -C "$OUT" run
