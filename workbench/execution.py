"""Pair what vLLM would select with the kernel paths that can run here.

`plan_execution` takes the selected vLLM kernel (or INC linear method) as a plain
string, plus the few facts that change what it computes (activation dtype, AMX, the
VLLM_CPU_INT4_W4A8 and VLLM_MARLIN_INPUT_DTYPE knobs), and says:

- what the engine computes for this layer (real W4A8 or weight-only W4A16),
- which of our paths models it on this machine (`path`) and on a CUDA host
  (`gpu_path`), and how faithfully: "same op" (the engine's own op runs here),
  "same numerics" (its rounding steps reproduced, our integer GEMM), or "same math"
  (the same W4A8/W4A16 math through another kernel: speed is this host's, not the
  engine's),
- the W4A16 fallback to compare against.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from w4a8_kernels.registry import PATHS
from workbench.errors import InvalidInputError

__all__ = ["ExecutionPlan", "plan_execution", "plan_from_trace", "KNOWN_KERNELS"]

_W4A16_GPU = ("MacheteLinearKernel", "ExllamaLinearKernel", "ConchLinearKernel",
              "TritonW4A16LinearKernel", "RDNA3W4A16LinearKernel", "RDNAHybridW4A16LinearKernel")

KNOWN_KERNELS = (
    "Dynamic4bitLinearKernel", "CPUWNA16LinearKernel", "ZentorchWNA16LinearKernel",
    "XPUW4A8IntLinearKernel", "XPUwNa16LinearKernel", "MarlinLinearKernel",
    "HummingLinearKernel", "CutlassW4A8LinearKernel", *_W4A16_GPU,
    "INCXPUW4A8LinearMethod", "INCXPULinearMethod", "INCARKLinearMethod",
)


@dataclass(frozen=True)
class ExecutionPlan:
    selected: str | None
    computes: str  # "w4a8", "w4a16", "w4a8-fp8" or "none"
    path: str | None  # our path modelling it on this host
    gpu_path: str | None  # our path modelling it on a CUDA host
    fidelity: str  # "same op" | "same numerics" | "same math" | "none"
    fallback: str  # the W4A16 path to compare with
    note: str
    available: bool  # `path` can run on this machine
    why: str  # why not, or the probe's note

    def to_dict(self) -> dict:
        return asdict(self)

    def paths_to_compare(self) -> list[str]:
        """What the engine runs (modelled), the W4A16 fallback and our W4A8 native, deduplicated."""
        seen = []
        for p in (self.path, self.fallback, "w4a8_native"):
            if p and p not in seen:
                seen.append(p)
        return seen


def _dtype_name(act_type: Any) -> str:
    s = str(getattr(act_type, "name", act_type)).replace("torch.", "").lower()
    return {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32",
            "fp32": "float32", "int8": "int8", "fp8": "float8_e4m3fn"}.get(s, s)


def plan_execution(selected: str | None, *, act_type: Any = "bfloat16", amx: bool = False,
                   riscv: bool = False, cpu_int4_w4a8: bool = True,
                   marlin_input_dtype: str | None = None, zentorch_da8w4: bool = False,
                   cuda: bool | None = None) -> ExecutionPlan:
    """The runnable model of one vLLM selection (see the module docstring)."""
    if selected is not None and not isinstance(selected, str):
        raise InvalidInputError(f"selected: a vLLM kernel class name or None, got {type(selected).__name__}")
    act = _dtype_name(act_type)
    w4a16 = ("w4a16", "w4a16_fallback", "triton_w4a16", "same math")
    w4a8 = ("w4a8", "w4a8_native", "triton_w4a8", "same math")
    if selected is None:
        row = ("none", None, None, "none",
               "vLLM found no kernel (the trace holds its error): nothing runs")
    elif selected == "Dynamic4bitLinearKernel":
        row = ("w4a8", "vllm_dynamic4bit", None, "same op",
               "aten._dyn_quant_matmul_4bit itself; on x86 torch's reference loop (asymmetric "
               "per-row int8 activations), on Arm KleidiAI")
    elif selected == "CPUWNA16LinearKernel":
        if cpu_int4_w4a8 and act == "bfloat16" and (amx or riscv):
            row = ("w4a8", "vllm_int4_scaled_mm", None, "same numerics",
                   "int4_scaled_mm_cpu (W4A8 inside CPUWNA16: bf16, VLLM_CPU_INT4_W4A8=1, "
                   "AMX or RISC-V): uint8 activations with zero point 128")
        else:
            row = (*w4a16[:3], "same math",
                   "cpu_gemm_wna16 (weight-only): modelled by torch's int4 CPU GEMM or "
                   "dequantize + GEMM, whichever is faster")
    elif selected == "ZentorchWNA16LinearKernel":
        if cpu_int4_w4a8 and zentorch_da8w4:
            row = (*w4a8[:3], "same math", "zentorch_dynamic_qlinear (DA8W4)")
        else:
            row = (*w4a16[:3], "same math", "zentorch_woq_linear (weight-only)")
    elif selected == "XPUW4A8IntLinearKernel":
        row = (*w4a8[:3], "same math",
               "int4_gemm_w4a8 on XPU: symmetric per-token int8 activations, fp16 output")
    elif selected == "INCXPUW4A8LinearMethod":
        row = ("w4a8", "inc_xpu_w4a8", None, "same numerics",
               "INC policy: W4A16 below 512 tokens per call; fp16 scales and output above")
    elif selected in ("XPUwNa16LinearKernel", "INCXPULinearMethod", "INCARKLinearMethod"):
        row = (*w4a16[:3], "same math", f"{selected}: weight-only int4 GEMM")
    elif selected == "MarlinLinearKernel":
        if marlin_input_dtype == "int8":
            row = (*w4a8[:3], "same math", "Marlin W4A8 (VLLM_MARLIN_INPUT_DTYPE=int8)")
        elif marlin_input_dtype == "fp8":
            row = ("w4a8-fp8", None, None, "none",
                   "Marlin with fp8 activations: no runnable model of FP8 activations here")
        else:
            row = (*w4a16[:3], "same math", "Marlin: weight-only int4 GEMM")
    elif selected == "HummingLinearKernel":
        if act in ("int8",):
            row = (*w4a8[:3], "same math", "Humming with per-token int8 activations")
        elif act.startswith("float8"):
            row = ("w4a8-fp8", None, None, "none", "Humming with fp8 activations: not modelled here")
        else:
            row = (*w4a16[:3], "same math", "Humming on a 16-bit act_type: weight-only")
    elif selected == "CutlassW4A8LinearKernel":
        row = ("w4a8-fp8", None, None, "none",
               "CUTLASS W4A8 with fp8 e4m3 activations (SM90): no runnable model of FP8 here")
    elif selected in _W4A16_GPU:
        row = (*w4a16[:3], "same math", f"{selected}: weight-only int4 GEMM")
    else:
        raise InvalidInputError(f"selected: unknown vLLM kernel {selected!r}; known: "
                                f"{', '.join(KNOWN_KERNELS)}")
    computes, cpu_path, gpu_path, fidelity, note = row
    if cuda is None:
        import torch
        cuda = torch.cuda.is_available()
    path = gpu_path if (cuda and gpu_path) else cpu_path
    if path is None:
        available, why = False, "no runnable path models this kernel"
    else:
        available, why = PATHS[path].probe()
    return ExecutionPlan(selected, computes, path, gpu_path, fidelity,
                         "triton_w4a16" if cuda else "w4a16_fallback", note, available, why)


def plan_from_trace(trace: Any, platform: Any = None, env: Any = None) -> ExecutionPlan:
    """`plan_execution` from a dispatch Trace (duck-typed: .selected, .mp_config.act_type)."""
    mp = getattr(trace, "mp_config", None)
    act = getattr(mp, "act_type", "bfloat16") if mp is not None else "bfloat16"
    return plan_execution(
        getattr(trace, "selected", None), act_type=act,
        amx=bool(getattr(platform, "amx", False)),
        riscv=getattr(platform, "cpu_arch", "") == "riscv",
        cpu_int4_w4a8=bool(getattr(env, "cpu_int4_w4a8", True)),
        marlin_input_dtype=getattr(env, "marlin_input_dtype_raw", None))
