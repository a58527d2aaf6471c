// tanh.cpp: y = tanh(x) and its backward dx = (1 - y^2) * dy, on the CPU.
//
// The backward reads y (one multiply instead of a tanh); when a layer kept only x it
// recomputes tanh(x). dx may be dy (in place). tanh itself is vector_math.hpp's, which
// vectorises: libm's tanhf, a call per element, took most of a narrow tanh network's step.
#include "kernels/cpu/vector_math.hpp"
#include "kernels/cpu/vectorize.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

// x and y may be the same buffer: each element is read before it is written.
TROUPE_VECTOR_CLONES
void forward_loop(std::int64_t n, const float* x, float* y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = tanh_vectorisable(x[i]);
}

TROUPE_VECTOR_CLONES
void backward_from_x(std::int64_t n, const float* __restrict x, const float* dy, float* dx) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float yi = tanh_vectorisable(x[i]);
    dx[i] = dy[i] * (1.0f - yi * yi);
  }
}

void tanh_forward(const context&, std::int64_t n, const float* x, float* y) {
  forward_loop(n, x, y);
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
  backward_from_x(n, x, dy, dx);  // dx may be dy: each element is read before it is written
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::tanh_forward, device_type::cpu, tanh_forward);
TROUPE_REGISTER_KERNEL(ops::tanh_backward, device_type::cpu, tanh_backward);

}  // namespace troupe::kernels::cpu
