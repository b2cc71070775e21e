// Shared by the translation units of the Machete C ABI library (machete_capi.cu,
// machete_schedule.cu): vLLM's kernel type for the one built configuration, its schedule
// struct, and its arguments built on raw pointers.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "machete_mm_kernel.cuh"

namespace machete_capi {

using namespace cute;

// D = A @ dequant(B): A [M, K] row-major, B prepacked, scales [K / g, N] row-major, D [M, N].
using ElementA = cutlass::bfloat16_t;
using ElementB = cutlass::vllm_uint4b8_t;

template <typename Sch>
using Kernel = machete::MacheteKernelTemplate<
    ElementA, ElementB, cutlass::bfloat16_t, float,  // A, B, D, accumulator
    cutlass::bfloat16_t, void, void, void,           // group scale, zero, channel, token
    cutlass::gemm::KernelTmaWarpSpecializedCooperative, Sch>;

// generate.py's IMPL_TEMPLATE schedule struct, with sch_common_params (generate.py:505-509).
template <int TM, int TN, int CM>
struct Schedule {
  using TileShapeNM = Shape<Int<TM>, Int<TN>>;
  using ClusterShape = Shape<Int<CM>, _1, _1>;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  using EpilogueTileType = cutlass::epilogue::collective::EpilogueTileAuto;
};

// make_cute_layout (cutlass_extensions/torch_utils.hpp) on a contiguous row-major [rows, cols]
// tensor: a size-1 dimension gets stride 0, the batch dimension stride 0.
template <typename StrideT>
static StrideT row_major_stride(int64_t rows, int64_t cols) {
  StrideT s{};
  get<0>(s) = rows == 1 ? 0 : cols;
  get<2>(s) = 0;
  return s;
}

// Arguments as MacheteKernelTemplate::create_arguments builds them (machete_mm_kernel.cuh).
template <typename K>
static typename K::Arguments make_arguments(void const* a, void const* b, void const* scales,
                                            void* d, int M, int N, int Kdim, int group_size) {
  using StrideA = typename K::StrideA;
  using StrideD = typename K::StrideD;
  using StrideS = typename K::StrideSGroup;
  int const g = group_size == -1 ? Kdim : group_size;
  int const scale_k = (Kdim + g - 1) / g;
  auto layout_A = make_layout(make_shape(int64_t(M), int64_t(Kdim), int64_t(1)),
                              row_major_stride<StrideA>(M, Kdim));
  auto layout_D = make_layout(make_shape(int64_t(M), int64_t(N), int64_t(1)),
                              row_major_stride<StrideD>(M, N));
  auto layout_S = make_layout(make_shape(int64_t(scale_k), int64_t(N), int64_t(1)),
                              row_major_stride<StrideS>(scale_k, N));
  auto stride_At = layout_A.stride();
  auto stride_Dt = permute_layout<1, 0, 2>(layout_D).stride();
  auto stride_S = permute_layout<1, 0, 2>(layout_S).stride();
  typename K::MainloopArguments mainloop{
      static_cast<typename K::ElementB const*>(b), typename K::_StrideB{},
      static_cast<typename K::ElementA const*>(a), stride_At,
      static_cast<typename K::ElementSGroup const*>(scales), stride_S, g};
  typename K::EpilogueArguments epilogue{
      {}, nullptr, {}, static_cast<typename K::ElementD*>(d), stride_Dt};
  return typename K::Arguments{cutlass::gemm::GemmUniversalMode::kGemm,
                               {N, M, Kdim, 1}, mainloop, epilogue};
}

}  // namespace machete_capi

// Error text of the last failed call on this thread (defined in machete_capi.cu).
extern thread_local std::string g_machete_last_error;

static inline int machete_fail(char const* what) {
  g_machete_last_error = what;
  return 1;
}

#define MACHETE_CAPI_GUARD(body)                   \
  try {                                            \
    g_machete_last_error.clear();                  \
    body                                           \
  } catch (std::exception const& e) {              \
    return machete_fail(e.what());                 \
  } catch (...) {                                  \
    return machete_fail("unknown C++ exception");  \
  }

// Objects build with -fvisibility=hidden: only the API of machete_capi.cu is exported.
#define MACHETE_API extern "C" __attribute__((visibility("default")))

// The per-schedule entry points: machete_workspace_TMxTN_CM, machete_mm_TMxTN_CM.
#define MACHETE_SCH_FN(tm, tn, cm, what) machete_##what##_##tm##x##tn##_##cm
#define MACHETE_SCH_FN_X(tm, tn, cm, what) MACHETE_SCH_FN(tm, tn, cm, what)
