// axpy.cpp: y += alpha * x over n elements, on the CPU (gradient accumulation, averaging), and
// z = x + y (the sum of two inputs in one pass: a layer's summed inputs and gradients).
//
// axpy's x and y must not overlap; add's z may be x or y. It does not call BLAS saxpy: the plain
// loop is as fast and keeps this file free of BLAS threading.
#include "kernels/cpu/vectorize.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

TROUPE_VECTOR_CLONES
void axpy_loop(std::int64_t n, float alpha, const float* __restrict x, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] += alpha * x[i];
}

// No __restrict: z may be x or y. Each element is read before it is written, and GCC
// vectorises the loop behind a runtime test of the overlap.
TROUPE_VECTOR_CLONES
void add_loop(std::int64_t n, const float* x, const float* y, float* z) {
  for (std::int64_t i = 0; i < n; ++i)
    z[i] = x[i] + y[i];
}

void axpy(const context&, std::int64_t n, float alpha, const float* x, float* y) {
  axpy_loop(n, alpha, x, y);
}

void add(const context&, std::int64_t n, const float* x, const float* y, float* z) {
  add_loop(n, x, y, z);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::axpy, device_type::cpu, axpy);
TROUPE_REGISTER_KERNEL(ops::add, device_type::cpu, add);

}  // namespace troupe::kernels::cpu
