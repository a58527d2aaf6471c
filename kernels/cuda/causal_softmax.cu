// causal_softmax.cu: the CUDA backend of ops::causal_softmax_forward and
// ops::causal_softmax_backward: one block per row, block_reduce for its maximum and sums.
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_reduce.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void causal_softmax_forward_kernel(int cols, float scale, const float* x, float* y) {
  __shared__ float scratch[threads_per_block];
  const std::int64_t at = static_cast<std::int64_t>(blockIdx.x) * cols;
  const int visible = blockIdx.x % cols + 1;
  float most = -INFINITY;
  for (int j = threadIdx.x; j < visible; j += blockDim.x)
    most = fmaxf(most, scale * x[at + j]);
  most = block_reduce<true>(most, scratch);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < visible; j += blockDim.x)
    sum += expf(scale * x[at + j] - most);
  const float inverse = 1.0f / block_reduce(sum, scratch);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[at + j] = j < visible ? expf(scale * x[at + j] - most) * inverse : 0.0f;
}

__global__ void causal_softmax_backward_kernel(int cols, float scale, const float* y,
                                               const float* dy, float* dx) {
  __shared__ float scratch[threads_per_block];
  const std::int64_t at = static_cast<std::int64_t>(blockIdx.x) * cols;
  const int visible = blockIdx.x % cols + 1;
  float dot = 0.0f;
  for (int j = threadIdx.x; j < visible; j += blockDim.x)
    dot += dy[at + j] * y[at + j];
  dot = block_reduce(dot, scratch);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    dx[at + j] = j < visible ? scale * y[at + j] * (dy[at + j] - dot) : 0.0f;
}

}  // namespace

// ---- launchers ----

void causal_softmax_forward(const context& ctx, int rows, int cols, float scale, const float* x,
                            float* y) {
  TROUPE_CHECK(rows >= 0 && cols > 0,
               "causal_softmax_forward sizes: rows=" << rows << " cols=" << cols);
  if (rows == 0)
    return;
  causal_softmax_forward_kernel<<<rows, threads_per_block, 0, stream_of(ctx)>>>(cols, scale, x,
                                                                               y);
  TROUPE_CHECK_LAUNCH();
}

void causal_softmax_backward(const context& ctx, int rows, int cols, float scale, const float* y,
                             const float* dy, float* dx) {
  TROUPE_CHECK(rows >= 0 && cols > 0,
               "causal_softmax_backward sizes: rows=" << rows << " cols=" << cols);
  if (rows == 0)
    return;
  causal_softmax_backward_kernel<<<rows, threads_per_block, 0, stream_of(ctx)>>>(cols, scale, y,
                                                                                dy, dx);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::causal_softmax_forward, device_type::cuda, causal_softmax_forward);
TROUPE_REGISTER_KERNEL(ops::causal_softmax_backward, device_type::cuda, causal_softmax_backward);

}  // namespace troupe::kernels::cuda_backend
