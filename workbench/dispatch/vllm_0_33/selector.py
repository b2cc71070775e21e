"""vLLM 0.33.0's mixed-precision selection loop, candidate lists and backend filters.

Models `choose_mp_linear_kernel`, `_POSSIBLE_KERNELS`, `_resolve_backend_kernels` and
`_LINEAR_BACKEND_KERNEL_MAP` in `vllm/model_executor/kernels/linear/__init__.py`, and
`prioritize_humming` in `vllm/model_executor/layers/quantization/utils/humming/priority.py`.
"""
from __future__ import annotations

from dataclasses import replace

from workbench.dispatch.env import Env
from workbench.dispatch.trace import Level, Outcome, Stage, Step, Trace
from workbench.dispatch.types import MPConfig
from workbench.dispatch.versions import takes_rules
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


def resolve_candidates(R, platform: Platform, env: Env,
                       notes: list[str]) -> list[type[K.MPKernel]]:
    """The ordered candidates the loop will walk: platform list, SM90 reorder, backend filter."""
    kernels = prioritize_humming(list(R.POSSIBLE_KERNELS.get(platform.device, [])),
                                 platform.capability)
    backend, source = env.mp_linear_backend()
    if source == "linear_backend_per_quant":
        notes.append(f"Applied linear backend override for 'mixed_precision': {backend!r}")
    if backend == "auto":
        return kernels
    keep = R.LINEAR_BACKEND_MP_KERNELS.get(backend, set())
    filtered = [k for k in kernels if k.__name__ in keep]
    if not filtered:
        notes.append(f"--linear-backend={backend} has no kernel for this linear layer type; "
                     "using automatic selection for that layer type.")
        return kernels
    return filtered


@takes_rules
def choose_mp_linear_kernel(R, config: MPConfig, platform: Platform, env: Env,
                            trace: Trace | None = None) -> Trace:
    """Walk `R`'s candidates as vLLM does and return the trace of the walk.

    `trace` is the layer's trace so far (a scheme's, a GPTQ method's); the one returned is a
    new value holding it and the loop: candidates, every step, the reasons, the selected
    kernel and what it computes here, or vLLM's ValueError text (nothing is raised).
    """
    trace = Trace(level=Level.MP) if trace is None else trace
    notes: list[str] = []
    candidates = resolve_candidates(R, platform, env, notes)
    cc = platform.capability
    steps: list[Step] = []
    reasons: list[str] = []

    def walked(**outcome) -> Trace:
        return replace(trace, reached=Stage.KERNEL_LOOP, mp_config=config,
                       candidates=tuple(k.__name__ for k in candidates), steps=tuple(steps),
                       reasons=tuple(reasons), notes=trace.notes + tuple(notes), **outcome)

    for kernel in candidates:
        name = kernel.__name__
        if name in env.disabled_kernels:
            reasons.append(f" {name} disabled by environment variable")
            steps.append(Step(name, Outcome.DISABLED, reasons[-1]))
            continue
        if cc is not None and kernel.min_capability > cc:
            reasons.append(f"{name} requires capability {kernel.min_capability}, current compute "
                           f" capability is {cc}")
            steps.append(Step(name, Outcome.CAPABILITY, reasons[-1]))
            continue
        try:
            ok, why = kernel.can_implement(config, platform)
        except ZeroDivisionError:
            # vLLM's own check divides by the group size; a group of 0 crashes it the same way.
            steps.append(Step(name, Outcome.CRASHED, "integer modulo by zero"))
            return walked(selected=None, error="integer modulo by zero",
                          error_type="ZeroDivisionError")
        if ok:
            steps.append(Step(name, Outcome.SELECTED, None))
            notes.append(f"Using {name} for mixed-precision linear")
            # what the kernel computes with the config it was chosen for; a scheme that runs
            # it with another input (Marlin's input dtype, Humming's schema) says so after
            return walked(selected=name, error=None, error_type=None,
                          runtime_detail=kernel.runtime(config, platform, env))
        reasons.append(f" {name} cannot implement due to: {why}")
        steps.append(Step(name, Outcome.REJECTED, why))
    return walked(selected=None, error=ERROR_HEADER + "\n".join(reasons), error_type="ValueError")
