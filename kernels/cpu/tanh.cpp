// tanh.cpp: y = tanh(x) and its backward dx = (1 - y^2) * dy, on the CPU.
//
// The backward reads y (one multiply instead of a tanh); when a layer kept only x it
// recomputes tanh(x). dx may be dy (in place). The forward calls tanhf per element, so
// it does not vectorise without -ffast-math/libmvec; the backward loop does.
#include <cmath>

#include "kernels/cpu/vectorize.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

// x and y may be the same buffer: each element is read before it is written.
void tanh_forward(const context&, std::int64_t n, const float* x, float* y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = std::tanh(x[i]);
}

TROUPE_VECTOR_CLONES
void backward_from_y(std::int64_t n, const float* __restrict y, const float* __restrict dy,
                     float* __restrict dx) {
  for (std::int64_t i = 0; i < n; ++i)
    dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

TROUPE_VECTOR_CLONES
void backward_from_y_in_place(std::int64_t n, const float* __restrict y,
                              float* __restrict dy_dx) {
  for (std::int64_t i = 0; i < n; ++i)
    dy_dx[i] *= 1.0f - y[i] * y[i];
}

void tanh_backward(const context&, std::int64_t n, const float* x, const float* y,
                   const float* dy, float* dx) {
  if (y != nullptr) {
    if (dx == dy)
      backward_from_y_in_place(n, y, dx);
    else
      backward_from_y(n, y, dy, dx);
    return;
  }
  TROUPE_CHECK(x != nullptr || n == 0, "tanh_backward needs x or y; both are null");
  for (std::int64_t i = 0; i < n; ++i) {
    const float yi = std::tanh(x[i]);
    dx[i] = dy[i] * (1.0f - yi * yi);
  }
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::tanh_forward, device_type::cpu, tanh_forward);
TROUPE_REGISTER_KERNEL(ops::tanh_backward, device_type::cpu, tanh_backward);

}  // namespace troupe::kernels::cpu
