// bf16_convert.cpp: float32 to bfloat16 (rounded to nearest, ties to even) and back, on the
// CPU ([run] precision = "bf16": a layer's weights once per version, its inputs per pass).
//
// Bit arithmetic the compiler vectorises (AVX-512 and AVX2 clones), not AVX512-BF16's
// vcvtneps2bf16: that instruction flushes denormal inputs to zero, and this rounds every
// float as PyTorch's .to(torch.bfloat16) does, denormals included, so weights exported from
// either agree bit for bit. Measured on one core of the Intel Xeon VM: a 784 x 256 weight
// (200704 floats) rounds in 36 us and widens in 17 us, next to that layer's GEMMs of
// hundreds of microseconds.
#include <cstring>

#include "kernels/cpu/vectorize.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

// Adds half a unit of bf16's last place, less one unless the kept last bit is odd (ties to
// even), and keeps the top half. A carry out of the mantissa correctly steps the exponent,
// up to infinity beyond bf16's largest finite value; infinity itself stays (its low half is
// 0). NaN is kept as a quiet NaN of the same sign rather than rounded (which could carry
// it into infinity).
TROUPE_VECTOR_CLONES
void round_all(std::int64_t n, const float* __restrict x, std::uint16_t* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof bits);
    const std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
    y[i] = static_cast<std::uint16_t>(nan ? ((bits >> 16) | 0x0040u) : rounded);
  }
}

TROUPE_VECTOR_CLONES
void widen_all(std::int64_t n, const std::uint16_t* __restrict x, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t bits = static_cast<std::uint32_t>(x[i]) << 16;
    std::memcpy(&y[i], &bits, sizeof bits);
  }
}

void to_bf16(const context&, std::int64_t n, const float* x, std::uint16_t* y) {
  round_all(n, x, y);
}

void from_bf16(const context&, std::int64_t n, const std::uint16_t* x, float* y) {
  widen_all(n, x, y);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::to_bf16, device_type::cpu, to_bf16);
TROUPE_REGISTER_KERNEL(ops::from_bf16, device_type::cpu, from_bf16);

}  // namespace troupe::kernels::cpu
