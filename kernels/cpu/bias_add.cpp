// bias_add.cpp: y(rows, cols) += bias(cols), broadcast over rows, on the CPU.
//
// One vectorised pass per row; it does not fuse with the gemm before it (OpenBLAS has no
// epilogue hook, and the pass is memory-bound and cheap next to the gemm).
#include "kernels/cpu/vectorize.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

TROUPE_VECTOR_CLONES
void add_rows(int rows, int cols, const float* __restrict bias, float* __restrict y) {
  for (int r = 0; r < rows; ++r) {
    float* __restrict row = y + static_cast<std::int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c)
      row[c] += bias[c];
  }
}

void bias_add(const context&, int rows, int cols, const float* bias, float* y) {
  add_rows(rows, cols, bias, y);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::bias_add, device_type::cpu, bias_add);

}  // namespace troupe::kernels::cpu
