// axpy.cpp: y += alpha * x over n elements, on the CPU (gradient accumulation, averaging).
//
// x and y must not overlap. It does not call BLAS saxpy: the plain loop is as fast and
// keeps this file free of BLAS threading.
#include "kernels/cpu/vectorize.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

TROUPE_VECTOR_CLONES
void axpy_loop(std::int64_t n, float alpha, const float* __restrict x, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] += alpha * x[i];
}

void axpy(const context&, std::int64_t n, float alpha, const float* x, float* y) {
  axpy_loop(n, alpha, x, y);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::axpy, device_type::cpu, axpy);

}  // namespace troupe::kernels::cpu
