"""vLLM 0.33.0's MXFP8 linear kernel selection, as an INC MXFP8 layer reaches it.

Models `init_mxfp8_linear_kernel` (`vllm/model_executor/kernels/linear/__init__.py:958-1010`),
its `_POSSIBLE_MXFP8_KERNELS` (568-590), the MXFP8 kernels of `_LINEAR_BACKEND_KERNEL_MAP`
(285-345), and each kernel's `is_supported` / `can_implement` (`kernels/linear/mxfp8/*.py`).
This loop is not `choose_mp_linear_kernel`: the trace's steps hold it, its kernel stage has
no MP config.

FlashInfer, its CuTe-DSL module and b12x are no platform fields here: they are absent, as in
the recorded runs (a CUDA build of vLLM ships FlashInfer, requirements/cuda.txt:11, and its
kernels would come first on SM 10.x). Each runtime says so in its caveat.
"""
from __future__ import annotations

from dataclasses import replace

from workbench.dispatch.env import Env
from workbench.dispatch.trace import Outcome, Step, Trace
from workbench.dispatch.types import Runtime, activation_name, dtype
from workbench.dispatch.vllm_0_33.errors import VllmError
from workbench.dispatch.vllm_0_33.selector import prioritize_humming
from workbench.platforms import Platform

BLOCK = 32  # MXFP8_BLOCK_SIZE (layers/quantization/utils/mxfp8_utils.py:11)
MXFP8_DIR = "model_executor/kernels/linear/mxfp8/"
WEIGHT = "mxfp8 (float8_e4m3fn, one e8m0 scale per 32 along K)"
ERROR_HEADER = "Failed to find a kernel that can implement the MXFP8 linear layer. Reasons: \n"
ABSENT = ("FlashInfer (and its CuTe-DSL module) and b12x are not platform fields: absent, as in "
          "the recorded runs; a CUDA build of vLLM ships FlashInfer (requirements/cuda.txt:11)")


def _family(p: Platform, major: int) -> bool:
    """`is_device_capability_family(major * 10)`: the same major version."""
    return p.is_cuda() and p.capability is not None and p.capability // 10 == major // 10


def _has(p: Platform, cap: int) -> bool:
    """`has_device_capability(cap)` (False when the capability is unknown)."""
    return p.capability is not None and p.capability >= cap


def _mm_shape(n: int, k: int) -> tuple[bool, str | None]:
    """`_check_mm_mxfp8_shape` (mxfp8/flashinfer.py:27-38)."""
    if k < 128:
        return False, f"mm_mxfp8 requires K >= 128, got K={k}."
    if k % BLOCK != 0:
        return False, f"mm_mxfp8 requires K to be divisible by {BLOCK}, got K={k}."
    if n < 128:
        return False, f"mm_mxfp8 requires N >= 128, got N={n}."
    return True, None


class Kernel:
    """One MXFP8 kernel class: `is_supported()`, then `can_implement(config)`."""

    activation: str | None = None  # None: the model dtype (the op reads x as it comes)
    op = ""
    source = ""
    caveat = ""  # what the runtime leaves unmodelled beyond `ABSENT`

    @classmethod
    def is_supported(cls, p: Platform) -> tuple[bool, str | None]:
        return True, None

    @classmethod
    def can_implement(cls, n: int, k: int, p: Platform) -> tuple[bool, str | None]:
        return True, None


class FlashInferCutedslMxfp8LinearKernel(Kernel):
    @classmethod
    def is_supported(cls, p):  # mxfp8/flashinfer.py:132-142
        if not _family(p, 100):
            return False, "requires sm_100/sm_103 (Blackwell)"
        return False, "requires FlashInfer CuTe-DSL module"

    @classmethod
    def can_implement(cls, n, k, p):
        return _mm_shape(n, k)


class FlashInferCutlassMxfp8LinearKernel(Kernel):
    @classmethod
    def is_supported(cls, p):  # mxfp8/flashinfer.py:47-56
        if not (p.is_cuda() and _has(p, 100)):
            return False, "requires >=sm_100 (Blackwell)"
        return False, "requires FlashInfer"


class MarlinMxfp8LinearKernel(Kernel):
    op, source = "apply_mxfp8_marlin_linear", MXFP8_DIR + "marlin.py:59"

    @classmethod
    def is_supported(cls, p):  # mxfp8/marlin.py:17-26: is_fp8_marlin_supported, SM 7.5+
        return (True, None) if _has(p, 75) else (False, "Marlin FP8 not available")

    @classmethod
    def can_implement(cls, n, k, p):  # mxfp8/marlin.py:29-40
        if n <= 0 or k <= 0:
            return False, f"Marlin MXFP8 requires positive N and K, got N={n}, K={k}."
        if k % BLOCK != 0:
            return False, f"Marlin MXFP8 requires K to be divisible by {BLOCK}, got K={k}."
        return True, None


class B12xMxfp8LinearKernel(Kernel):
    @classmethod
    def is_supported(cls, p):  # mxfp8/b12x.py:49-63
        if not p.is_cuda():
            return False, "b12x MXFP8 kernels are only available on CUDA"
        if not _family(p, 120):
            return False, "b12x MXFP8 kernels require a Blackwell 12x device"
        return False, "Install the B12X backend with `pip install vllm[b12x]`"


class EmulationMxfp8LinearKernel(Kernel):
    # mxfp8/emulation.py:22-29 accepts everything; the forward dequantizes to the model dtype
    op, source = "torch.nn.functional.linear", MXFP8_DIR + "emulation.py:54-56"


class HummingMxfp8LinearKernel(Kernel):
    # the layer asks Humming for kMxfp8Dynamic inputs (mxfp8/humming.py:56-59)
    activation, op, source = "fp8", "apply_humming_linear", MXFP8_DIR + "humming.py:56-69"
    caveat = ("; Humming's input-schema check (utils/humming/schema.py), which may run another "
              "activation, is not modelled for MXFP8 weights")

    @classmethod
    def is_supported(cls, p):  # mxfp8/humming.py:25-37
        if not p.is_cuda():
            return False, "Humming only supported on CUDA"
        if not p.has_package("humming"):
            return False, "Humming is not installed"
        if not _has(p, 75):
            return False, "Humming only supported on SM75+"
        return True, None


class FlashInferTrtllmMxfp8LinearKernel(Kernel):
    @classmethod
    def is_supported(cls, p):  # mxfp8/flashinfer.py:205-215
        if not _family(p, 100):
            return False, "requires SM100-family GPU"
        return False, "requires FlashInfer"


class TorchMxFp8LinearKernel(Kernel):
    # x quantized to MXFP8, then torch._scaled_mm (mxfp8/pytorch.py:71-93)
    activation, op, source = "fp8", "torch._scaled_mm", MXFP8_DIR + "pytorch.py:71-93"

    @classmethod
    def is_supported(cls, p):  # mxfp8/pytorch.py:27-34
        if p.is_xpu() or (p.is_cuda() and _has(p, 90)):
            return True, None
        return False, "requires XPU or CUDA (>=sm_90) for native torch._scaled_mm"


class RocmDotScaledMxfp8LinearKernel(Kernel):
    activation, op, source = ("fp8", "rocm_mxfp8_block32_gemm",
                              MXFP8_DIR + "rocm_native.py:279-280")

    @classmethod
    def is_supported(cls, p):  # mxfp8/rocm_native.py:229-239; supports_mx (rocm.py:1251-1252)
        if not p.is_rocm():
            return False, "not ROCm"
        if not any(g in (p.gfx or "") for g in ("gfx95", "gfx1250")):
            return False, "native MX requires CDNA4 (gfx95x)"
        return True, None


class XPUMxFp8LinearKernel(Kernel):
    activation, op, source = "fp8", "torch.ops._xpu_C.fp8_gemm", MXFP8_DIR + "xpu.py:71-75"

    @classmethod
    def is_supported(cls, p):  # mxfp8/xpu.py:19-24
        return (True, None) if p.is_xpu() else (False, "XPUMxFp8 only support on XPU")


# `_POSSIBLE_MXFP8_KERNELS`, keyed by `current_platform._enum` (no CPU entry: [])
POSSIBLE: dict[str, list[type[Kernel]]] = {
    "cuda": [FlashInferCutedslMxfp8LinearKernel, FlashInferCutlassMxfp8LinearKernel,
             MarlinMxfp8LinearKernel, B12xMxfp8LinearKernel, EmulationMxfp8LinearKernel,
             HummingMxfp8LinearKernel, FlashInferTrtllmMxfp8LinearKernel,
             TorchMxFp8LinearKernel],
    "rocm": [RocmDotScaledMxfp8LinearKernel, EmulationMxfp8LinearKernel],
    "xpu": [XPUMxFp8LinearKernel, TorchMxFp8LinearKernel, EmulationMxfp8LinearKernel],
}
# The MXFP8 kernels of `_LINEAR_BACKEND_KERNEL_MAP` (kernels/linear/__init__.py:285-345).
BACKEND_KERNELS: dict[str, set[str]] = {
    "b12x": {"B12xMxfp8LinearKernel"},
    "flashinfer_cutlass": {"FlashInferCutlassMxfp8LinearKernel"},
    "flashinfer_cutedsl": {"FlashInferCutedslMxfp8LinearKernel"},
    "flashinfer_trtllm": {"FlashInferTrtllmMxfp8LinearKernel"},
    "humming": {"HummingMxfp8LinearKernel"},
    "marlin": {"MarlinMxfp8LinearKernel"},
    "torch": {"TorchMxFp8LinearKernel"},
    "emulation": {"EmulationMxfp8LinearKernel"},
    "xpu": {"XPUMxFp8LinearKernel"},
}


def candidates(p: Platform, env: Env, notes: list[str]) -> list[type[Kernel]]:
    """`_resolve_backend_kernels(possible, "MXFP8", quantization="mxfp8")` (__init__.py:410-442)."""
    kernels = prioritize_humming(list(POSSIBLE.get(p.device, [])),
                                 p.capability if p.is_cuda() else None)
    override = dict(env.linear_backend_per_quant).get("mxfp8")
    if override:
        notes.append(f"Applied linear backend override for 'mxfp8': {override!r}")
    backend = override or env.linear_backend
    if backend == "auto":
        return kernels
    filtered = [k for k in kernels if k.__name__ in BACKEND_KERNELS.get(backend, set())]
    if filtered:
        return filtered
    # _filter_kernels_by_backend (393-407) hands the whole list back; only an empty one
    # (a CPU's) reaches _resolve_backend_kernels' own fallback warning (431-441)
    notes.append(f"--linear-backend={backend} has no kernel for this linear layer type; "
                 "using automatic selection for that layer type.")
    if not kernels:
        notes.append(f"--linear-backend={backend} was requested, but no {backend} kernel exists "
                     "for MXFP8 layers; falling back to normal kernel selection for this layer.")
    return kernels


def init_mxfp8_linear_kernel(n: int, k: int, p: Platform, env: Env, t: Trace,
                             params_dtype: str) -> Trace:
    """`t` after the loop (__init__.py:986-1010): its steps, the kernel and its runtime, or
    vLLM's ValueError. Its reasons stay in the steps and the error: `t.reasons` is the MP loop's."""
    notes = list(t.notes)
    kernels = candidates(p, env, notes)
    steps = list(t.steps)
    reasons: list[str] = []
    t = replace(t, candidates=tuple(kl.__name__ for kl in kernels))
    for kernel in kernels:
        name = kernel.__name__
        if name in env.disabled_kernels:
            reasons.append(f" {name} disabled by environment variable")
            steps.append(Step(name, Outcome.DISABLED, reasons[-1]))
            continue
        for outcome, (ok, why) in ((Outcome.CAPABILITY, kernel.is_supported(p)),
                                   (Outcome.REJECTED, kernel.can_implement(n, k, p))):
            if not ok:
                reasons.append(f"{name}: {why}")
                steps.append(Step(name, outcome, why))
                break
        else:
            steps.append(Step(name, Outcome.SELECTED, None))
            notes.append(f"Using {name} for MXFP8 GEMM")
            act = kernel.activation or activation_name(dtype(params_dtype))
            return replace(t, steps=tuple(steps), notes=tuple(notes), selected=name,
                           runtime_detail=Runtime(name, act, WEIGHT, kernel.op, kernel.source,
                                                  caveat=ABSENT + kernel.caveat, weight_bits=8,
                                                  activation_group_size=BLOCK if act == "fp8" else None))
    return replace(t, steps=tuple(steps), notes=tuple(notes)).failed(
        "ValueError", ERROR_HEADER + "\n".join(reasons))
