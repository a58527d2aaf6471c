// gemm.cu: the CUDA backend of ops::gemm, on cuBLAS.
//
// Row-major C(m, n) = alpha * op(A) op(B) + beta * C is computed as the column-major
// product C^T(n, m) = alpha * op(B)^T op(A)^T + beta * C^T: a row-major matrix with row
// stride ld is, read column-major with the same ld, its own transpose. So the operands
// are swapped and the transpose flags kept. cuBLAS's default math mode is used: full FP32,
// no TF32 (a TF32 GEMM would not match the CPU to the tolerance the tests promise).
// No own GEMM kernel here and no batching.
#include <cublas_v2.h>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {

// ---- launchers ----

void gemm(const context& ctx, bool transpose_a, bool transpose_b, int m, int n, int k,
          float alpha, const float* a, int lda, const float* b, int ldb, float beta, float* c,
          int ldc) {
  TROUPE_CHECK(m >= 0 && n >= 0 && k >= 0,
               "gemm sizes must not be negative: m=" << m << " n=" << n << " k=" << k);
  TROUPE_CHECK(ctx.blas != nullptr, "gemm on CUDA needs a cuBLAS handle in context::blas");
  if (m == 0 || n == 0)
    return;
  auto handle = static_cast<cublasHandle_t>(ctx.blas);
  CUBLAS_CHECK(cublasSetStream(handle, stream_of(ctx)));
  // alpha and beta are host scalars; a handle shared with code that switched it to
  // device pointers must not make us read them from the device.
  CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
  CUBLAS_CHECK(cublasSgemm(handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                           transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a,
                           lda, &beta, c, ldc));
}

TROUPE_REGISTER_KERNEL(ops::gemm, device_type::cuda, gemm);

}  // namespace troupe::kernels::cuda_backend
