// bias_grad.cpp: db(cols) = beta * db + sum over rows of dy(rows, cols), on the CPU.
//
// Rows are added one after another into db (float), a row at a time so the inner loop
// vectorises across columns. It does not use pairwise or double summation: with the
// batch sizes of a micro-batch (<= a few thousand rows) the float error stays far below
// what the equivalence tests allow, and summation order is allowed to differ anyway.
#include "kernels/cpu/vectorize.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

TROUPE_VECTOR_CLONES
void add_rows_into(int rows, int cols, const float* __restrict dy, float* __restrict db) {
  for (int r = 0; r < rows; ++r) {
    const float* __restrict row = dy + static_cast<std::int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c)
      db[c] += row[c];
  }
}

void bias_grad(const context&, int rows, int cols, const float* dy, float beta,
               float* db) {
  // beta = 0 overwrites, so that whatever db held (even NaN) does not leak through 0 * db.
  if (beta == 0.0f) {
    for (int c = 0; c < cols; ++c)
      db[c] = 0.0f;
  } else if (beta != 1.0f) {
    for (int c = 0; c < cols; ++c)
      db[c] *= beta;
  }
  add_rows_into(rows, cols, dy, db);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::bias_grad, device_type::cpu, bias_grad);

}  // namespace troupe::kernels::cpu
