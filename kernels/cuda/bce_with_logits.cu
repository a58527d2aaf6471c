// bce_with_logits.cu: the CUDA backend of ops::bce_with_logits, binary cross-entropy on n
// logits with their gradient and the elements classified right.
//
// The CPU's formulas (bce_with_logits.cpp) in float: loss = max(x, 0) - x y +
// log1p(exp(-|x|)), dx = grad_scale * (sigmoid(x) - y), right = (x > 0) == (y >= 0.5).
// Each thread keeps partial sums; blocks add theirs to sums[] by atomicAdd (Note [loss sums]
// in include/troupe/ops.hpp). The first thread writes sums[1] = n.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/elementwise_sums.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void bce_with_logits_kernel(std::int64_t n, const float* x, const float* y,
                                       float grad_scale, float* sums, float* dx) {
  float partial[1] = {0.0f};
  float right[1] = {0.0f};
  if (blockIdx.x == 0 && threadIdx.x == 0)
    sums[1] = static_cast<float>(n);  // nobody else writes it
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const float logit = x[i];
    const float target = y[i];
    const float e = expf(-fabsf(logit));  // <= 1: no overflow
    partial[0] += fmaxf(logit, 0.0f) - logit * target + log1pf(e);
    right[0] += ((logit > 0) == (target >= 0.5f)) ? 1.0f : 0.0f;
    if (dx != nullptr) {
      const float sigmoid = logit >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
      dx[i] = grad_scale * (sigmoid - target);
    }
  }
  add_block_sums<1, 0>(partial, sums);
  add_block_sums<1, 2>(right, sums);
}

// ---- launchers ----

void bce_with_logits(const context& ctx, std::int64_t n, const float* x, const float* y,
                     float grad_scale, float* sums, float* dx) {
  TROUPE_CHECK(n >= 0, "bce_with_logits needs n >= 0, not " << n);
  TROUPE_CHECK(sums != nullptr, "bce_with_logits needs a device pointer for its sums");
  CUDA_CHECK(cudaMemsetAsync(sums, 0, 3 * sizeof(float), stream_of(ctx)));
  if (n == 0)
    return;
  bce_with_logits_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(
      n, x, y, grad_scale, sums, dx);
  TROUPE_CHECK_LAUNCH();
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::bce_with_logits, device_type::cuda, bce_with_logits);

}  // namespace troupe::kernels::cuda_backend
