// tanh.cu: the CUDA backend of ops::tanh_forward and ops::tanh_backward.
//
// y = tanh(x); dx = (1 - y^2) dy. The backward reads y, which the forward already paid
// for, and which survives an in-place forward. Accurate tanhf (no --use_fast_math).
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void tanh_forward_kernel(std::int64_t n, const float* x, float* y) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    y[i] = tanhf(x[i]);
}

__global__ void tanh_backward_kernel(std::int64_t n, const float* y, const float* dy,
                                     float* dx) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const float value = y[i];
    dx[i] = (1.0f - value * value) * dy[i];
  }
}

}  // namespace

// ---- launchers ----

void tanh_forward(const context& ctx, std::int64_t n, const float* x, float* y) {
  TROUPE_CHECK(n >= 0, "tanh_forward size must not be negative: n=" << n);
  if (n == 0)
    return;
  tanh_forward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, x, y);
  TROUPE_CHECK_LAUNCH();
}

void tanh_backward(const context& ctx, std::int64_t n, const float* /*x*/, const float* y,
                   const float* dy, float* dx) {
  TROUPE_CHECK(n >= 0, "tanh_backward size must not be negative: n=" << n);
  TROUPE_CHECK(y != nullptr || n == 0, "tanh_backward on CUDA reads y = tanh(x); it is null");
  if (n == 0)
    return;
  tanh_backward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, y, dy,
                                                                                       dx);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::tanh_forward, device_type::cuda, tanh_forward);
TROUPE_REGISTER_KERNEL(ops::tanh_backward, device_type::cuda, tanh_backward);

}  // namespace troupe::kernels::cuda_backend
