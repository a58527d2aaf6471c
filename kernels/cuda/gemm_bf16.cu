// gemm_bf16.cu: the CUDA backend of ops::gemm_bf16, on cuBLAS's GemmEx: bf16 A and B on the
// tensor cores, products accumulated in FP32 (CUBLAS_COMPUTE_32F), C in FP32.
//
// Row-major as column-major, the operands swapped, as gemm.cu explains.
#include <cublas_v2.h>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {

// ---- launchers ----

void gemm_bf16(const context& ctx, bool transpose_a, bool transpose_b, int m, int n, int k,
               float alpha, const std::uint16_t* a, int lda, const std::uint16_t* b, int ldb,
               float beta, float* c, int ldc) {
  TROUPE_CHECK(m >= 0 && n >= 0 && k >= 0,
               "gemm_bf16 sizes must not be negative: m=" << m << " n=" << n << " k=" << k);
  TROUPE_CHECK(ctx.blas != nullptr, "gemm_bf16 on CUDA needs a cuBLAS handle in context::blas");
  if (m == 0 || n == 0)
    return;
  auto handle = static_cast<cublasHandle_t>(ctx.blas);
  CUBLAS_CHECK(cublasSetStream(handle, stream_of(ctx)));
  CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
  CUBLAS_CHECK(cublasGemmEx(handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                            transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                            CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

TROUPE_REGISTER_KERNEL(ops::gemm_bf16, device_type::cuda, gemm_bf16);

}  // namespace troupe::kernels::cuda_backend
