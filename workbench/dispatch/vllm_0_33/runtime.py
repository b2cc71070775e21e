"""What the selected kernel actually computes on the platform, after selection.

Selection is not the end of the story: several kernels pick their real path when weights are
processed (`process_weights_after_loading`) or depend on which compiled vLLM build loads.
Facts §3.7, §3.10, §4.1 to §4.4, read from `mixed_precision/{humming,xpu,dynamic_4bit,cpu,
zentorch}.py`, `vllm/platforms/cpu.py` and `csrc/cpu/torch_bindings.cpp`.
"""
from __future__ import annotations

from workbench.dispatch.env import Env
from workbench.dispatch.types import BF16, FP16, FP8_E4M3, INT8, MPConfig
from workbench.platforms import ZENTORCH_DA8W4_OP, Platform


def _cpu_build(p: Platform) -> str:
    """Which vLLM CPU extension `CpuPlatform.import_kernels` loads on x86."""
    if p.avx512 and p.avx512_bf16:
        return "_C"
    if p.avx512:
        return "_C_AVX512"
    return "_C_AVX2"


def runtime_note(kernel: str, c: MPConfig, p: Platform, env: Env) -> str:
    """One sentence: activation precision and the op that runs. Empty when nothing to add."""
    if kernel == "HummingLinearKernel":
        if c.act_type in (INT8, FP8_E4M3):
            return f"Humming quantizes activations per token to {c.act_type.name}: real W4A8 compute."
        return ("Humming gets a 16-bit act_type: weight-only (W4A16) unless the scheme set an input "
                "schema (only CompressedTensorsWNA8Int/WNA4Int do).")
    if kernel == "XPUW4A8IntLinearKernel":
        extra = "" if c.act_type == FP16 else (
            f" vLLM warns: running with model dtype {c.act_type}, but int4_gemm_w4a8 produces "
            "float16 output; --dtype float16 is recommended.")
        return "Real W4A8 on XPU: symmetric per-token int8 activations, int4_gemm_w4a8." + extra
    if kernel == "Dynamic4bitLinearKernel":
        if p.cpu_arch == "arm":
            return ("Real W4A8 via aten._dyn_quant_matmul_4bit: KleidiAI micro-kernels on Arm "
                    "(int8 per-token activations).")
        return (f"Real W4A8 via aten._dyn_quant_matmul_4bit, but on {p.cpu_arch or 'this'} CPU torch "
                "runs its generic reference path (no KleidiAI): int8 activations, very slow.")
    if kernel == "CPUWNA16LinearKernel":
        if p.cpu_arch == "arm":
            return ("cpu_gemm_wna16 is not registered on Arm builds: the layer is selected here but "
                    "fails at its first forward.")
        amx_or_rv = p.amx or p.cpu_arch == "riscv"
        if env.cpu_int4_w4a8 and c.act_type == BF16 and amx_or_rv:
            return ("W4A8 inside CPUWNA16: int4_scaled_mm_cpu with per-token uint8 activations "
                    "(zero point 128), because VLLM_CPU_INT4_W4A8=1, bf16 and "
                    + ("AMX tiles." if p.amx else "RISC-V."))
        why = ("VLLM_CPU_INT4_W4A8=0" if not env.cpu_int4_w4a8 else
               f"act_type {c.act_type} is not bf16" if c.act_type != BF16 else "no AMX tile support")
        if p.cpu_arch == "x86" and _cpu_build(p) == "_C_AVX2":
            return (f"W4A16 path ({why}), but the AVX2-only build (_C_AVX2) has no cpu_gemm_wna16: "
                    "the layer fails at its first forward.")
        isa = "amx" if p.amx and c.act_type == BF16 else (
            "rvv" if p.cpu_arch == "riscv" else
            "vsx" if p.cpu_arch == "powerpc" and c.act_type == BF16 else "vec")
        return f"W4A16: cpu_gemm_wna16 with isa_hint={isa!r} ({why})."
    if kernel == "ZentorchWNA16LinearKernel":
        if (env.cpu_int4_w4a8 and p.has_op(ZENTORCH_DA8W4_OP) and not c.zero_points
                and str(c.weight_type) != "uint4" and c.act_type == BF16):
            return ("DA8W4 (real W4A8) via zentorch_dynamic_qlinear, when the layer's K/groups is a "
                    "multiple of 4 and K is even; otherwise W4A16 zentorch_woq_linear.")
        return "W4A16 via zentorch_woq_linear."
    if kernel in ("MacheteLinearKernel", "MarlinLinearKernel", "ConchLinearKernel",
                  "ExllamaLinearKernel", "TritonW4A16LinearKernel", "RDNA3W4A16LinearKernel",
                  "RDNAHybridW4A16LinearKernel", "XPUwNa16LinearKernel"):
        if kernel == "MarlinLinearKernel" and c.act_type in (INT8, FP8_E4M3):
            return f"Marlin W4A8: activations quantized per token to {c.act_type.name}."
        return "Weight-only (W4A16): activations stay in 16-bit; int4 weights are dequantized in the kernel."
    if kernel == "CutlassW4A8LinearKernel":
        return "W4A8-FP8: activations quantized per token to fp8 e4m3; cutlass_w4a8_mm on Hopper."
    return ""

