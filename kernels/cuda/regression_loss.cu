// regression_loss.cu: the CUDA backends of ops::mse_loss, ops::l1_loss and ops::huber_loss
// over n predictions and targets, with their gradients.
//
// One grid-stride kernel, three element rules (the CPU's, regression_loss.cpp): d = x - y,
// the loss of d and its derivative. Each thread keeps partial sums of the loss, d^2 and |d|
// (Note [loss sums] in include/troupe/ops.hpp); blocks add theirs to sums[] by atomicAdd,
// so the last bits depend on the order blocks finish. The first thread writes sums[1] = n.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/elementwise_sums.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

struct squared {
  __device__ static float loss(float d, float) { return d * d; }
  __device__ static float gradient(float d, float) { return 2.0f * d; }
};

struct absolute {
  __device__ static float loss(float d, float) { return fabsf(d); }
  __device__ static float gradient(float d, float) { return d > 0 ? 1.0f : (d < 0 ? -1.0f : 0.0f); }
};

struct huber {
  __device__ static float loss(float d, float delta) {
    const float a = fabsf(d);
    return a < delta ? 0.5f * d * d : delta * (a - 0.5f * delta);
  }
  __device__ static float gradient(float d, float delta) { return fminf(fmaxf(d, -delta), delta); }
};

template <class Rule>
__global__ void regression_loss_kernel(std::int64_t n, const float* x, const float* y,
                                       float delta, float grad_scale, float* sums, float* dx) {
  float partial[3] = {0.0f, 0.0f, 0.0f};  // loss, d^2, |d|
  if (blockIdx.x == 0 && threadIdx.x == 0)
    sums[1] = static_cast<float>(n);  // nobody else writes it
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const float d = x[i] - y[i];
    partial[0] += Rule::loss(d, delta);
    partial[1] += d * d;
    partial[2] += fabsf(d);
    if (dx != nullptr)
      dx[i] = grad_scale * Rule::gradient(d, delta);
  }
  const float loss[1] = {partial[0]};
  const float metrics[2] = {partial[1], partial[2]};
  add_block_sums<1, 0>(loss, sums);
  add_block_sums<2, 2>(metrics, sums);
}

// ---- launchers ----

template <class Rule>
void regression_loss(const context& ctx, std::int64_t n, const float* x, const float* y,
                     float delta, float grad_scale, float* sums, float* dx) {
  TROUPE_CHECK(n >= 0, "a regression loss needs n >= 0, not " << n);
  TROUPE_CHECK(sums != nullptr, "a regression loss needs a device pointer for its sums");
  CUDA_CHECK(cudaMemsetAsync(sums, 0, 4 * sizeof(float), stream_of(ctx)));
  if (n == 0)
    return;
  regression_loss_kernel<Rule><<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(
      n, x, y, delta, grad_scale, sums, dx);
  TROUPE_CHECK_LAUNCH();
}

void huber_loss(const context& ctx, std::int64_t n, const float* x, const float* y, float delta,
                float grad_scale, float* sums, float* dx) {
  TROUPE_CHECK(delta > 0, "huber_loss needs delta > 0, not " << delta);
  regression_loss<huber>(ctx, n, x, y, delta, grad_scale, sums, dx);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::mse_loss, device_type::cuda, regression_loss<squared>);
TROUPE_REGISTER_KERNEL(ops::l1_loss, device_type::cuda, regression_loss<absolute>);
TROUPE_REGISTER_KERNEL(ops::huber_loss, device_type::cuda, huber_loss);

}  // namespace troupe::kernels::cuda_backend
