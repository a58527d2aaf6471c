// bf16_convert.cu: the CUDA backend of ops::to_bf16, ops::from_bf16 and ops::add_to_bf16.
//
// The same bit arithmetic as the CPU's (kernels/cpu/bf16_convert.cpp): rounded to nearest,
// ties to even, denormals kept, NaN kept quiet; so a weight rounds to the same bfloat16 on
// either device.
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "troupe/ops.hpp"

namespace troupe::kernels::cuda_backend {
namespace {

// ---- kernels ----

__device__ std::uint16_t round_bits(float x) {
  const std::uint32_t bits = __float_as_uint(x);
  const std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<std::uint16_t>(nan ? ((bits >> 16) | 0x0040u) : rounded);
}

__global__ void to_bf16_kernel(std::int64_t n, const float* x, std::uint16_t* y) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    y[i] = round_bits(x[i]);
}

__global__ void from_bf16_kernel(std::int64_t n, const std::uint16_t* x, float* y) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    y[i] = __uint_as_float(static_cast<std::uint32_t>(x[i]) << 16);
}

__global__ void add_to_bf16_kernel(std::int64_t n, const std::uint16_t* x, float* y,
                                   std::uint16_t* z, bool keep) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    // __fadd_rn: no contraction into anything else, the same float sum as the CPU's.
    const std::uint16_t h =
        round_bits(__fadd_rn(__uint_as_float(static_cast<std::uint32_t>(x[i]) << 16), y[i]));
    z[i] = h;
    if (keep)
      y[i] = __uint_as_float(static_cast<std::uint32_t>(h) << 16);
  }
}

}  // namespace

// ---- launchers ----

void to_bf16(const context& ctx, std::int64_t n, const float* x, std::uint16_t* y) {
  TROUPE_CHECK(n >= 0, "to_bf16 size must not be negative: n=" << n);
  if (n == 0)
    return;
  to_bf16_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, x, y);
  TROUPE_CHECK_LAUNCH();
}

void from_bf16(const context& ctx, std::int64_t n, const std::uint16_t* x, float* y) {
  TROUPE_CHECK(n >= 0, "from_bf16 size must not be negative: n=" << n);
  if (n == 0)
    return;
  from_bf16_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, x, y);
  TROUPE_CHECK_LAUNCH();
}

void add_to_bf16(const context& ctx, std::int64_t n, const std::uint16_t* x, float* y,
                 std::uint16_t* z, bool keep) {
  TROUPE_CHECK(n >= 0, "add_to_bf16 size must not be negative: n=" << n);
  if (n == 0)
    return;
  add_to_bf16_kernel<<<grid_stride_blocks(n), threads_per_block, 0, stream_of(ctx)>>>(n, x, y, z,
                                                                                      keep);
  TROUPE_CHECK_LAUNCH();
}

TROUPE_REGISTER_KERNEL(ops::to_bf16, device_type::cuda, to_bf16);
TROUPE_REGISTER_KERNEL(ops::add_to_bf16, device_type::cuda, add_to_bf16);
TROUPE_REGISTER_KERNEL(ops::from_bf16, device_type::cuda, from_bf16);

}  // namespace troupe::kernels::cuda_backend
