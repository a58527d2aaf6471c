// gelu.cu: the CUDA backend of ops::gelu_forward and ops::gelu_backward, the exact erf
// form of torch.nn.GELU() (not the tanh approximation).
//
// y = x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2;  dy/dx = Phi(x) + x * phi(x), with
// phi the standard normal density. The backward reads x (y alone does not determine x).
// Uses the accurate erff/expf (no --use_fast_math), so results match the CPU to a few ulp.
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

constexpr float inv_sqrt2 = 0.70710678118654752440f;
constexpr float inv_sqrt_2pi = 0.39894228040143267794f;

// ---- kernels ----

__global__ void gelu_forward_kernel(std::int64_t n, const float* x, float* y) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const float value = x[i];
    y[i] = 0.5f * value * (1.0f + erff(value * inv_sqrt2));
  }
}

__global__ void gelu_backward_kernel(std::int64_t n, const float* x, const float* dy,
                                     float* dx) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const float value = x[i];
    const float cdf = 0.5f * (1.0f + erff(value * inv_sqrt2));
    const float pdf = inv_sqrt_2pi * expf(-0.5f * value * value);
    dx[i] = dy[i] * (cdf + value * pdf);
  }
}

}  // namespace

// ---- launchers ----

void gelu_forward(const context& ctx, std::int64_t n, const float* x, float* y) {
  TROUPE_CHECK(n >= 0, "gelu_forward size must not be negative: n=" << n);
  if (n == 0)
    return;
  gelu_forward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, x, y);
  TROUPE_CHECK_LAUNCH();
}

void gelu_backward(const context& ctx, std::int64_t n, const float* x, const float* /*y*/,
                   const float* dy, float* dx) {
  TROUPE_CHECK(n >= 0, "gelu_backward size must not be negative: n=" << n);
  TROUPE_CHECK(x != nullptr || n == 0, "gelu_backward on CUDA reads x; it is null");
  if (n == 0)
    return;
  gelu_backward_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, x, dy,
                                                                                       dx);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::gelu_forward, device_type::cuda, gelu_forward);
TROUPE_REGISTER_KERNEL(ops::gelu_backward, device_type::cuda, gelu_backward);

}  // namespace troupe::kernels::cuda_backend
