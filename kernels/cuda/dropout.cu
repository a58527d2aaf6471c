// dropout.cu: the CUDA backend of ops::dropout: a grid-stride loop drawing each element's
// mask from its global index with the CPU kernel's hash (kernels/dropout_hash.hpp), so
// both keep exactly the same elements.
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/dropout_hash.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void dropout_kernel(std::int64_t n, std::uint64_t key, std::uint64_t first,
                               std::uint32_t threshold, float scale, const float* x, float* y) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    y[i] = dropout_keeps(key, first + static_cast<std::uint64_t>(i), threshold) ? x[i] * scale
                                                                                 : 0.0f;
}

}  // namespace

// ---- launchers ----

void dropout(const context& ctx, std::int64_t rows, std::int64_t cols, float p,
             std::uint64_t key, std::int64_t first_row, const float* x, float* y) {
  TROUPE_CHECK(rows >= 0 && cols >= 0 && first_row >= 0,
               "dropout sizes: rows=" << rows << " cols=" << cols << " first_row=" << first_row);
  TROUPE_CHECK(p >= 0.0f && p < 1.0f, "dropout p must be in [0, 1), got " << p);
  const std::int64_t n = rows * cols;
  if (n == 0)
    return;
  dropout_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(
      n, key, static_cast<std::uint64_t>(first_row) * static_cast<std::uint64_t>(cols),
      dropout_threshold(p), 1.0f / (1.0f - p), x, y);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::dropout, device_type::cuda, dropout);

}  // namespace troupe::kernels::cuda_backend
