// gelu.cpp: the exact (erf) GELU, as torch.nn.GELU(), and its backward, on the CPU.
//
//   y   = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
//   dx  = dy * (Phi(x) + x * phi(x)),  phi(x) = exp(-x^2 / 2) / sqrt(2 * pi)
//
// Not the tanh approximation (torch.nn.GELU(approximate="tanh")). libm's erff and expf are
// calls the loops cannot vectorise, and they were a third of a transformer's step
// (bench/char_lm_vs_pytorch.py, perf: erff 21%, gelu_backward 8%). So Phi comes from
// erfc (Numerical Recipes' erfcc, relative error below 1.2e-7 at every x, so the tail
// x < 0 keeps its relative accuracy) and exp from Cephes' expf polynomial (vector_math.hpp), both
// straight-line float code that vectorises (about 17x libm's speed on 131072 values; within a fifth
// of the tests' 5e-7 bounds of the double reference). The backward needs x (y does not determine
// x). The bf16 pair (a bf16 run's activations) computes the same floats from the widened bf16
// values and rounds each result once.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/bf16_bits.hpp"
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

// The bf16 pair runs the f32 loops over blocks of 512 values widened into the stack, and
// rounds each block back: three loops that vectorise, in L1. (One loop widening, computing and
// rounding each element stayed scalar in GCC's clones: 60% of the transformer's bf16 step.)
constexpr std::int64_t bf16_block = 512;

TROUPE_VECTOR_CLONES
void gelu_widen(std::int64_t n, const std::uint16_t* __restrict x, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = widen_bits(x[i]);
}

TROUPE_VECTOR_CLONES
void gelu_round(std::int64_t n, const float* __restrict x, std::uint16_t* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = round_bits(x[i]);
}

// x and y may be the same buffer: a block is read whole before it is written.
void gelu_forward_bf16(const context&, std::int64_t n, const std::uint16_t* x, std::uint16_t* y) {
  float in[bf16_block], out[bf16_block];
  for (std::int64_t first = 0; first < n; first += bf16_block) {
    const auto m = std::min(bf16_block, n - first);
    gelu_widen(m, x + first, in);
    gelu_loop(m, in, out);
    gelu_round(m, out, y + first);
  }
}

void gelu_backward_bf16(const context&, std::int64_t n, const std::uint16_t* x,
                        const std::uint16_t*, const std::uint16_t* dy, std::uint16_t* dx) {
  TROUPE_CHECK(x != nullptr || n == 0, "gelu_backward_bf16 needs x (y does not determine it)");
  float in[bf16_block], grad[bf16_block], out[bf16_block];
  for (std::int64_t first = 0; first < n; first += bf16_block) {
    const auto m = std::min(bf16_block, n - first);
    gelu_widen(m, x + first, in);
    gelu_widen(m, dy + first, grad);
    gelu_backward_loop(m, in, grad, out);
    gelu_round(m, out, dx + first);
  }
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::gelu_forward, device_type::cpu, gelu_forward);
TROUPE_REGISTER_KERNEL(ops::gelu_backward, device_type::cpu, gelu_backward);
TROUPE_REGISTER_KERNEL(ops::gelu_forward_bf16, device_type::cpu, gelu_forward_bf16);
TROUPE_REGISTER_KERNEL(ops::gelu_backward_bf16, device_type::cpu, gelu_backward_bf16);

}  // namespace troupe::kernels::cpu
