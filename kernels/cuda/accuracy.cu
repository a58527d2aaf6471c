// accuracy.cu: the CUDA backend of ops::accuracy, the number of rows of logits(rows,
// classes) whose argmax equals the label.
//
// One warp per row; argmax takes the first index on ties, as torch.argmax and the CPU
// kernel do. A warp whose row is right adds 1 to *correct (zeroed by the launcher on the
// stream); adds of 1.0 are exact up to 2^24, so the count is exact whatever the order. Rows
// labelled ignore_index are not counted. A row with a NaN logit
// has no meaningful argmax (it may differ from the CPU's); a label outside [0, classes)
// simply never matches.
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

__global__ void accuracy_kernel(int rows, int classes, const float* logits,
                                const std::int32_t* labels, std::int32_t ignore_index,
                                float* correct) {
  const int row = blockIdx.x * rows_per_block + threadIdx.x / warp_size;
  const int lane = threadIdx.x % warp_size;
  if (row >= rows)
    return;  // the whole warp leaves together
  const float* x = logits + static_cast<std::int64_t>(row) * classes;

  // Each lane scans its strided indices in increasing order, so strict > keeps its first.
  float best_value = -INFINITY;
  int best_index = classes;  // "none yet": loses every tie-break below
  for (int j = lane; j < classes; j += warp_size) {
    if (best_index == classes || x[j] > best_value) {
      best_value = x[j];
      best_index = j;
    }
  }
  for (int offset = warp_size / 2; offset > 0; offset /= 2) {
    const float other_value = __shfl_xor_sync(full_mask, best_value, offset);
    const int other_index = __shfl_xor_sync(full_mask, best_index, offset);
    const bool other_wins =
        other_index != classes &&
        (best_index == classes || other_value > best_value ||
         (other_value == best_value && other_index < best_index));
    if (other_wins) {
      best_value = other_value;
      best_index = other_index;
    }
  }
  if (lane == 0 && labels[row] != ignore_index && best_index == labels[row])
    atomicAdd(correct, 1.0f);
}

}  // namespace

// ---- launchers ----

void accuracy(const context& ctx, int rows, int classes, const float* logits,
              const std::int32_t* labels, std::int32_t ignore_index, float* correct) {
  TROUPE_CHECK(rows >= 0 && classes > 0, "accuracy needs rows >= 0 and classes > 0: rows="
                                             << rows << " classes=" << classes);
  TROUPE_CHECK(correct != nullptr, "accuracy needs a device pointer for correct");
  CUDA_CHECK(cudaMemsetAsync(correct, 0, sizeof(float), stream_of(ctx)));
  if (rows == 0)
    return;
  const auto blocks =
      static_cast<unsigned int>((rows + rows_per_block - 1) / rows_per_block);
  accuracy_kernel<<<blocks, threads_per_block, 0, stream_of(ctx)>>>(rows, classes, logits,
                                                                     labels, ignore_index, correct);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::accuracy, device_type::cuda, accuracy);

}  // namespace troupe::kernels::cuda_backend
