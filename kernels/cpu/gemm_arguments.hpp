// gemm_arguments.hpp: what the CPU gemm kernels (gemm.cpp, gemm_bf16.cpp) check before they
// compute, and the empty products they finish themselves.
#pragma once

#include <cstdint>

#include "troupe/check.hpp"

namespace troupe::kernels::cpu {

/// Checks the sizes and leading dimensions of `op`'s product (TROUPE_CHECK: a library
/// reports a bad one by printing a line and doing nothing) and does the empty ones: returns
/// false when nothing is left to compute (m or n is 0; or k is 0, and C is now beta * C, where
/// beta = 0 overwrites, so that garbage or NaN in C does not survive).
inline bool gemm_arguments_checked(const char* op, bool transpose_a, bool transpose_b, int m,
                                   int n, int k, int lda, int ldb, float beta, float* c, int ldc) {
  TROUPE_CHECK(m >= 0 && n >= 0 && k >= 0,
               op << " shape m=" << m << " n=" << n << " k=" << k << " has a negative size");
  // Row-major: the stored row of A is k wide (op = identity) or m wide (transposed).
  const int a_width = transpose_a ? m : k;
  const int b_width = transpose_b ? k : n;
  TROUPE_CHECK(lda >= a_width && ldb >= b_width && ldc >= n,
               op << " leading dimensions lda=" << lda << " ldb=" << ldb << " ldc=" << ldc
                  << " are narrower than the rows (" << a_width << ", " << b_width << ", " << n
                  << ")");
  if (m == 0 || n == 0)
    return false;
  if (k == 0) {
    for (int i = 0; i < m; ++i) {
      float* row = c + static_cast<std::int64_t>(i) * ldc;
      for (int j = 0; j < n; ++j)
        row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return false;
  }
  return true;
}

}  // namespace troupe::kernels::cpu
