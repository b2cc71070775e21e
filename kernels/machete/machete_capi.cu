// The pinned vLLM's Machete W4A16 GEMM (csrc/quantization/machete/) behind a plain C ABI: raw
// device pointers, sizes, a device index and a cudaStream_t, so the library links neither torch
// nor libcuda (its CUDA runtime is static).
//
// One type configuration, the one vLLM builds first in generate.py (GPTQ_kernel_type_configs):
// bf16 activations, uint4b8 weights, bf16 group scales, no zero points, bf16 out, f32 accumulate.
// The kernels are vLLM's own MacheteKernelTemplate / PrepackedLayoutBTemplate, instantiated as
// its IMPL_TEMPLATE and PREPACK_TEMPLATE instantiate them (machete_schedule.cu holds one
// schedule); only the torch-tensor glue of machete_mm_launcher.cuh and
// machete_prepack_launcher.cuh is rewritten on raw pointers. The schedule is chosen by the
// caller (w4a8_kernels.machete_schedule holds vLLM's heuristic); MACHETE_SCHEDULE_LIST (a
// header the build writes) lists the schedules built, as X(tile M, tile N, cluster M).
#include "machete_capi.cuh"
#include "machete_prepack_kernel.cuh"

thread_local std::string g_machete_last_error;

#include MACHETE_SCHEDULE_LIST

#define X(tm, tn, cm)                                                                        \
  extern "C" int MACHETE_SCH_FN(tm, tn, cm, workspace)(void const*, void const*, void const*,  \
                                                       void*, int, int, int, int, size_t*);    \
  extern "C" int MACHETE_SCH_FN(tm, tn, cm, mm)(void const*, void const*, void const*, void*, \
                                                int, int, int, int, void*, cudaStream_t);
MACHETE_SCHEDULES
#undef X

struct ScheduleEntry {
  int tm, tn, cm;
  int (*workspace)(void const*, void const*, void const*, void*, int, int, int, int, size_t*);
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

// This library's runtime keeps its own current device (the caller's torch has another).
static int use_device(int device) {
  cudaError_t err = cudaSetDevice(device);
  return err == cudaSuccess ? 0 : machete_fail(cudaGetErrorString(err));
}

MACHETE_API char const* machete_last_error() { return g_machete_last_error.c_str(); }

MACHETE_API int machete_num_schedules() { return kNumSchedules; }

// The i-th built schedule as (tile M, tile N, cluster M) of generate.py's ScheduleConfig.
MACHETE_API int machete_schedule_at(int i, int* tm, int* tn, int* cm) {
  if (i < 0 || i >= kNumSchedules) return machete_fail("schedule index out of range");
  *tm = kSchedules[i].tm;
  *tn = kSchedules[i].tn;
  *cm = kSchedules[i].cm;
  return 0;
}

// Workspace bytes the schedule needs for D [M, N] = A [M, K] @ B (StreamK's partials, sized by
// the device's SM count), after Gemm::can_implement on the very arguments machete_mm gets (as
// run_impl checks them).
MACHETE_API int machete_workspace_size(int tm, int tn, int cm, void const* a, void const* b,
                                       void const* scales, void* d, int M, int N, int K,
                                       int group_size, int device, size_t* bytes) {
  auto s = find_schedule(tm, tn, cm);
  if (!s) return machete_fail("this schedule is not in the build");
  if (use_device(device)) return 1;
  return s->workspace(a, b, scales, d, M, N, K, group_size, bytes);
}

// D [M, N] bf16 = A [M, K] bf16 @ B, B from machete_prepack_B, scales [K / g, N] bf16 row-major
// (vLLM's transform_w_s), group_size -1 for per-channel. 0 = ok, 1 = error, 2 = the kernel
// cannot implement the arguments; machete_last_error() says what.
MACHETE_API int machete_mm(int tm, int tn, int cm, void const* a, void const* b,
                           void const* scales, void* d, int M, int N, int K, int group_size,
                           void* workspace, int device, cudaStream_t stream) {
  auto s = find_schedule(tm, tn, cm);
  if (!s) return machete_fail("this schedule is not in the build");
  if (use_device(device)) return 1;
  return s->mm(a, b, scales, d, M, N, K, group_size, workspace, stream);
}

// PREPACK_TEMPLATE's layout for (a = bf16, 4-bit B, convert = the bf16 group scale type).
using PrepackedB = machete::PrepackedLayoutBTemplate<
    cutlass::bfloat16_t, cutlass::uint4b_t, cutlass::bfloat16_t, float,
    cutlass::layout::ColumnMajor, cutlass::gemm::KernelTmaWarpSpecializedCooperative>;

// prepack_impl (machete_prepack_launcher.cuh) on raw pointers. `b` is vLLM's argument
// `x.data.t().contiguous().t()`: int32 [K / 8, N] with stride (1, K / 8), i.e. the checkpoint's
// `weight_packed` [N, K / 8] bytes, 8 nibbles per int32 along K, low nibble first. `out` gets
// the same number of bytes (N * K / 2).
MACHETE_API int machete_prepack_B(void const* b, void* out, int N, int K, int device,
                                  cudaStream_t stream) {
  MACHETE_CAPI_GUARD({
    using namespace cute;
    using PPBlockShape_NK = typename PrepackedB::PPBlockShape_NK;
    int constexpr eles_per_storage = 32 / 4;
    if (K % eles_per_storage != 0) return machete_fail("K must be a multiple of 8 (int32 packing)");
    if (K % size<1>(PPBlockShape_NK{}) != 0)
      return machete_fail("B.shape[0] (in terms of unpacked elements) must be a multiple of 64");
    if (N % size<0>(PPBlockShape_NK{}) != 0)
      return machete_fail("B.shape[1] must be a multiple of 128");
    if (use_device(device)) return 1;
    using StrideB = cutlass::detail::TagToStrideB_t<cutlass::layout::ColumnMajor>;
    int64_t const packed_k = K / eles_per_storage;
    // Bt_packed = B.transpose(0, 1): (N, packed_K, L), make_cute_layout's strides.
    StrideB s{};
    get<0>(s) = N == 1 ? 0 : packed_k;
    get<2>(s) = 0;
    auto const l_Bt_packed = make_layout(make_shape(int64_t(N), packed_k, int64_t(1)), s);
    // (N, packed_K, L) -> (N, K, L), as prepack_impl does it.
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
    if (err != cudaSuccess) return machete_fail(cudaGetErrorString(err));
    return 0;
  })
}
