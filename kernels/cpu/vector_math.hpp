// vector_math.hpp: exp and tanh as straight-line float code that the compiler vectorises
// (inside TROUPE_VECTOR_CLONES loops: AVX-512 and AVX2 copies), for the CPU kernels.
//
// libm's expf and tanhf are calls a loop cannot vectorise: a stack of narrow tanh layers spent
// more of its step in tanhf than in its GEMMs, and erff/expf were a third of a transformer's
// step (bench/char_lm_vs_pytorch.py). These are Cephes' polynomials (the single-precision
// library SLEEF's and Eigen's float paths descend from); tests/kernels/vector_math_test.cpp
// holds each to its stated bound against double precision over the whole float range, NaN
// and infinities included. No branches: every case is computed and selected, so a loop of
// them vectorises, and NaN goes in, NaN comes out.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace troupe::kernels::cpu {

/// exp(x) for x <= 0, relative error below 2e-7 down to x = -87; below that 0 (where exp is
/// below 1.6e-38: a denormal or 0, negligible next to any sum it joins), so exp(-inf) = 0 and a
/// softmax's far tail is exactly 0, as libm's; exp(NaN) = NaN. x = n ln 2 + r with |r| <= ln 2 / 2, exp(r) by Cephes' polynomial, times
/// 2^n built in the exponent bits.
inline float exp_nonpositive(float x) {
  // A select, not std::fmax (a call GCC does not vectorise); NaN takes -87, so no NaN
  // reaches the integer conversion.
  const float clamped = x >= -87.0f ? x : -87.0f;
  // n = x log2(e) rounded to the nearest integer: adding and taking away 1.5 2^23 does it
  // in float arithmetic, which vectorises (|x log2 e| < 2^22 here).
  const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (clamped - n * 0.693359375f) - n * -2.12194440e-4f;  // ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = (p * r) * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x == x ? (x >= -87.0f ? y * scale : 0.0f) : x;
}

/// tanh(x), relative error below 2.4e-7 (about 2 ulp) for every float; tanh(+-inf) = +-1,
/// tanh(-0) = -0, tanh(NaN) = NaN. Below |x| = 0.625 Cephes' odd polynomial; above it
/// (1 - e) / (1 + e) with e = exp(-2 |x|) <= 1, and |x| >= 10 gives exactly +-1 (as tanhf).
inline float tanh_vectorisable(float x) {
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x * (1.0f + p * z);  // x (1 + ...), not x + ...: tanh(-0) = -0
  const float a = std::fabs(x) <= 10.0f ? std::fabs(x) : 10.0f;  // NaN: 10, selected away below
  const float e = exp_nonpositive(-2.0f * a);
  const float large = std::copysign((1.0f - e) / (1.0f + e), x);
  const float y = std::fabs(x) < 0.625f ? small : large;
  return x == x ? y : x;
}

/// out[i] = exp(scale in[i] - shift) for i < n, where every scale in[i] - shift <= 0 (a
/// softmax's, shift its row's largest): exp_nonpositive in a loop with AVX-512 and AVX2
/// copies (vector_math.cpp). out may be in.
void exp_shifted(std::int64_t n, float scale, float shift, const float* in, float* out);

}  // namespace troupe::kernels::cpu
