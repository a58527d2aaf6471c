// gelu.cpp: the exact (erf) GELU, as torch.nn.GELU(), and its backward, on the CPU.
//
//   y   = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
//   dx  = dy * (Phi(x) + x * phi(x)),  phi(x) = exp(-x^2 / 2) / sqrt(2 * pi)
//
// Not the tanh approximation (torch.nn.GELU(approximate="tanh")). libm's erff and expf are
// calls the loops cannot vectorise, and they were a third of a transformer's step
// (bench/char_lm_vs_pytorch.py, perf: erff 21%, gelu_backward 8%). So Phi comes from
// erfc (Numerical Recipes' erfcc, relative error below 1.2e-7 at every x, so the tail
// x < 0 keeps its relative accuracy) and exp from Cephes' expf polynomial (vector_math.hpp), both straight-line
// float code that vectorises (about 17x libm's speed on 131072 values; within a fifth of
// the tests' 5e-7 bounds of the double reference). The backward needs x (y does not
// determine x).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/vector_math.hpp"
#include "kernels/cpu/vectorize.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

constexpr float inv_sqrt2 = 0.70710678118654752440f;
constexpr float inv_sqrt_2pi = 0.39894228040143267794f;

// Phi(x) = erfc(-x / sqrt 2) / 2, with erfc(z) for z = |x| / sqrt 2 >= 0 and
// erfc(-z) = 2 - erfc(z) as a sign: Phi = 1/2 + sign(x) (1/2 - erfc(z) / 2).
inline float normal_cdf(float x) {
  const float z = std::fabs(x) * inv_sqrt2;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float erfc_z = t * exp_nonpositive(p - z * z);
  return 0.5f + std::copysign(0.5f - 0.5f * erfc_z, x);
}

// x and y may be the same buffer: each element is read before it is written.
TROUPE_VECTOR_CLONES
void gelu_loop(std::int64_t n, const float* x, float* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    y[i] = xi * normal_cdf(xi);
  }
}

TROUPE_VECTOR_CLONES
void gelu_backward_loop(std::int64_t n, const float* __restrict x, const float* __restrict dy,
                        float* __restrict dx) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float pdf = inv_sqrt_2pi * exp_nonpositive(-0.5f * xi * xi);
    dx[i] = dy[i] * (normal_cdf(xi) + xi * pdf);
  }
}

void gelu_forward(const context&, std::int64_t n, const float* x, float* y) {
  gelu_loop(n, x, y);
}

void gelu_backward(const context&, std::int64_t n, const float* x, const float*,
                   const float* dy, float* dx) {
  TROUPE_CHECK(x != nullptr || n == 0, "gelu_backward needs x (y does not determine it)");
  gelu_backward_loop(n, x, dy, dx);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::gelu_forward, device_type::cpu, gelu_forward);
TROUPE_REGISTER_KERNEL(ops::gelu_backward, device_type::cpu, gelu_backward);

}  // namespace troupe::kernels::cpu
