// relu.cu: the CUDA backend of ops::relu_forward and ops::relu_backward.
//
// y = max(x, 0); dx = dy where y > 0, else 0. The backward reads y, not x: the two agree
// on the sign, and y is still intact when the forward ran in place (x aliasing y). At
// x == 0 the gradient is 0, as in PyTorch. NaN inputs propagate in the forward (fmaxf
// would drop them; PyTorch keeps them).
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void relu_forward_kernel(std::int64_t n, const float* x, float* y) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const float value = x[i];
    y[i] = value < 0.0f ? 0.0f : value;
  }
}

__global__ void relu_backward_kernel(std::int64_t n, const float* y, const float* dy,
                                     float* dx) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

}  // namespace

// ---- launchers ----

void relu_forward(const context& ctx, std::int64_t n, const float* x, float* y) {
  TROUPE_CHECK(n >= 0, "relu_forward size must not be negative: n=" << n);
  if (n == 0)
    return;
  relu_forward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, x, y);
  TROUPE_CHECK_LAUNCH();
}

void relu_backward(const context& ctx, std::int64_t n, const float* /*x*/, const float* y,
                   const float* dy, float* dx) {
  TROUPE_CHECK(n >= 0, "relu_backward size must not be negative: n=" << n);
  TROUPE_CHECK(y != nullptr || n == 0, "relu_backward on CUDA reads y = relu(x); it is null");
  if (n == 0)
    return;
  relu_backward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, y, dy,
                                                                                       dx);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::relu_forward, device_type::cuda, relu_forward);
TROUPE_REGISTER_KERNEL(ops::relu_backward, device_type::cuda, relu_backward);

}  // namespace troupe::kernels::cuda_backend
