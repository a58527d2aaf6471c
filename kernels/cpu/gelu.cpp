// gelu.cpp: the exact (erf) GELU, as torch.nn.GELU(), and its backward, on the CPU.
//
//   y   = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
//   dx  = dy * (Phi(x) + x * phi(x)),  phi(x) = exp(-x^2 / 2) / sqrt(2 * pi)
//
// Not the tanh approximation (torch.nn.GELU(approximate="tanh")). The loops call erff and
// expf per element, so they do not vectorise without -ffast-math/libmvec; GELU is still
// cheap next to the gemm that feeds it. The backward needs x (y does not determine x).
#include <cmath>

#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

constexpr float inv_sqrt2 = 0.70710678118654752440f;
constexpr float inv_sqrt_2pi = 0.39894228040143267794f;

// x and y may be the same buffer: each element is read before it is written.
void gelu_forward(const context&, std::int64_t n, const float* x, float* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    y[i] = 0.5f * xi * (1.0f + std::erf(xi * inv_sqrt2));
  }
}

void gelu_backward(const context&, std::int64_t n, const float* x, const float*,
                   const float* dy, float* dx) {
  TROUPE_CHECK(x != nullptr || n == 0, "gelu_backward needs x (y does not determine it)");
  for (std::int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float cdf = 0.5f * (1.0f + std::erf(xi * inv_sqrt2));
    const float pdf = inv_sqrt_2pi * std::exp(-0.5f * xi * xi);
    dx[i] = dy[i] * (cdf + xi * pdf);
  }
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::gelu_forward, device_type::cpu, gelu_forward);
TROUPE_REGISTER_KERNEL(ops::gelu_backward, device_type::cpu, gelu_backward);

}  // namespace troupe::kernels::cpu
