// fill.cu: the CUDA backend of ops::fill, x = value over n elements.
//
// A grid-stride loop, not cudaMemsetAsync: memset writes bytes, so it can only produce
// values whose four bytes are equal (0.0f among them), and fill takes any float.
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void fill_kernel(std::int64_t n, float value, float* x) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    x[i] = value;
}

}  // namespace

// ---- launchers ----

void fill(const context& ctx, std::int64_t n, float value, float* x) {
  TROUPE_CHECK(n >= 0, "fill size must not be negative: n=" << n);
  if (n == 0)
    return;
  fill_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, value, x);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::fill, device_type::cuda, fill);

}  // namespace troupe::kernels::cuda_backend
