// gemm.cpp: C = alpha * op(A) * op(B) + beta * C on the CPU, through OpenBLAS's
// cblas_sgemm (row-major, leading dimensions passed straight through).
//
// It does not pick OpenBLAS's thread count: that is the CPU device's business (a device
// owns its cores; see DESIGN.md "Tensors and devices"). It checks the shape arguments,
// because OpenBLAS reports a bad one by printing a line and doing nothing.
#include <cblas.h>

#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

void gemm(const context&, bool transpose_a, bool transpose_b, int m, int n, int k,
          float alpha, const float* a, int lda, const float* b, int ldb, float beta,
          float* c, int ldc) {
  TROUPE_CHECK(m >= 0 && n >= 0 && k >= 0,
               "gemm shape m=" << m << " n=" << n << " k=" << k << " has a negative size");
  // Row-major: the stored row of A is k wide (op = identity) or m wide (transposed).
  const int a_width = transpose_a ? m : k;
  const int b_width = transpose_b ? k : n;
  TROUPE_CHECK(lda >= a_width && ldb >= b_width && ldc >= n,
               "gemm leading dimensions lda=" << lda << " ldb=" << ldb << " ldc=" << ldc
                                              << " are narrower than the rows ("
                                              << a_width << ", " << b_width << ", " << n
                                              << ")");
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    // An empty product: C = beta * C. BLAS would reject lda = 0 here; beta = 0 must
    // overwrite (not scale) so that garbage or NaN in C does not survive.
    for (int i = 0; i < m; ++i) {
      float* row = c + static_cast<std::int64_t>(i) * ldc;
      for (int j = 0; j < n; ++j)
        row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::gemm, device_type::cpu, gemm);

}  // namespace troupe::kernels::cpu
