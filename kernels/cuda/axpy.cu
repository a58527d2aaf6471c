// axpy.cu: the CUDA backends of ops::axpy, y += alpha * x over n elements, and ops::add,
// z = x + y.
//
// A grid-stride loop rather than cublasSaxpy: no handle is needed and n may exceed int.
// nvcc contracts the update into one fused multiply-add, so results may differ from a
// CPU's separate multiply and add in the last bit.
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__global__ void axpy_kernel(std::int64_t n, float alpha, const float* x, float* y) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    y[i] += alpha * x[i];
}

__global__ void add_kernel(std::int64_t n, const float* x, const float* y, float* z) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    z[i] = x[i] + y[i];
}

}  // namespace

// ---- launchers ----

void axpy(const context& ctx, std::int64_t n, float alpha, const float* x, float* y) {
  TROUPE_CHECK(n >= 0, "axpy size must not be negative: n=" << n);
  if (n == 0)
    return;
  axpy_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, alpha, x, y);
  TROUPE_CHECK_LAUNCH();
}

void add(const context& ctx, std::int64_t n, const float* x, const float* y, float* z) {
  TROUPE_CHECK(n >= 0, "add size must not be negative: n=" << n);
  if (n == 0)
    return;
  add_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, x, y, z);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::axpy, device_type::cuda, axpy);
TROUPE_REGISTER_KERNEL(ops::add, device_type::cuda, add);

}  // namespace troupe::kernels::cuda_backend
