// softmax_xent.cu: the CUDA backend of ops::softmax_xent, softmax cross-entropy over the
// rows of logits(rows, classes) with integer labels(rows), label smoothing and an ignored
// label.
//
// One warp per row (classification heads have tens to a few thousand classes; a warp
// strides over them): max, then sum of exp(logit - max) (stable for any logit range),
// then loss = log(sum) + (1 - eps) (max - logit[label]) + eps / classes * sum (max - logit)
// and, if asked, dlogits. Each warp adds its row's loss and count to sums[0] and sums[1]
// with atomicAdd, so the last bits of the loss depend on the order warps finish; the
// launcher zeroes the sums on the stream first. An ignored row adds nothing, its gradient 0.
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
                                    const std::int32_t* labels, xent_options options,
                                    float grad_scale, float* sums, float* dlogits) {
  const int row = blockIdx.x * rows_per_block + threadIdx.x / warp_size;
  const int lane = threadIdx.x % warp_size;
  if (row >= rows)
    return;  // the whole warp leaves together, so the shuffles below stay full-mask
  const float* x = logits + static_cast<std::int64_t>(row) * classes;
  const std::int32_t label = labels[row];
  if (label == options.ignore_index) {
    if (dlogits != nullptr)
      for (int j = lane; j < classes; j += warp_size)
        dlogits[static_cast<std::int64_t>(row) * classes + j] = 0.0f;
    return;  // the whole warp: the label is the warp's
  }

  float max_logit = -INFINITY;
  for (int j = lane; j < classes; j += warp_size)
    max_logit = fmaxf(max_logit, x[j]);
  max_logit = warp_max(max_logit);

  const bool label_valid = label >= 0 && label < classes;
  const float label_logit = label_valid ? x[label] : NAN;

  const float smoothing = options.label_smoothing;
  const float spread = smoothing / static_cast<float>(classes);
  float sum = 0.0f;
  float below = 0.0f;  // sum (max - logit), for the smoothing's term
  for (int j = lane; j < classes; j += warp_size) {
    sum += expf(x[j] - max_logit);
    below += max_logit - x[j];
  }
  sum = warp_sum(sum);
  below = smoothing != 0.0f ? warp_sum(below) : 0.0f;
  const float log_sum = logf(sum);

  if (lane == 0) {
    // max - x[label] first: for large logits it is (nearly) exact, whereas
    // log_sum + max would round to the coarse spacing of max.
    atomicAdd(&sums[0], (1.0f - smoothing) * (max_logit - label_logit) + spread * below +
                            log_sum);
    atomicAdd(&sums[1], 1.0f);
  }
  if (dlogits != nullptr) {
    // dlogits may be logits itself: every lane has read all it needs of other lanes'
    // elements (the label logit) before any lane writes; a lane then rewrites only the
    // elements it reads itself.
    __syncwarp();
    float* dx = dlogits + static_cast<std::int64_t>(row) * classes;
    for (int j = lane; j < classes; j += warp_size) {
      const float probability = expf(x[j] - max_logit) / sum;
      const float target = (j == label ? 1.0f - smoothing : 0.0f) + spread;
      dx[j] = label_valid ? grad_scale * (probability - target) : NAN;
    }
  }
}

}  // namespace

// ---- launchers ----

void softmax_xent(const context& ctx, int rows, int classes, const float* logits,
                  const std::int32_t* labels, const xent_options& options, float grad_scale,
                  float* sums, float* dlogits) {
  TROUPE_CHECK(rows >= 0 && classes > 0, "softmax_xent needs rows >= 0 and classes > 0: rows="
                                             << rows << " classes=" << classes);
  TROUPE_CHECK(sums != nullptr, "softmax_xent needs a device pointer for its sums");
  CUDA_CHECK(cudaMemsetAsync(sums, 0, 2 * sizeof(float), stream_of(ctx)));
  if (rows == 0)
    return;
  const auto blocks =
      static_cast<unsigned int>((rows + rows_per_block - 1) / rows_per_block);
  softmax_xent_kernel<<<blocks, threads_per_block, 0, stream_of(ctx)>>>(
      rows, classes, logits, labels, options, grad_scale, sums, dlogits);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::softmax_xent, device_type::cuda, softmax_xent);

}  // namespace troupe::kernels::cuda_backend
