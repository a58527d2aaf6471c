// layer_norm.cu: the CUDA backend of ops::layer_norm_forward and ops::layer_norm_backward.
//
// Forward and dx: one block per row (block_reduce for the sums). dgamma and dbeta: one
// thread per column adding rows in order, as bias_grad does, so the result is the same
// bits on every run.
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_reduce.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void layer_norm_forward_kernel(int cols, const float* x, const float* gamma,
                                          const float* beta, float eps, float* y, float* mean,
                                          float* rstd) {
  __shared__ float scratch[threads_per_block];
  const std::int64_t at = static_cast<std::int64_t>(blockIdx.x) * cols;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    sum += x[at + c];
  const float m = block_reduce(sum, scratch) / cols;
  float squares = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    squares += (x[at + c] - m) * (x[at + c] - m);
  const float s = rsqrtf(block_reduce(squares, scratch) / cols + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[at + c] = (x[at + c] - m) * s * gamma[c] + beta[c];
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = s;
  }
}

__global__ void layer_norm_dx_kernel(int cols, const float* x, const float* gamma,
                                     const float* mean, const float* rstd, const float* dy,
                                     float* dx) {
  __shared__ float scratch[threads_per_block];
  const std::int64_t at = static_cast<std::int64_t>(blockIdx.x) * cols;
  const float m = mean[blockIdx.x], s = rstd[blockIdx.x];
  float sum_g = 0.0f, sum_g_xhat = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = dy[at + c] * gamma[c];
    sum_g += g;
    sum_g_xhat += g * (x[at + c] - m) * s;
  }
  const float mean_g = block_reduce(sum_g, scratch) / cols;
  const float mean_g_xhat = block_reduce(sum_g_xhat, scratch) / cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    dx[at + c] = s * (dy[at + c] * gamma[c] - mean_g - (x[at + c] - m) * s * mean_g_xhat);
}

__global__ void layer_norm_parameters_kernel(int rows, int cols, const float* x,
                                             const float* mean, const float* rstd,
                                             const float* dy, float accumulate, float* dgamma,
                                             float* dbeta) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols)
    return;
  float sum_gamma = 0.0f, sum_beta = 0.0f;
  for (int r = 0; r < rows; ++r) {
    const std::int64_t at = static_cast<std::int64_t>(r) * cols + c;
    sum_gamma += dy[at] * (x[at] - mean[r]) * rstd[r];
    sum_beta += dy[at];
  }
  if (dgamma != nullptr)
    dgamma[c] = accumulate == 0.0f ? sum_gamma : dgamma[c] + sum_gamma;
  if (dbeta != nullptr)
    dbeta[c] = accumulate == 0.0f ? sum_beta : dbeta[c] + sum_beta;
}

}  // namespace

// ---- launchers ----

void layer_norm_forward(const context& ctx, int rows, int cols, const float* x,
                        const float* gamma, const float* beta, float eps, float* y, float* mean,
                        float* rstd) {
  TROUPE_CHECK(rows >= 0 && cols > 0,
               "layer_norm_forward sizes: rows=" << rows << " cols=" << cols);
  if (rows == 0)
    return;
  layer_norm_forward_kernel<<<rows, threads_per_block, 0, stream_of(ctx)>>>(cols, x, gamma, beta,
                                                                           eps, y, mean, rstd);
  TROUPE_CHECK_LAUNCH();
}

void layer_norm_backward(const context& ctx, int rows, int cols, const float* x,
                         const float* gamma, const float* mean, const float* rstd,
                         const float* dy, float* dx, float accumulate, float* dgamma,
                         float* dbeta) {
  TROUPE_CHECK(rows >= 0 && cols > 0,
               "layer_norm_backward sizes: rows=" << rows << " cols=" << cols);
  TROUPE_CHECK(accumulate == 0.0f || accumulate == 1.0f,
               "layer_norm_backward accumulate must be 0 or 1, got " << accumulate);
  if (dgamma != nullptr || dbeta != nullptr) {
    const unsigned int blocks = static_cast<unsigned int>((cols + threads_per_block - 1) /
                                                          threads_per_block);
    layer_norm_parameters_kernel<<<blocks, threads_per_block, 0, stream_of(ctx)>>>(
        rows, cols, x, mean, rstd, dy, accumulate, dgamma, dbeta);
    TROUPE_CHECK_LAUNCH();
  }
  if (dx != nullptr && rows > 0) {
    layer_norm_dx_kernel<<<rows, threads_per_block, 0, stream_of(ctx)>>>(cols, x, gamma, mean,
                                                                        rstd, dy, dx);
    TROUPE_CHECK_LAUNCH();
  }
}

TROUPE_REGISTER_KERNEL(ops::layer_norm_forward, device_type::cuda, layer_norm_forward);
TROUPE_REGISTER_KERNEL(ops::layer_norm_backward, device_type::cuda, layer_norm_backward);

}  // namespace troupe::kernels::cuda_backend
