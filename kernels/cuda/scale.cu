// scale.cu: the CUDA backend of ops::scale, x *= alpha over n elements.
//
// A grid-stride loop; alpha == 0 multiplies too (so NaN/inf stay NaN, as x * 0 does),
// it is not turned into a fill.
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void scale_kernel(std::int64_t n, float alpha, float* x) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    x[i] *= alpha;
}

}  // namespace

// ---- launchers ----

void scale(const context& ctx, std::int64_t n, float alpha, float* x) {
  TROUPE_CHECK(n >= 0, "scale size must not be negative: n=" << n);
  if (n == 0)
    return;
  scale_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, alpha, x);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::scale, device_type::cuda, scale);

}  // namespace troupe::kernels::cuda_backend
