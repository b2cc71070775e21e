#!/usr/bin/env bash
# Builds the pinned vLLM's Machete W4A16 kernel (csrc/quantization/machete/ of the sdist) for
# sm_90a into .machete/libmachete_w4a16.so: a plain C ABI (kernels/machete/*.cu) that
# links neither torch nor libcuda, so it runs beside any torch on a Hopper GPU through ctypes
# (w4a8_kernels.machete_lib). No GPU is needed to build it.
#
#   WORKBENCH_VLLM_SRC=sdist CUTLASS_DIR=cutlass [CUDA_HOME=toolkit] [SCHEDULES="128x16_1 ..."] \
#   [JOBS=2] bash benchmarks/build_machete.sh
#
# CUTLASS_DIR: a CUTLASS checkout (its include/) at the revision the sdist's CMakeLists.txt pins
#   (CUTLASS_REVISION); a different major.minor is refused, a different patch level is reported.
#   From a clone: git --git-dir=CLONE archive vX.Y.Z include | tar -x -C build/cutlass-vX.Y.Z
#   (the library in .machete/ was built on v4.7.0, the newest tag of the clone at hand; the
#   sdist pins v4.7.1).
# CUDA_HOME: a CUDA 12.x/13.x toolkit. Without one, the CUDA 13.0 compiler wheels (nvcc, nvvm,
#   crt, runtime, cccl) are fetched with `pip download` into build/machete-cuda.
# SCHEDULES: "TMxTN_CM" tiles to build; default every schedule of vLLM's heuristic
#   (w4a8_kernels.machete_schedule.all_schedules). Objects are kept in build/machete and
#   rebuilt only when a source is newer, so a subset can be widened later.
# The library logs what it was built from in .machete/BUILD.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VLLM_SRC=${WORKBENCH_VLLM_SRC:?set WORKBENCH_VLLM_SRC to the unpacked vLLM sdist}
CUTLASS_DIR=${CUTLASS_DIR:?set CUTLASS_DIR to a CUTLASS checkout at the pinned revision}
JOBS=${JOBS:-2}
OBJ=$ROOT/build/machete
OUTDIR=$ROOT/.machete
LIB=$OUTDIR/libmachete_w4a16.so
MACHETE=$VLLM_SRC/csrc/quantization/machete
CAPI=$ROOT/kernels/machete
PY=${PYTHON:-python3}
[ -f "$MACHETE/machete_mm_kernel.cuh" ] || { echo "no Machete sources under $MACHETE" >&2; exit 2; }

# -- CUTLASS at the pinned revision ----------------------------------------------------------
pinned=$(sed -n 's/.*set(CUTLASS_REVISION "v\([0-9.]*\)").*/\1/p' "$VLLM_SRC/CMakeLists.txt" | head -1)
ver_h=$CUTLASS_DIR/include/cutlass/version.h
[ -f "$ver_h" ] || { echo "no CUTLASS headers: $ver_h missing" >&2; exit 2; }
have=$(awk '/define CUTLASS_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' "$ver_h")
if [ "${have%.*}" != "${pinned%.*}" ]; then
  echo "CUTLASS $have at $CUTLASS_DIR, the sdist pins $pinned: major.minor differ" >&2; exit 2
fi
[ "$have" = "$pinned" ] || echo "note: CUTLASS $have, the sdist pins $pinned (same major.minor)"

# -- a CUDA compiler -------------------------------------------------------------------------
if [ -z "${CUDA_HOME:-}" ]; then
  CUDA_WHEELS="nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85"
  tk=$ROOT/build/machete-cuda
  if [ ! -x "$tk/nvidia/cu13/bin/nvcc" ]; then
    mkdir -p "$tk/wheels"
    $PY -m pip download -q --no-deps -d "$tk/wheels" $CUDA_WHEELS
    for w in "$tk"/wheels/*.whl; do $PY -m zipfile -e "$w" "$tk"; done
    chmod +x "$tk"/nvidia/cu13/bin/* "$tk"/nvidia/cu13/nvvm/bin/*
  fi
  CUDA_HOME=$tk/nvidia/cu13
  CCCL_INC=(-I"$CUDA_HOME/include/cccl")
else
  CCCL_INC=()
  [ -d "$CUDA_HOME/include/cccl" ] && CCCL_INC=(-I"$CUDA_HOME/include/cccl")
fi
NVCC=$CUDA_HOME/bin/nvcc
export PATH=$CUDA_HOME/bin:$PATH
"$NVCC" --version | tail -2

# The kernel headers include torch's header-only stable API (the launchers' tensor glue, unused
# here): its headers are needed to compile, no torch library to link.
TORCH_INC=$($PY -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'include'))")

if [ -z "${SCHEDULES:-}" ]; then
  SCHEDULES=$(PYTHONPATH=$ROOT/kernels $PY -c "
from w4a8_kernels.machete_schedule import all_schedules
print(' '.join(f'{t[0]}x{t[1]}_{c[0]}' for t, c in all_schedules()))")
fi

# vLLM's flags for these sources (CMakeLists.txt, cmake/utils.cmake): torch's COMMON_NVCC_FLAGS
# less the __CUDA_NO_HALF* defines (CUDA >= 12), -DENABLE_FP8, --compress-mode=size (CUDA 13),
# RelWithDebInfo's -O2 -DNDEBUG (without host -g), sm_90a only. CUTLASS reaches
# cuTensorMapEncodeTiled through the runtime's driver entry point instead of linking libcuda
# (vLLM defines CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL and links it): the same driver call.
FLAGS=(-std=c++17 -O2 -DNDEBUG --expt-relaxed-constexpr -DENABLE_FP8 -DUSE_CUDA
       -DTORCH_TARGET_VERSION=0x020B000000000000ULL
       -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC,-fvisibility=hidden
       -I"$VLLM_SRC/csrc" -I"$MACHETE" -I"$CUTLASS_DIR/include" -I"$TORCH_INC" "${CCCL_INC[@]}")
"$NVCC" --version | grep -q 'release 1[3-9]' && FLAGS+=(--compress-mode=size)

mkdir -p "$OBJ" "$OUTDIR"
# Other flags or another compiler: every object is rebuilt.
echo "$NVCC ${FLAGS[*]}" > "$OBJ/flags.new"
cmp -s "$OBJ/flags.new" "$OBJ/flags.txt" || rm -f "$OBJ"/*.o
mv "$OBJ/flags.new" "$OBJ/flags.txt"
list=$OBJ/schedules.inc
{ printf '#define MACHETE_SCHEDULES'; for s in $SCHEDULES; do
    tm=${s%%x*}; rest=${s#*x}; printf ' X(%s, %s, %s)' "$tm" "${rest%_*}" "${s##*_}"; done; echo; } > "$list.new"
cmp -s "$list.new" "$list" && rm "$list.new" || mv "$list.new" "$list"

# An object is rebuilt when it is missing or older than a source it is built from.
deps=("$CAPI/machete_capi.cuh" "$MACHETE"/*.cuh "$VLLM_SRC"/csrc/cutlass_extensions/*.cuh
      "$VLLM_SRC"/csrc/cutlass_extensions/*.hpp "$VLLM_SRC"/csrc/cutlass_extensions/epilogue/*.hpp
      "$ver_h")
stale() {  # object source...
  local o=$1; shift
  [ -f "$o" ] || return 0
  local f; for f in "$@" "${deps[@]}"; do [ "$f" -nt "$o" ] && return 0; done
  return 1
}

compile_one() {  # one schedule TU: "TMxTN_CM"
  local s=$1 tm=${1%%x*} rest=${1#*x}; local tn=${rest%_*} cm=${1##*_}
  local o=$OBJ/sch_$s.o
  stale "$o" "$CAPI/machete_schedule.cu" || return 0
  local t0=$SECONDS
  "$NVCC" "${FLAGS[@]}" -DSCH_TM=$tm -DSCH_TN=$tn -DSCH_CM=$cm \
    -c "$CAPI/machete_schedule.cu" -o "$o.tmp" > "$OBJ/sch_$s.log" 2>&1 || { tail -30 "$OBJ/sch_$s.log" >&2; return 1; }
  mv "$o.tmp" "$o"; echo "built $s in $((SECONDS - t0)) s"
}
start=$SECONDS
jobs_failed=0
main_o=$OBJ/main.o
if stale "$main_o" "$CAPI/machete_capi.cu" "$list"; then
  ( "$NVCC" "${FLAGS[@]}" -DMACHETE_SCHEDULE_LIST="\"$list\"" -c "$CAPI/machete_capi.cu" \
      -o "$main_o.tmp" > "$OBJ/main.log" 2>&1 && mv "$main_o.tmp" "$main_o" && echo "built main" ) &
  main_pid=$!
else
  main_pid=
fi
# Schedules in parallel (each TU takes 2-6 CPU-minutes and ~4 GiB).
pids=()
for s in $SCHEDULES; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || jobs_failed=1; done
  compile_one "$s" & pids+=($!)
done
for p in "${pids[@]}" $main_pid; do wait "$p" || jobs_failed=1; done
[ "$jobs_failed" = 0 ] || { echo "a translation unit failed (logs in $OBJ)" >&2; tail -30 "$OBJ/main.log" >&2 || true; exit 1; }

objs=("$main_o"); for s in $SCHEDULES; do objs+=("$OBJ/sch_$s.o"); done
# Static cudart: nothing to match on the device but a driver for CUDA 13; --no-undefined
# proves no torch symbol slipped into the objects.
# (The compiler wheels keep the runtime in lib/, where nvcc.profile does not look.)
"$NVCC" -shared -cudart static -gencode arch=compute_90a,code=sm_90a "${objs[@]}" \
  -L"$CUDA_HOME/lib" -L"$CUDA_HOME/lib64" -Xlinker --no-undefined -o "$LIB.tmp"
mv "$LIB.tmp" "$LIB"
{ echo "built: $(date -u +%FT%TZ) in $((SECONDS - start)) s"
  echo "nvcc: $("$NVCC" --version | tail -1)"
  echo "cutlass: $have (pinned $pinned)"
  echo "vllm machete sources: $MACHETE"
  echo "schedules: $SCHEDULES"
  echo "wrapper sha256: $(cat "$CAPI"/machete_capi.cuh "$CAPI"/*.cu | sha256sum | cut -d' ' -f1)"
  echo "library sha256: $(sha256sum "$LIB" | cut -d' ' -f1) ($(stat -c %s "$LIB") bytes)"
} > "$OUTDIR/BUILD.txt"
cat "$OUTDIR/BUILD.txt"
