// bf16_bits.hpp: one float rounded to a bfloat16 bit pattern and one widened back, inline,
// for the CPU kernels' loops over bf16 (bf16_convert.cpp, relu.cpp, max_pool2d.cpp): plain bit
// arithmetic that GCC vectorises in TROUPE_VECTOR_CLONES loops. Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <cstring>

namespace troupe::kernels::cpu {

// Adds half a unit of bf16's last place, less one unless the kept last bit is odd (ties to
// even), and keeps the top half. A carry out of the mantissa correctly steps the exponent,
// up to infinity beyond bf16's largest finite value; infinity itself stays (its low half is
// 0). NaN is kept as a quiet NaN of the same sign rather than rounded (which could carry
// it into infinity).
inline std::uint16_t round_bits(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<std::uint16_t>(nan ? ((bits >> 16) | 0x0040u) : rounded);
}

inline float widen_bits(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

}  // namespace troupe::kernels::cpu
