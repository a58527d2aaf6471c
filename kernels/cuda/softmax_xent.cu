// softmax_xent.cu: the CUDA backend of ops::softmax_xent, softmax cross-entropy over the
// rows of logits(rows, classes) with integer labels(rows).
//
// One warp per row (classification heads have tens to a few thousand classes; a warp
// strides over them): max, then sum of exp(logit - max) (stable for any logit range),
// then loss = log(sum) + max - logit[label] and, if asked, dlogits. Each warp adds its
// row's loss to *loss_sum with one atomicAdd, so the last bits of the sum depend on the
// order warps finish; the launcher zeroes *loss_sum on the stream first.
// dlogits may be null (loss only) or logits itself (the gradient overwrites the logits),
// as on the CPU. A label outside [0, classes) cannot throw on the device: that row's loss
// and dlogits become NaN, so the bug shows in the loss instead of passing silently.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

constexpr int warp_size = 32;
constexpr int rows_per_block = threads_per_block / warp_size;
constexpr unsigned int full_mask = 0xffffffffu;

// ---- kernels ----

__device__ float warp_max(float value) {
  for (int offset = warp_size / 2; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(full_mask, value, offset));
  return value;
}

__device__ float warp_sum(float value) {
  for (int offset = warp_size / 2; offset > 0; offset /= 2)
    value += __shfl_xor_sync(full_mask, value, offset);
  return value;
}

__global__ void softmax_xent_kernel(int rows, int classes, const float* logits,
                                    const std::int32_t* labels, float grad_scale,
                                    float* loss_sum, float* dlogits) {
  const int row = blockIdx.x * rows_per_block + threadIdx.x / warp_size;
  const int lane = threadIdx.x % warp_size;
  if (row >= rows)
    return;  // the whole warp leaves together, so the shuffles below stay full-mask
  const float* x = logits + static_cast<std::int64_t>(row) * classes;

  float max_logit = -INFINITY;
  for (int j = lane; j < classes; j += warp_size)
    max_logit = fmaxf(max_logit, x[j]);
  max_logit = warp_max(max_logit);

  const std::int32_t label = labels[row];
  const bool label_valid = label >= 0 && label < classes;
  const float label_logit = label_valid ? x[label] : NAN;

  float sum = 0.0f;
  for (int j = lane; j < classes; j += warp_size)
    sum += expf(x[j] - max_logit);
  sum = warp_sum(sum);
  const float log_sum = logf(sum);

  if (lane == 0) {
    // max - x[label] first: for large logits it is (nearly) exact, whereas
    // log_sum + max would round to the coarse spacing of max.
    atomicAdd(loss_sum, (max_logit - label_logit) + log_sum);
  }
  if (dlogits != nullptr) {
    // dlogits may be logits itself: every lane has read all it needs of other lanes'
    // elements (the label logit) before any lane writes; a lane then rewrites only the
    // elements it reads itself.
    __syncwarp();
    float* dx = dlogits + static_cast<std::int64_t>(row) * classes;
    for (int j = lane; j < classes; j += warp_size) {
      const float probability = expf(x[j] - max_logit) / sum;
      const float target = j == label ? 1.0f : 0.0f;
      dx[j] = label_valid ? grad_scale * (probability - target) : NAN;
    }
  }
}

}  // namespace

// ---- launchers ----

void softmax_xent(const context& ctx, int rows, int classes, const float* logits,
                  const std::int32_t* labels, float grad_scale, float* loss_sum,
                  float* dlogits) {
  TROUPE_CHECK(rows >= 0 && classes > 0, "softmax_xent needs rows >= 0 and classes > 0: rows="
                                             << rows << " classes=" << classes);
  TROUPE_CHECK(loss_sum != nullptr, "softmax_xent needs a device pointer for loss_sum");
  CUDA_CHECK(cudaMemsetAsync(loss_sum, 0, sizeof(float), stream_of(ctx)));
  if (rows == 0)
    return;
  const auto blocks =
      static_cast<unsigned int>((rows + rows_per_block - 1) / rows_per_block);
  softmax_xent_kernel<<<blocks, threads_per_block, 0, stream_of(ctx)>>>(
      rows, classes, logits, labels, grad_scale, loss_sum, dlogits);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::softmax_xent, device_type::cuda, softmax_xent);

}  // namespace troupe::kernels::cuda_backend
