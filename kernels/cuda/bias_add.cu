// bias_add.cu: the CUDA backend of ops::bias_add, y(rows, cols) += bias(cols).
//
// One grid-stride loop over all elements; the bias row is small and stays in L1/L2.
// No fused activation here (that would be another op).
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void bias_add_kernel(std::int64_t n, int cols, const float* bias, float* y) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    y[i] += bias[i % cols];
}

}  // namespace

// ---- launchers ----

void bias_add(const context& ctx, int rows, int cols, const float* bias, float* y) {
  TROUPE_CHECK(rows >= 0 && cols >= 0,
               "bias_add sizes must not be negative: rows=" << rows << " cols=" << cols);
  const std::int64_t n = static_cast<std::int64_t>(rows) * cols;
  if (n == 0)
    return;
  bias_add_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, cols,
                                                                                    bias, y);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::bias_add, device_type::cuda, bias_add);

}  // namespace troupe::kernels::cuda_backend
