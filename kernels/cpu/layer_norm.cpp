// layer_norm.cpp: layer normalisation over rows, forward and backward, on the CPU.
//
// Mean and variance are two passes over a row in float, the variance from deviations (no
// E[x^2] - E[x]^2 cancellation); rows are a few hundred values, so float sums stay far
// inside the tests' bounds. dgamma and dbeta add row after row, one fixed order.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/vectorize.hpp"
#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

TROUPE_VECTOR_CLONES
void normalise_row(int cols, const float* __restrict x, float mean, float rstd,
                   const float* __restrict gamma, const float* __restrict beta,
                   float* __restrict y) {
  for (int c = 0; c < cols; ++c)
    y[c] = (x[c] - mean) * rstd * gamma[c] + beta[c];
}

void layer_norm_forward(const context&, int rows, int cols, const float* x, const float* gamma,
                        const float* beta, float eps, float* y, float* mean, float* rstd) {
  TROUPE_CHECK(rows >= 0 && cols > 0,
               "layer_norm_forward sizes: rows=" << rows << " cols=" << cols);
  for (int r = 0; r < rows; ++r) {
    const float* row = x + static_cast<std::int64_t>(r) * cols;
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c)
      sum += row[c];
    const float m = sum / static_cast<float>(cols);
    float squares = 0.0f;
    for (int c = 0; c < cols; ++c)
      squares += (row[c] - m) * (row[c] - m);
    const float s = 1.0f / std::sqrt(squares / static_cast<float>(cols) + eps);
    mean[r] = m;
    rstd[r] = s;
    normalise_row(cols, row, m, s, gamma, beta, y + static_cast<std::int64_t>(r) * cols);
  }
}

void layer_norm_backward(const context&, int rows, int cols, const float* x, const float* gamma,
                         const float* mean, const float* rstd, const float* dy, float* dx,
                         float accumulate, float* dgamma, float* dbeta) {
  TROUPE_CHECK(rows >= 0 && cols > 0,
               "layer_norm_backward sizes: rows=" << rows << " cols=" << cols);
  TROUPE_CHECK(accumulate == 0.0f || accumulate == 1.0f,
               "layer_norm_backward accumulate must be 0 or 1, got " << accumulate);
  if (accumulate == 0.0f)
    for (int c = 0; c < cols; ++c) {
      if (dgamma != nullptr)
        dgamma[c] = 0.0f;
      if (dbeta != nullptr)
        dbeta[c] = 0.0f;
    }
  for (int r = 0; r < rows; ++r) {
    const std::int64_t at = static_cast<std::int64_t>(r) * cols;
    const float* row = x + at;
    const float* grad = dy + at;
    const float m = mean[r], s = rstd[r];
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
    for (int c = 0; c < cols; ++c) {
      const float xhat = (row[c] - m) * s;
      const float g = grad[c] * gamma[c];
      sum_g += g;
      sum_g_xhat += g * xhat;
      if (dgamma != nullptr)
        dgamma[c] += grad[c] * xhat;
      if (dbeta != nullptr)
        dbeta[c] += grad[c];
    }
    if (dx == nullptr)
      continue;
    const float mean_g = sum_g / static_cast<float>(cols);
    const float mean_g_xhat = sum_g_xhat / static_cast<float>(cols);
    for (int c = 0; c < cols; ++c) {
      const float xhat = (row[c] - m) * s;
      dx[at + c] = s * (grad[c] * gamma[c] - mean_g - xhat * mean_g_xhat);
    }
  }
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::layer_norm_forward, device_type::cpu, layer_norm_forward);
TROUPE_REGISTER_KERNEL(ops::layer_norm_backward, device_type::cpu, layer_norm_backward);

}  // namespace troupe::kernels::cpu
