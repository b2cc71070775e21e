// The pinned vLLM's Machete W4A16 GEMM (csrc/quantization/machete/) behind a plain C ABI: raw
// device pointers, sizes and a cudaStream_t, so the library links neither torch nor its ABI.
//
// One type configuration, the one vLLM builds first in generate.py (GPTQ_kernel_type_configs):
// bf16 activations, uint4b8 weights, bf16 group scales, no zero points, bf16 out, f32 accumulate.
// The kernel is vLLM's own MacheteKernelTemplate / PrepackedLayoutBTemplate, instantiated as its
// IMPL_TEMPLATE and PREPACK_TEMPLATE instantiate them; only the torch-tensor glue of
// machete_mm_launcher.cuh / machete_prepack_launcher.cuh is rewritten here on raw pointers.
//
// Compiled once per schedule (-DMACHETE_SCHEDULE_TU with SCH_TM, SCH_TN, SCH_CM: one kernel a
// translation unit, as vLLM splits them over files) and once with -DMACHETE_MAIN_TU (prepack,
// the schedule table, errors). MACHETE_SCHEDULE_LIST (a generated header) lists the schedules.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "machete_mm_kernel.cuh"
#include "machete_prepack_kernel.cuh"

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

// Error text of the last failed call on this thread.
static thread_local std::string g_last_error;

static int fail(char const* what) {
  g_last_error = what;
  return 1;
}

#define MACHETE_CAPI_GUARD(body)                          \
  try {                                                   \
    g_last_error.clear();                                 \
    body                                                  \
  } catch (std::exception const& e) {                     \
    return fail(e.what());                                \
  } catch (...) {                                         \
    return fail("unknown C++ exception");                 \
  }

// Objects build with -fvisibility=hidden: only the API below is exported.
#define MACHETE_API extern "C" __attribute__((visibility("default")))

#define MACHETE_SCH_FN(tm, tn, cm, what) machete_##what##_##tm##x##tn##_##cm
#define MACHETE_SCH_FN_X(tm, tn, cm, what) MACHETE_SCH_FN(tm, tn, cm, what)

#ifdef MACHETE_SCHEDULE_TU
using SchKernel = machete_capi::Kernel<machete_capi::Schedule<SCH_TM, SCH_TN, SCH_CM>>;

// 0 = ok; 2 = the kernel cannot implement these arguments (Gemm::can_implement).
extern "C" int MACHETE_SCH_FN_X(SCH_TM, SCH_TN, SCH_CM, workspace)(
    int M, int N, int K, int group_size, size_t* bytes) {
  MACHETE_CAPI_GUARD({
    auto args = machete_capi::make_arguments<SchKernel>(nullptr, nullptr, nullptr, nullptr, M,
                                                        N, K, group_size);
    if (!SchKernel::can_implement(args)) {
      g_last_error = "Machete kernel cannot be run with these arguments";
      return 2;
    }
    *bytes = SchKernel::get_workspace_size(args);
    return 0;
  })
}

extern "C" int MACHETE_SCH_FN_X(SCH_TM, SCH_TN, SCH_CM, mm)(
    void const* a, void const* b, void const* scales, void* d, int M, int N, int K,
    int group_size, void* workspace, cudaStream_t stream) {
  MACHETE_CAPI_GUARD({
    auto args = machete_capi::make_arguments<SchKernel>(a, b, scales, d, M, N, K, group_size);
    if (!SchKernel::can_implement(args)) {
      g_last_error = "Machete kernel cannot be run with these arguments";
      return 2;
    }
    SchKernel::run(args, workspace, stream);  // run_impl (machete_mm_launcher.cuh)
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return fail(cudaGetErrorString(err));
    return 0;
  })
}
#endif  // MACHETE_SCHEDULE_TU

#ifdef MACHETE_MAIN_TU
#include MACHETE_SCHEDULE_LIST  // X(tm, tn, cm) per built schedule

#define X(tm, tn, cm)                                                                        \
  extern "C" int MACHETE_SCH_FN(tm, tn, cm, workspace)(int, int, int, int, size_t*);       \
  extern "C" int MACHETE_SCH_FN(tm, tn, cm, mm)(void const*, void const*, void const*, void*, \
                                                int, int, int, int, void*, cudaStream_t);
MACHETE_SCHEDULES
#undef X

struct ScheduleEntry {
  int tm, tn, cm;
  int (*workspace)(int, int, int, int, size_t*);
  int (*mm)(void const*, void const*, void const*, void*, int, int, int, int, void*,
            cudaStream_t);
};

static ScheduleEntry const kSchedules[] = {
#define X(tm, tn, cm) \
  {tm, tn, cm, MACHETE_SCH_FN(tm, tn, cm, workspace), MACHETE_SCH_FN(tm, tn, cm, mm)},
    MACHETE_SCHEDULES
#undef X
};
static int const kNumSchedules = sizeof(kSchedules) / sizeof(kSchedules[0]);

static ScheduleEntry const* find_schedule(int tm, int tn, int cm) {
  for (auto const& s : kSchedules)
    if (s.tm == tm && s.tn == tn && s.cm == cm) return &s;
  return nullptr;
}

MACHETE_API char const* machete_last_error() { return g_last_error.c_str(); }

MACHETE_API int machete_num_schedules() { return kNumSchedules; }

// The i-th built schedule as (tile M, tile N, cluster M) of generate.py's ScheduleConfig.
MACHETE_API int machete_schedule_at(int i, int* tm, int* tn, int* cm) {
  if (i < 0 || i >= kNumSchedules) return fail("schedule index out of range");
  *tm = kSchedules[i].tm;
  *tn = kSchedules[i].tn;
  *cm = kSchedules[i].cm;
  return 0;
}

MACHETE_API int machete_workspace_size(int tm, int tn, int cm, int M, int N, int K,
                                      int group_size, size_t* bytes) {
  auto s = find_schedule(tm, tn, cm);
  if (!s) return fail("this schedule is not in the build");
  return s->workspace(M, N, K, group_size, bytes);
}

MACHETE_API int machete_mm(int tm, int tn, int cm, void const* a, void const* b,
                          void const* scales, void* d, int M, int N, int K, int group_size,
                          void* workspace, cudaStream_t stream) {
  auto s = find_schedule(tm, tn, cm);
  if (!s) return fail("this schedule is not in the build");
  return s->mm(a, b, scales, d, M, N, K, group_size, workspace, stream);
}

// PREPACK_TEMPLATE's layout for (a=bf16, 4-bit B, convert=bf16 group scale type, f32 acc).
using PrepackedB = machete::PrepackedLayoutBTemplate<
    cutlass::bfloat16_t, cutlass::uint4b_t, cutlass::bfloat16_t, float,
    cutlass::layout::ColumnMajor, cutlass::gemm::KernelTmaWarpSpecializedCooperative>;

// prepack_impl (machete_prepack_launcher.cuh) on raw pointers. `b` is vLLM's argument
// `x.data.t().contiguous().t()`: int32 [K / 8, N] with stride (1, K / 8), i.e. the checkpoint's
// `weight_packed` [N, K / 8] bytes, 8 nibbles per int32 along K, low nibble first. `out` gets
// the same number of bytes (N * K / 2).
MACHETE_API int machete_prepack_B(void const* b, void* out, int N, int K, cudaStream_t stream) {
  MACHETE_CAPI_GUARD({
    using namespace cute;
    using PPBlockShape_NK = typename PrepackedB::PPBlockShape_NK;
    int constexpr eles_per_storage = 32 / 4;
    if (K % eles_per_storage != 0) return fail("K must be a multiple of 8 (int32 packing)");
    if (K % size<1>(PPBlockShape_NK{}) != 0)
      return fail("B.shape[0] (in terms of unpacked elements) must be a multiple of 64");
    if (N % size<0>(PPBlockShape_NK{}) != 0) return fail("B.shape[1] must be a multiple of 128");
    using StrideB = cutlass::detail::TagToStrideB_t<cutlass::layout::ColumnMajor>;
    int64_t const packed_k = K / eles_per_storage;
    // Bt_packed = B.transpose(0, 1): (N, packed_K, L) with strides (packed_K, 1, 0).
    StrideB s{};
    get<0>(s) = N == 1 ? 0 : packed_k;
    get<2>(s) = 0;
    auto const l_Bt_packed = make_layout(make_shape(int64_t(N), packed_k, int64_t(1)), s);
    auto const layout_Bt = make_layout(
        transform_with_idx(l_Bt_packed.shape(), [&](auto ele, auto idx) {
          return idx == 1 ? ele * eles_per_storage : ele;
        }),
        transform_with_idx(l_Bt_packed.stride(), [&](auto ele, auto idx) {
          return idx != 1 ? ele * eles_per_storage : ele;
        }));
    machete::prepack_B_template<PrepackedB>(
        stream, static_cast<cutlass::uint4b_t const*>(b), layout_Bt,
        static_cast<cutlass::uint4b_t*>(out));
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return fail(cudaGetErrorString(err));
    return 0;
  })
}
#endif  // MACHETE_MAIN_TU
