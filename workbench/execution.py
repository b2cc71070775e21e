"""Pair what vLLM would run with the kernel paths that can compute it here.

`plan_execution(runtime)` reads the `Runtime` a trace carries (what the selected kernel or INC
method computes, decided once by the dispatch rules) and says:

- what the engine computes for this layer (real W4A8, W4A8-FP8, weight-only W4A16, or nothing
  when vLLM fails after selection),
- which of our paths models it on this machine (`path`) and on a CUDA host (`gpu_path`), and
  how faithfully: "same op" (the engine's own op runs here), "same numerics" (its rounding
  steps reproduced), or "same math" (the same W4A8/W4A16 math through another kernel: speed
  is this host's, not the engine's),
- the W4A16 fallback to compare against.

It also composes the engine paths whose rules the kernels package cannot hold: Marlin's
W4A8-INT8 (`VLLM_MARLIN_INPUT_DTYPE=int8`), whose group scales become int16 levels
(`marlin_w4a8_int8`), and INC's XPU W4A8 policy (`inc_xpu_w4a8`, and
`inc_xpu_w4a8_bf16_misread` showing what its fp16 scale copy prevents), whose token threshold
and accepted layers are the rule set's INC trace.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from w4a8_kernels import engine_paths
from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.quant import quantize_per_token_int8
from w4a8_kernels.registry import PATHS, Computes, Int4Weight, KernelPath
from workbench.dispatch.runtime_text import describe_runtime
from workbench.dispatch.types import Activation, Runtime, ValueEnum
from workbench.dispatch.versions import pinned
from workbench.errors import InvalidInputError

__all__ = ["ExecutionPlan", "Fidelity", "plan_execution", "plan_from_trace", "default_bench_paths",
           "GPU_STAND_INS", "STAND_IN_LABEL", "ENGINE_LABEL", "path_role", "execution_path",
           "execution_path_names", "marlin_int8_scales", "marlin_w4a8_int8",
           "MARLIN_W4A8_INT8", "INC_XPU_W4A8", "INC_XPU_W4A8_BF16_MISREAD",
           "inc_xpu_w4a8_runtime"]

# A CPU path -> the Triton path computing the same math on a CUDA host.
_GPU_TWIN = {"w4a8_native": "triton_w4a8", "w4a16_fallback": "triton_w4a16"}
# This project's portable stand-ins on a CUDA host, shown beside what vLLM runs.
GPU_STAND_INS = ("triton_w4a8", "triton_w4a16")
STAND_IN_LABEL = "this project's portable stand-in"
# Paths that run the engine's own op, or reproduce its rounding steps.
_SAME_OP = {"vllm_dynamic4bit", "vllm_humming", "vllm_humming_int8", "vllm_machete",
            "vllm_int4_scaled_mm", "vllm_cpu_gemm_wna16"}
# The selected kernel -> (its own path on a CUDA host, the W4A16 path vLLM runs beside it).
_ENGINE_ON_GPU = {"HummingLinearKernel": ("vllm_humming", "vllm_humming"),
                  "MacheteLinearKernel": ("vllm_machete", "vllm_machete")}
_SAME_NUMERICS = {"vllm_int4_scaled_mm_emulated", "inc_xpu_w4a8", "marlin_w4a8_int8"}
# vLLM's own CPU op -> (its kernel in w4a8_kernels.vllm_cpu, the path emulating it): a plan runs
# the op where it is built and admitted here, its emulation elsewhere (a plan never starts the
# minutes-long build; naming the path to `bench` does).
_OWN_CPU_OP = {"vllm_int4_scaled_mm": ("int4_scaled_mm", "vllm_int4_scaled_mm_emulated")}


class Fidelity(ValueEnum):
    """How faithfully a path of ours models what vLLM runs (prints as its value)."""

    SAME_OP = "same op"
    """The engine's own op runs here: its speed and its numerics."""
    SAME_NUMERICS = "same numerics"
    """The engine's rounding steps reproduced by another op: its numerics, not its speed."""
    SAME_MATH = "same math"
    """The same W4A8 / W4A16 math through another kernel: this host's speed, not the engine's."""
    NONE = "none"
    """Nothing here models it (vLLM selected nothing, or fails after selection)."""


@dataclass(frozen=True)
class ExecutionPlan:
    selected: str | None
    computes: str  # "w4a8", "w4a16", "w4a8-fp8" or "none" ("w8..." for MXFP8 weights)
    path: str | None  # our path modelling it on this host
    gpu_path: str | None  # our path modelling it on a CUDA host
    fidelity: Fidelity
    fallback: str  # the W4A16 path to compare with
    note: str  # the runtime sentence
    available: bool  # `path` can run on this machine
    why: str  # why not, or the probe's note

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def runs_engine(self) -> bool:
        """`path` is the kernel vLLM itself runs (its own op), not a model of it."""
        return self.fidelity is Fidelity.SAME_OP

    @property
    def native(self) -> str:
        """This project's W4A8 native kernel on the plan's device."""
        return "triton_w4a8" if self.gpu else "w4a8_native"

    @property
    def gpu(self) -> bool:
        return self.fallback in _GPU_FALLBACKS

    def paths_to_compare(self) -> list[str]:
        """What the engine runs (or its model), the W4A16 fallback and our W4A8 native,
        deduplicated; on a GPU host this project's Triton stand-ins follow."""
        seen = []
        stand_ins = GPU_STAND_INS if self.gpu else ()
        for p in (self.path, self.fallback, self.native, *stand_ins):
            if p and p not in seen:
                seen.append(p)
        return seen


_GPU_FALLBACKS = {"triton_w4a16", "vllm_humming", "vllm_machete"}


def _engine_gpu_path(runtime: Runtime) -> tuple[str | None, str | None]:
    """vLLM's own kernel for this runtime on a CUDA host, and the W4A16 path vLLM runs beside
    it; (None, None) where the selected kernel has no path of its own here."""
    own, fallback = _ENGINE_ON_GPU.get(runtime.method, (None, None))
    if own == "vllm_humming" and runtime.activation is Activation.INT8:
        own = "vllm_humming_int8"
    if own is not None and runtime.fails_at is not None:
        return None, None
    return own, fallback


def plan_execution(runtime: Runtime | None, *, cuda: bool | None = None) -> ExecutionPlan:
    """The runnable model of one vLLM runtime (None: vLLM selected nothing).

    `cuda`: whether the plan is for a CUDA host (default: whether this machine has a GPU).
    There a trace that selects Humming or Machete runs that kernel itself ("same op"), and the
    W4A16 it is compared with is the one vLLM runs; our Triton kernels stay beside it as
    stand-ins. Elsewhere the plan runs this project's model of the kernel."""
    if runtime is not None and not isinstance(runtime, Runtime):
        raise InvalidInputError(f"runtime: a dispatch Runtime or None, got {type(runtime).__name__}")
    if cuda is None:
        cuda = torch.cuda.is_available()
    fallback = "triton_w4a16" if cuda else "w4a16_fallback"
    if runtime is None:
        return ExecutionPlan(None, "none", None, None, Fidelity.NONE, fallback,
                             "vLLM found no kernel (the trace holds its error): nothing runs",
                             False, "no runnable path models this kernel")
    cpu_path = runtime.emulation
    engine, engine_fallback = _engine_gpu_path(runtime)
    gpu_path = engine or (_GPU_TWIN.get(cpu_path) if cpu_path else None)
    if cuda and engine_fallback is not None:
        fallback = engine_fallback
    path = gpu_path if (cuda and gpu_path) else cpu_path
    if path in _OWN_CPU_OP:
        from w4a8_kernels.vllm_cpu import admitted
        kernel, emulation = _OWN_CPU_OP[path]
        path = path if admitted(kernel) else emulation
    if path is None:
        fidelity, available = Fidelity.NONE, False
        why = (f"vLLM fails {runtime.fails_at}: nothing runs" if runtime.fails_at
               else f"no runnable model of {runtime.weight_bits}-bit weights here"
               if runtime.weight_bits != 4
               else f"no runnable model of {runtime.activation} activations here")
    else:
        fidelity = (Fidelity.SAME_OP if path in _SAME_OP else
                    Fidelity.SAME_NUMERICS if path in _SAME_NUMERICS else Fidelity.SAME_MATH)
        available, why = execution_path(path).probe()
    return ExecutionPlan(runtime.method, runtime.computes, path, gpu_path, fidelity, fallback,
                         describe_runtime(runtime), available, why)


def plan_from_trace(trace: Any, *, cuda: bool | None = None) -> ExecutionPlan:
    """`plan_execution` of a dispatch Trace's `runtime_detail`."""
    return plan_execution(getattr(trace, "runtime_detail", None), cuda=cuda)


ENGINE_LABEL = "what vLLM runs"


def path_role(name: str) -> str:
    """How a face labels a path: vLLM's own kernel, this project's stand-in, or nothing."""
    if name in _SAME_OP:
        return ENGINE_LABEL
    if name in GPU_STAND_INS:
        return STAND_IN_LABEL
    if name == "vllm_humming_int8_forced":
        return "not a vLLM path"
    return ""


def default_bench_paths(host: Any) -> list[str]:
    """The paths `bench` times by default on a host (a `Platform` value): on a CUDA host what
    vLLM runs there (Humming, where installed), this project's Triton stand-ins and cuBLAS
    bf16; on a CPU host this project's W4A8 native and W4A16 fallback."""
    if getattr(host, "device", None) != "cuda":
        return ["w4a8_native", "w4a16_fallback"]
    engine = ["vllm_humming", "vllm_humming_int8"] if host.has_package("humming") else []
    return [*engine, *GPU_STAND_INS, "cublas_bf16"]


# --------------------------------------------------------------------------- Marlin W4A8-INT8

def marlin_int8_scales(scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """`marlin_act_int8_process_scales` (layers/quantization/utils/marlin_utils.py:544-548).

    The layer's group scales, in the model dtype as vLLM holds them, become integers
    round(s / max(s) * 4096) (each op rounded in `dtype`, as torch does it on the GPU); the
    lost factor max(s) / 4096 (float32) moves onto the activation scales. Returns the int64
    levels [N, G] and that float32 factor.
    """
    top = pinned().MARLIN_INT8_SCALE_LEVELS  # the scales become multiples of max / this
    s = scales.to(dtype)
    smax = s.max()
    levels = (s / smax * top).round().to(torch.int16)
    return levels.to(torch.int64), (1 / top) * smax.float()


def _marlin_prepare(w: Int4Weight) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    levels, factor = marlin_int8_scales(w.scales)
    return w.w_q.to(torch.float32), levels, factor, w.effective_group


def marlin_w4a8_int8(x: torch.Tensor, prepared: tuple) -> torch.Tensor:
    """What Marlin's int8-activation GEMM computes (csrc/quantization/marlin/marlin_template.h).

    Per-token int8 activations (`per_token_quant_int8`); each group's exact int8 x int4 dot is
    multiplied by its int16 scale level and summed in an int32 accumulator (which wraps, as the
    kernel's does: marlin_template.h:1129-1150); the sum becomes float32 (`__int2float_rn`) and
    is scaled by the token's scale times max(s) / 4096 (marlin_utils.py:786, template:1626-1650);
    the output is written in the activations' dtype. x [M, K] -> [M, N] in x's dtype.
    """
    w, levels, factor, g = prepared
    x_q, x_scale = quantize_per_token_int8(x)
    xq = x_q.to(torch.float32)
    acc = torch.zeros(x.shape[0], w.shape[0], dtype=torch.int64)
    for j in range(w.shape[1] // g):
        cols = slice(j * g, (j + 1) * g)
        # |dot| <= 127 * 8 * g stays far below 2**24: float32 sums are exact integers.
        acc += (xq[:, cols] @ w[:, cols].t()).to(torch.int64) * levels[:, j]
    acc = (acc + 2**31) % 2**32 - 2**31
    out = acc.to(torch.float32) * (x_scale * factor)
    return out.to(x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.float32)


def _marlin_supports(w: Int4Weight) -> tuple[bool, str]:
    """Whether vLLM's Marlin runs these weights with int8 activations: the rule set's Marlin
    runtime says (asymmetric weights fail at load, a single group at the first forward)."""
    from workbench.dispatch import parse_env
    from workbench.dispatch.types import MPConfig
    from workbench.platforms import get_preset

    c = MPConfig.from_json({"weight_type": "uint4" if w.zeros is not None else "uint4b8",
                            "act_type": "int8", "group_size": w.effective_group,
                            "zero_points": w.zeros is not None,
                            "full_weight_shape": [w.k, w.n], "partition_weight_shape": [w.k, w.n]})
    r = pinned()
    rt = r.KERNELS_BY_NAME["MarlinLinearKernel"].runtime(c, get_preset("sm80-a100"), parse_env({}, r))
    if rt.fails_at is not None:
        return False, (f"vLLM's Marlin W4A8-INT8 fails at {rt.fails_at} for these weights: "
                       f"{rt.error_type}: {rt.error}")
    return True, ""


MARLIN_W4A8_INT8 = KernelPath(
    "marlin_w4a8_int8", "Marlin W4A8-INT8 numerics: int16 group-scale levels, int32 accumulation",
    Computes.W4A8, _marlin_prepare, marlin_w4a8_int8, supports=_marlin_supports, emulated=True,
    tags=("w4a8",))


# --------------------------------------------------------------------------- INC W4A8 on XPU

def inc_xpu_w4a8_runtime(w: Int4Weight) -> tuple[Runtime | None, str]:
    """What the rule set's INC makes of these weights on an XPU with the w4a8 backend:
    (its Runtime, "") or (None, vLLM's error). A symmetric 4-bit AutoRound layer of w's shape."""
    from workbench.dispatch import trace_inc

    t = trace_inc({"bits": 4, "group_size": w.group_size, "sym": w.zeros is None,
                   "in_features": w.k, "out_features": w.n, "layer_name": "layer"},
                  "xpu", {"VLLM_XPU_INC_WNA16_BACKEND": "w4a8"}, rules=pinned())
    if t.error is not None:
        return None, f"vLLM's INC W4A8 on XPU refuses these weights: {t.error_type}: {t.error}"
    return t.runtime_detail, ""


def _inc_supports(w: Int4Weight) -> tuple[bool, str]:
    rt, why = inc_xpu_w4a8_runtime(w)
    return rt is not None, why


def _inc_prepare(misread: bool) -> Any:
    def prepare(w: Int4Weight) -> engine_paths.IncXpuW4A8Prepared:
        rt, why = inc_xpu_w4a8_runtime(w)
        if rt is None:
            raise KernelInputError(why)
        return engine_paths.prepare_inc_xpu_w4a8(w.w_q, w.scales, w.group_size, w.zeros,
                                                 min_tokens=rt.min_tokens,
                                                 misread_bf16_scales=misread)
    return prepare


def _inc_probe() -> tuple[bool, str]:
    return True, "emulated: INC's per-call policy and fp16 scales, our integer GEMM (no XPU here)"


INC_XPU_W4A8 = KernelPath(  # the token threshold is the trace's (`Runtime.min_tokens`)
    "inc_xpu_w4a8", "INC XPU W4A8 policy: W4A16 below INC's token threshold, fp16 scales above",
    Computes.W4A8, _inc_prepare(False), engine_paths.inc_xpu_w4a8, probe=_inc_probe,
    supports=_inc_supports, activation_dtype=torch.bfloat16, emulated=True, tags=("engine",))
INC_XPU_W4A8_BF16_MISREAD = KernelPath(
    "inc_xpu_w4a8_bf16_misread", "INC XPU W4A8 handed bf16 scales: their bits read as fp16",
    Computes.W4A8, _inc_prepare(True), engine_paths.inc_xpu_w4a8, probe=_inc_probe,
    supports=_inc_supports, activation_dtype=torch.bfloat16, emulated=True,
    tags=("engine", "demo"))
_EXECUTION_PATHS = {p.name: p for p in (MARLIN_W4A8_INT8, INC_XPU_W4A8, INC_XPU_W4A8_BF16_MISREAD)}


def execution_path(name: str) -> KernelPath:
    """A kernel path by name: the kernels registry's, or one composed here."""
    path = _EXECUTION_PATHS.get(name) or PATHS.get(name)
    if path is None:
        raise KernelInputError(f"unknown kernel path {name!r}; known: "
                               f"{', '.join(execution_path_names())}")
    return path


def execution_path_names() -> list[str]:
    """Every path name `execution_path` accepts."""
    return [*PATHS, *_EXECUTION_PATHS]
