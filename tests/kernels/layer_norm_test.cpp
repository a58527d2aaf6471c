// layer_norm_test.cpp: the CPU layer_norm forward and backward against a naive
// double-precision reference (the formulas of include/troupe/ops.hpp evaluated in double).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

TEST_CASE("layer_norm normalises each row and its backward matches the reference") {
  auto forward = kernels::lookup<kernels::ops::layer_norm_forward>(kernels::device_type::cpu);
  auto backward = kernels::lookup<kernels::ops::layer_norm_backward>(kernels::device_type::cpu);
  const int shapes[][2] = {{1, 1}, {3, 5}, {7, 64}, {2, 257}};
  std::uint32_t seed = 120;
  for (const auto& shape : shapes) {
    const int rows = shape[0], cols = shape[1];
    CAPTURE(rows);
    CAPTURE(cols);
    const float eps = 1e-5f;
    auto x = test::random_floats(static_cast<std::size_t>(rows) * cols, ++seed);
    for (auto& v : x)
      v = 3.0f * v + 2.0f;  // a mean far from 0: the variance must not cancel
    const auto gamma = test::random_floats(cols, ++seed);
    const auto beta = test::random_floats(cols, ++seed);
    const auto dy = test::random_floats(x.size(), ++seed);
    std::vector<double> want_y(x.size()), want_dx(x.size()), want_dgamma(cols), want_dbeta(cols);
    std::vector<double> want_mean(rows), want_rstd(rows);
    for (int r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int c = 0; c < cols; ++c)
        mean += x[r * cols + c];
      mean /= cols;
      for (int c = 0; c < cols; ++c)
        var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
      const double rstd = 1.0 / std::sqrt(var / cols + eps);
      want_mean[r] = mean;
      want_rstd[r] = rstd;
      double mean_g = 0, mean_g_xhat = 0;
      for (int c = 0; c < cols; ++c) {
        const double xhat = (x[r * cols + c] - mean) * rstd;
        want_y[r * cols + c] = xhat * gamma[c] + beta[c];
        const double g = static_cast<double>(dy[r * cols + c]) * gamma[c];
        mean_g += g / cols;
        mean_g_xhat += g * xhat / cols;
        want_dgamma[c] += static_cast<double>(dy[r * cols + c]) * xhat;
        want_dbeta[c] += dy[r * cols + c];
      }
      for (int c = 0; c < cols; ++c) {
        const double xhat = (x[r * cols + c] - mean) * rstd;
        want_dx[r * cols + c] =
            rstd * (static_cast<double>(dy[r * cols + c]) * gamma[c] - mean_g - xhat * mean_g_xhat);
      }
    }
    std::vector<float> y(x.size()), mean(rows), rstd(rows);
    forward(test::cpu_context(), rows, cols, x.data(), gamma.data(), beta.data(), eps, y.data(),
            mean.data(), rstd.data());
    // Float sums of `cols` terms of size <= 5 and a division by sqrt(var ~ 3): relative
    // error ~ cols * 2^-24 on the statistics; the outputs are O(1), so allow cols * 1e-6.
    const double bound = 1e-5 + cols * 1e-6;
    TROUPE_CHECK_CLOSE(mean, want_mean, bound, 0.0);
    TROUPE_CHECK_CLOSE(rstd, want_rstd, 0.0, bound);
    TROUPE_CHECK_CLOSE(y, want_y, bound, 0.0);

    std::vector<float> dx(x.size(), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> dgamma(cols, std::numeric_limits<float>::quiet_NaN()), dbeta(cols, 5.0f);
    backward(test::cpu_context(), rows, cols, x.data(), gamma.data(), mean.data(), rstd.data(),
             dy.data(), dx.data(), 0.0f, dgamma.data(), dbeta.data());
    TROUPE_CHECK_CLOSE(dx, want_dx, bound, 0.0);
    TROUPE_CHECK_CLOSE(dgamma, want_dgamma, rows * bound, 0.0);
    TROUPE_CHECK_CLOSE(dbeta, want_dbeta, rows * bound, 0.0);
    // accumulate = 1 adds a second micro-batch's sums; dx may be skipped (null).
    backward(test::cpu_context(), rows, cols, x.data(), gamma.data(), mean.data(), rstd.data(),
             dy.data(), nullptr, 1.0f, dgamma.data(), dbeta.data());
    for (auto& v : want_dbeta)
      v *= 2;
    TROUPE_CHECK_CLOSE(dbeta, want_dbeta, 2 * rows * bound, 0.0);
  }
}
