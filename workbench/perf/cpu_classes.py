"""CPU classes: the vector / matrix ISA a CPU part runs each CPU path's inner loop on, and
how much faster one class runs a path than another.

A CPU preset's prediction is the committed CPU results' fits (one AVX2 machine) carried to
the preset: weight and activation traffic by bandwidth, multiply-adds by the rate the
preset's own ISA gives the path at that M (the W4A8 engine's int8 dot products, AMX tiles
from the M where the engine switches to them, bf16 where the part has it natively, fp32
where bf16 is computed in fp32; vLLM's x86 Dynamic4bit loop in fp32, KleidiAI's in int8).

Where the preset's class is not the class the fits were made on, the datasheet ratio of two
ISAs says more than a path reaches: the AMX Xeon of benchmarks/results/cpu_bounds_t2.json,
run whole and capped to AVX2 (cpu_bounds_t2_avx2.json: same machine, bandwidth and clock),
runs W4A8 4.4-5.6x faster with AMX where the tiles' peak is 32x. So a path's class speedup
is the smaller of the datasheet ratio and the one measured across classes, and the band is
widened by the spread of the measured ratios over M.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path

__all__ = ["CpuClass", "class_of_preset", "host_class", "speedup", "CROSS_CLASS_WIDEN",
           "CPU_CALL_FLOOR_US", "AMX_FROM_M", "GPU_CALL_FLOOR_US", "cross_class_spread"]

_RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"

# The per-call floor: no call costs less than its fixed overhead. CPU: one torch op's
# dispatch from Python, timed on this project's AVX2 EPYC host (torch.mm of 1 x 1, fastest
# of 20000 calls, 1 thread: 1.66 us), rounded down. GPU: the fastest kernel call in
# benchmarks/results/h200_bench.json (the int8 quantizer, 1.92 us), rounded down.
CPU_CALL_FLOOR_US = 1.5
GPU_CALL_FLOOR_US = 1.9


class CpuClass(Enum):
    AVX2 = "avx2"  # AVX2 + FMA: vpmaddubsw int8, no native bf16
    AVX512 = "avx512"  # AVX-512 VNNI + BF16
    AMX = "amx"  # AVX-512 VNNI + BF16, AMX tiles (int8, bf16)
    ARM_SVE = "arm-sve"  # SVE sdot / i8mm, bfmmla
    RVV = "rvv"  # one 128-bit vector pipe, bf16 computed in fp32
    POWER_MMA = "power-mma"  # Power10 MMA


@dataclass(frozen=True)
class _Rates:
    """Operations per cycle per core (hardware.json's `derived` lines say where from)."""
    fp32: int
    bf16: int | None  # None: computed in fp32
    int8: int  # vector int8 dot products
    tile_int8: int | None = None  # AMX
    tile_bf16: int | None = None


_RATES = {CpuClass.AVX2: _Rates(32, None, 64), CpuClass.AVX512: _Rates(32, 64, 128),
          CpuClass.AMX: _Rates(64, 128, 256, 2048, 1024), CpuClass.ARM_SVE: _Rates(32, 64, 128),
          CpuClass.RVV: _Rates(8, None, 16), CpuClass.POWER_MMA: _Rates(32, 64, 128)}

_PRESET_CLASS = {"x86-avx2": CpuClass.AVX2, "x86-avx512": CpuClass.AVX512, "zen4-zentorch": CpuClass.AVX512,
                 "x86-spr-amx": CpuClass.AMX, "arm-kleidiai": CpuClass.ARM_SVE,
                 "arm-no-dyn-quant": CpuClass.ARM_SVE, "riscv": CpuClass.RVV, "powerpc": CpuClass.POWER_MMA}
# The W4A8 engine's first M on AMX tiles (kernels/w4a8_kernels/cpu_w4a8.py engine_for: AMX from 24 tokens).
AMX_FROM_M = 24
# path -> the bench record names of cpu_bounds_*.json that time it
_BOUNDS_NAMES = {"w4a8_native": ("w4a8_per_channel", "w4a8_g128"), "w4a16_fallback": ("w4a16_fallback",),
                 "dense": ("dense",), "bf16_dense": ("dense",), "int8_mm": ("fbgemm_w8a8_dynamic",),
                 "vllm_dynamic4bit": ("w4a8_per_channel", "w4a8_g128")}


def class_of_preset(preset: str) -> CpuClass:
    return _PRESET_CLASS[preset]


def host_class(flags: frozenset[str], cap: str | None) -> CpuClass:
    """This machine's class from its /proc/cpuinfo flags and the ISA cap in force
    ($W4A8_KERNELS_MAX_ISA: kernels/w4a8_kernels/_native_lib.py)."""
    amx = "amx_int8" in flags and cap is None
    avx512 = {"avx512_vnni", "avx512_bf16"} <= flags and cap in (None, "avx512")
    return CpuClass.AMX if amx else CpuClass.AVX512 if avx512 else CpuClass.AVX2


def _dtype_rate(cls: CpuClass, path: str, m: int) -> float:
    """Operations per cycle per core of what `path` multiplies with at M tokens on `cls`."""
    r = _RATES[cls]
    # Dynamic4bit on Arm is KleidiAI's int8 kernels (the only Arm class is SVE)
    if path in ("w4a8_native", "int8_mm") or (path == "vllm_dynamic4bit" and cls is CpuClass.ARM_SVE):
        # int8 dot products; AMX tiles from the engine's switch M (oneDNN's _int_mm alike)
        return float(r.tile_int8 if r.tile_int8 and m >= AMX_FROM_M else r.int8)
    if path == "vllm_dynamic4bit":  # x86: aten's reference loop, in fp32
        return float(r.fp32)
    if path == "dense":  # the fastest of fp32 and bf16
        return float(max(r.fp32, r.tile_bf16 or 0, r.bf16 or 0))
    bf16 = r.tile_bf16 if r.tile_bf16 and m >= AMX_FROM_M else r.bf16
    return float(bf16 or r.fp32)  # W4A16 and bf16 GEMMs: bf16 where native, else fp32


@lru_cache(maxsize=None)
def _measured_speedups(path: str) -> tuple[float, ...]:
    """AMX-class time over the AVX2-capped time of the same machine, per M (cpu_bounds_t2*.json)."""
    try:
        whole = json.loads((_RESULTS / "cpu_bounds_t2.json").read_text())["m"]
        capped = json.loads((_RESULTS / "cpu_bounds_t2_avx2.json").read_text())["m"]
    except (OSError, ValueError, KeyError):
        return ()
    out = []
    for m in whole:
        for name in _BOUNDS_NAMES.get(path, ()):
            a, b = whole[m]["timings"].get(name), capped.get(m, {}).get("timings", {}).get(name)
            if a and b:
                out.append(b["p50_ms"] / a["p50_ms"])
    return tuple(out)


def cross_class_spread(path: str) -> float:
    """Log-width of the measured cross-class ratios of a path over M (0 where none)."""
    r = _measured_speedups(path)
    return math.log(max(r) / min(r)) if len(r) > 1 else 0.0


# The band's extra log-width for a prediction carried across CPU classes where no ratio of
# that path was measured across classes: the widest measured spread (W4A8, AVX2 to AMX).
CROSS_CLASS_WIDEN = 0.5


def speedup(path: str, src: CpuClass, dst: CpuClass, m: int) -> float:
    """How many times faster per core per cycle `dst` multiplies for `path` at M than `src`:
    the datasheet ratio, held to the largest measured across classes where one was."""
    ratio = _dtype_rate(dst, path, m) / _dtype_rate(src, path, m)
    measured = _measured_speedups(path)
    if measured and ratio > 1 and {src, dst} <= {CpuClass.AVX2, CpuClass.AMX, CpuClass.AVX512}:
        ratio = min(ratio, max(measured))
    return ratio
