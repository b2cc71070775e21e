// One Machete schedule of the C ABI library: compiled once per schedule with -DSCH_TM, -DSCH_TN,
// -DSCH_CM (one kernel a translation unit, as vLLM spreads them over machete_mm_impl_part*.cu).
// This is generate.py's IMPL_TEMPLATE `impl_<types>_sch_<schedule>` with run_impl
// (machete_mm_launcher.cuh) on raw pointers.
#include "machete_capi.cuh"

using SchKernel = machete_capi::Kernel<machete_capi::Schedule<SCH_TM, SCH_TN, SCH_CM>>;

// run_impl's first half: the arguments, can_implement, the workspace size.
// 0 = ok; 2 = the kernel cannot implement these arguments (Gemm::can_implement).
extern "C" int MACHETE_SCH_FN_X(SCH_TM, SCH_TN, SCH_CM, workspace)(
    void const* a, void const* b, void const* scales, void* d, int M, int N, int K,
    int group_size, size_t* bytes) {
  MACHETE_CAPI_GUARD({
    auto args = machete_capi::make_arguments<SchKernel>(a, b, scales, d, M, N, K, group_size);
    if (!SchKernel::can_implement(args)) {
      g_machete_last_error = "Machete kernel cannot be run with these arguments";
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
    // run_impl's second half: MacheteKernelTemplate::run (initialize checks again).
    if (!SchKernel::can_implement(args)) {
      g_machete_last_error = "Machete kernel cannot be run with these arguments";
      return 2;
    }
    SchKernel::run(args, workspace, stream);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return machete_fail(cudaGetErrorString(err));
    return 0;
  })
}
