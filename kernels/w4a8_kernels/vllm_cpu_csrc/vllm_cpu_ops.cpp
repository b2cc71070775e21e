// Registers the pinned vLLM's CPU W4A8/W4A16 ops, compiled from its sdist beside this file
// (w4a8_kernels/vllm_cpu.py), under this project's own op namespace (W4A8_VLLM_NS), so a
// vLLM installed in the same process keeps its `_C` ops. No vLLM code is here: only the
// declarations and op schemas of csrc/cpu/torch_bindings.cpp, which the sources implement.
#include <optional>
#include <string>
#include <tuple>

#include <torch/library.h>
#include <ATen/ATen.h>

#ifndef W4A8_VLLM_NS
#error "W4A8_VLLM_NS names the op namespace"
#endif

#if defined(W4A8_WITH_INT4_SCALED_MM)
// csrc/cpu/sgl-kernels/gemm_int4.cpp
std::tuple<at::Tensor, at::Tensor, at::Tensor> convert_weight_packed_scale_zp(
    at::Tensor qweight, at::Tensor qzeros, at::Tensor scales, int64_t quant_method_4bit);
at::Tensor int4_scaled_mm_cpu(at::Tensor& x, at::Tensor& w, at::Tensor& w_zeros,
                              at::Tensor& w_scales, std::optional<at::Tensor> bias);
#endif

#if defined(W4A8_WITH_CPU_GEMM_WNA16)
// csrc/cpu/cpu_wna16.cpp
void cpu_gemm_wna16(const at::Tensor& input, const at::Tensor& q_weight,
                    at::Tensor& output, const at::Tensor& scales,
                    const std::optional<at::Tensor>& zeros,
                    const std::optional<at::Tensor>& bias, const int64_t pack_factor,
                    const std::string& isa_hint);
#endif

TORCH_LIBRARY(W4A8_VLLM_NS, ops) {
#if defined(W4A8_WITH_INT4_SCALED_MM)
  // the schemas of the pinned release's csrc/cpu/torch_bindings.cpp
  ops.def("convert_weight_packed_scale_zp(Tensor weight, Tensor qzeros, Tensor scales, "
          "int quant_method_4bit) -> (Tensor, Tensor, Tensor)");
  ops.impl("convert_weight_packed_scale_zp", c10::kCPU, &convert_weight_packed_scale_zp);
  ops.def("int4_scaled_mm_cpu(Tensor(a0!) x, Tensor(a1!) w, Tensor(a2!) w_zeros, "
          "Tensor(a3!) w_scales, Tensor? bias) -> Tensor");
  ops.impl("int4_scaled_mm_cpu", c10::kCPU, &int4_scaled_mm_cpu);
#endif
#if defined(W4A8_WITH_CPU_GEMM_WNA16)
  ops.def("cpu_gemm_wna16(Tensor input, Tensor q_weight, Tensor(a2!) output, Tensor scales, "
          "Tensor? zeros, Tensor? bias, SymInt pack_factor, str isa_hint) -> ()");
  ops.impl("cpu_gemm_wna16", c10::kCPU, &cpu_gemm_wna16);
#endif
}
