"""vLLM 0.33.0's mixed-precision selection loop, candidate lists and backend filters.

Models `choose_mp_linear_kernel`, `_POSSIBLE_KERNELS`, `_resolve_backend_kernels` and
`_LINEAR_BACKEND_KERNEL_MAP` in `vllm/model_executor/kernels/linear/__init__.py`, and
`prioritize_humming` in `vllm/model_executor/layers/quantization/utils/humming/priority.py`.
"""
from __future__ import annotations

from workbench.dispatch.env import Env
from workbench.dispatch.trace import Step, Trace
from workbench.dispatch.types import MPConfig
from workbench.dispatch.vllm_0_33 import mp_kernels as K
from workbench.platforms import Platform

# `_POSSIBLE_KERNELS`, keyed by `current_platform._enum`, "in priority/performance order".
# ZenCpuPlatform keeps `_enum = CPU`. Any other platform (TPU, out-of-tree) gets [].
POSSIBLE_KERNELS: dict[str, list[type[K.MPKernel]]] = {
    "cuda": [K.CutlassW4A8LinearKernel, K.MacheteLinearKernel, K.MarlinLinearKernel,
             K.ConchLinearKernel, K.ExllamaLinearKernel, K.TritonW4A16LinearKernel,
             K.HummingLinearKernel],
    "rocm": [K.RDNA3W4A16LinearKernel, K.RDNAHybridW4A16LinearKernel,
             K.TritonW4A16LinearKernel, K.ConchLinearKernel, K.ExllamaLinearKernel],
    "xpu": [K.XPUW4A8IntLinearKernel, K.XPUwNa16LinearKernel],
    "cpu": [K.Dynamic4bitLinearKernel, K.ZentorchWNA16LinearKernel, K.CPUWNA16LinearKernel],
}

# The MP kernels each `--linear-backend` value keeps. Other backend values (b12x,
# flashinfer_*, deep_gemm, torch, aiter, fbgemm, emulation, xpu, xpu_woq) name no MP
# kernel, so the MP list falls back to automatic selection with a warning.
LINEAR_BACKEND_MP_KERNELS: dict[str, set[str]] = {
    "cutlass": {"CutlassW4A8LinearKernel"},
    "machete": {"MacheteLinearKernel"},
    "marlin": {"MarlinLinearKernel"},
    "humming": {"HummingLinearKernel"},
    "conch": {"ConchLinearKernel"},
    "exllama": {"ExllamaLinearKernel"},
    "triton": {"TritonW4A16LinearKernel"},
}
# Every value of vLLM's `LinearBackend` literal, in its declared order (vllm/config/kernel.py).
LINEAR_BACKENDS = (
    "auto", "cutlass", "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_trtllm",
    "flashinfer_cudnn", "flashinfer_b12x", "b12x", "marlin", "humming", "triton", "deep_gemm",
    "torch", "aiter", "machete", "fbgemm", "conch", "exllama", "emulation", "xpu", "xpu_woq",
)

HUMMING_PREFERRED_CAPABILITIES = frozenset({90})
ERROR_HEADER = "Failed to find a kernel that can implement the WNA16 linear layer. Reasons: \n"


def prioritize_humming(kernels: list, capability: int | None) -> list:
    """Move the first Humming kernel directly ahead of the first Marlin one on SM90.

    With no capability (CPU, XPU, CUDA without NVML) `prefers_humming` looks at the current
    CUDA device, which such a platform does not have: nothing moves.
    """
    if capability not in HUMMING_PREFERRED_CAPABILITIES:
        return kernels
    names = [k.__name__.lower() for k in kernels]
    humming = next((i for i, n in enumerate(names) if "humming" in n), None)
    marlin = next((i for i, n in enumerate(names) if "marlin" in n), None)
    if humming is None or marlin is None or humming < marlin:
        return kernels
    kernels = list(kernels)
    kernels.insert(marlin, kernels.pop(humming))
    return kernels


def resolve_candidates(platform: Platform, env: Env, notes: list[str]) -> list[type[K.MPKernel]]:
    """The ordered candidates the loop will walk: platform list, SM90 reorder, backend filter."""
    kernels = prioritize_humming(list(POSSIBLE_KERNELS.get(platform.device, [])),
                                 platform.capability)
    backend, source = env.mp_linear_backend()
    if source == "linear_backend_per_quant":
        notes.append(f"Applied linear backend override for 'mixed_precision': {backend!r}")
    if backend == "auto":
        return kernels
    keep = LINEAR_BACKEND_MP_KERNELS.get(backend, set())
    filtered = [k for k in kernels if k.__name__ in keep]
    if not filtered:
        notes.append(f"--linear-backend={backend} has no kernel for this linear layer type; "
                     "using automatic selection for that layer type.")
        return kernels
    return filtered


def choose_mp_linear_kernel(config: MPConfig, platform: Platform, env: Env) -> Trace:
    """Walk the candidates as vLLM does and record every step.

    Raises nothing for a failed selection: the trace carries vLLM's ValueError text.
    """
    notes: list[str] = []
    candidates = resolve_candidates(platform, env, notes)
    cc = platform.capability
    steps: list[Step] = []
    reasons: list[str] = []
    for kernel in candidates:
        name = kernel.__name__
        if name in env.disabled_kernels:
            reasons.append(f" {name} disabled by environment variable")
            steps.append(Step(name, "disabled", reasons[-1]))
            continue
        if cc is not None and kernel.min_capability > cc:
            reasons.append(f"{name} requires capability {kernel.min_capability}, current compute "
                           f" capability is {cc}")
            steps.append(Step(name, "capability", reasons[-1]))
            continue
        try:
            ok, why = kernel.can_implement(config, platform)
        except ZeroDivisionError:
            # vLLM's own check divides by the group size; a group of 0 crashes it the same way.
            return Trace(steps=steps + [Step(name, "crashed", "integer modulo by zero")],
                         selected=None, reasons=reasons, error="integer modulo by zero",
                         error_type="ZeroDivisionError", mp_config=config,
                         candidates=[k.__name__ for k in candidates], notes=notes,
                         selection_ran=True)
        if ok:
            steps.append(Step(name, "selected", None))
            notes.append(f"Using {name} for mixed-precision linear")
            return Trace(steps=steps, selected=name, reasons=reasons, mp_config=config,
                         candidates=[k.__name__ for k in candidates], notes=notes,
                         selection_ran=True)
        reasons.append(f" {name} cannot implement due to: {why}")
        steps.append(Step(name, "rejected", why))
    return Trace(steps=steps, selected=None, reasons=reasons,
                 error=ERROR_HEADER + "\n".join(reasons), error_type="ValueError",
                 mp_config=config, candidates=[k.__name__ for k in candidates], notes=notes,
                         selection_ran=True)


def select_into(trace: Trace, config: MPConfig, platform: Platform, env: Env) -> bool:
    """Run the loop for a scheme or INC trace and copy its outcome in; False if it raised."""
    k = choose_mp_linear_kernel(config, platform, env)
    trace.mp_config = config
    trace.steps, trace.selected, trace.reasons = k.steps, k.selected, k.reasons
    trace.error, trace.error_type, trace.candidates = k.error, k.error_type, k.candidates
    trace.selection_ran = True
    trace.notes.extend(k.notes)
    return k.error is None
