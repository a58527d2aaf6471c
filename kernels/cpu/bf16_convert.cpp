// bf16_convert.cpp: float32 to bfloat16 (rounded to nearest, ties to even) and back, on the
// CPU ([run] precision = "bf16": a layer's weights once per version, its inputs per pass),
// and a bfloat16 added to a float and rounded back in one pass (the ring in bf16).
//
// Bit arithmetic the compiler vectorises (AVX-512 and AVX2 clones), not AVX512-BF16's
// vcvtneps2bf16: that instruction flushes denormal inputs to zero, and this rounds every
// float as PyTorch's .to(torch.bfloat16) does, denormals included, so weights exported from
// either agree bit for bit. Measured on one core of the Intel Xeon VM: a 784 x 256 weight
// (200704 floats) rounds in 36 us and widens in 17 us, next to that layer's GEMMs of
// hundreds of microseconds.
#include "kernels/cpu/bf16_bits.hpp"
#include "kernels/cpu/vectorize.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

TROUPE_VECTOR_CLONES
void round_all(std::int64_t n, const float* __restrict x, std::uint16_t* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = round_bits(x[i]);
}

// Two loops rather than a test of `keep` in one, so that each vectorises.
TROUPE_VECTOR_CLONES
void add_round_all(std::int64_t n, const std::uint16_t* __restrict x, float* __restrict y,
                   std::uint16_t* __restrict z, bool keep) {
  if (keep) {
    for (std::int64_t i = 0; i < n; ++i) {
      z[i] = round_bits(widen_bits(x[i]) + y[i]);
      y[i] = widen_bits(z[i]);
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      z[i] = round_bits(widen_bits(x[i]) + y[i]);
  }
}

TROUPE_VECTOR_CLONES
void widen_all(std::int64_t n, const std::uint16_t* __restrict x, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = widen_bits(x[i]);
}

void to_bf16(const context&, std::int64_t n, const float* x, std::uint16_t* y) {
  round_all(n, x, y);
}

void from_bf16(const context&, std::int64_t n, const std::uint16_t* x, float* y) {
  widen_all(n, x, y);
}

void add_to_bf16(const context&, std::int64_t n, const std::uint16_t* x, float* y, std::uint16_t* z,
                 bool keep) {
  add_round_all(n, x, y, z, keep);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::to_bf16, device_type::cpu, to_bf16);
TROUPE_REGISTER_KERNEL(ops::from_bf16, device_type::cpu, from_bf16);
TROUPE_REGISTER_KERNEL(ops::add_to_bf16, device_type::cpu, add_to_bf16);

}  // namespace troupe::kernels::cpu
