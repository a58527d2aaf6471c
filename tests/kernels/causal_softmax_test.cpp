// causal_softmax_test.cpp: the CPU causal softmax forward and backward against a naive
// double-precision reference, with the future masked and huge scores (no overflow).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

TEST_CASE("causal_softmax sees positions up to its own, and its backward is the Jacobian's") {
  auto forward = kernels::lookup<kernels::ops::causal_softmax_forward>(kernels::device_type::cpu);
  auto backward =
      kernels::lookup<kernels::ops::causal_softmax_backward>(kernels::device_type::cpu);
  const int shapes[][2] = {{1, 1}, {4, 4}, {12, 6}, {40, 20}};  // rows = sequences x cols
  std::uint32_t seed = 140;
  for (const auto& shape : shapes)
    for (float scale : {1.0f, 0.35f, 500.0f}) {  // 500: scores near 500, exp would overflow
      const int rows = shape[0], cols = shape[1];
      CAPTURE(rows);
      CAPTURE(cols);
      CAPTURE(scale);
      const auto x = test::random_floats(static_cast<std::size_t>(rows) * cols, ++seed);
      const auto dy = test::random_floats(x.size(), ++seed);
      std::vector<double> want_y(x.size(), 0.0), want_dx(x.size(), 0.0);
      for (int r = 0; r < rows; ++r) {
        const int visible = r % cols + 1;
        double most = -1e300, sum = 0, dot = 0;
        for (int j = 0; j < visible; ++j)
          most = std::max(most, static_cast<double>(scale) * x[r * cols + j]);
        for (int j = 0; j < visible; ++j)
          sum += std::exp(static_cast<double>(scale) * x[r * cols + j] - most);
        for (int j = 0; j < visible; ++j) {
          want_y[r * cols + j] = std::exp(static_cast<double>(scale) * x[r * cols + j] - most) / sum;
          dot += want_y[r * cols + j] * dy[r * cols + j];
        }
        for (int j = 0; j < visible; ++j)
          want_dx[r * cols + j] = scale * want_y[r * cols + j] * (dy[r * cols + j] - dot);
      }
      std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
      forward(test::cpu_context(), rows, cols, scale, x.data(), y.data());
      // exp of an argument rounded to float: relative error ~ |arg| 2^-24 (arg up to 1000 at
      // scale 500), then a sum of <= 20 terms.
      const double relative = (1.0 + 2.0 * scale) * 1.2e-7 + cols * 1.2e-7;
      TROUPE_CHECK_CLOSE(y, want_y, 1e-7, relative);
      // The masked tail is exactly zero.
      for (int r = 0; r < rows; ++r)
        for (int j = r % cols + 1; j < cols; ++j)
          CHECK(y[r * cols + j] == 0.0f);
      std::vector<float> dx(x.size(), std::numeric_limits<float>::quiet_NaN());
      backward(test::cpu_context(), rows, cols, scale, y.data(), dy.data(), dx.data());
      // From the float y: its relative error, times scale, plus the dot's rounding.
      TROUPE_CHECK_CLOSE(dx, want_dx, scale * (relative + cols * 1.2e-7), relative);
    }
}

TEST_CASE(
    "causal_softmax_forward turns a row with a NaN it sees into NaN and ignores the masked tail") {
  auto forward = kernels::lookup<kernels::ops::causal_softmax_forward>(kernels::device_type::cpu);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int cols = 4, rows = 4;  // row r sees positions 0..r
  for (int at = 0; at < cols; ++at) {
    CAPTURE(at);
    std::vector<float> x(rows * cols, 0.5f);
    for (int r = 0; r < rows; ++r)
      x[static_cast<std::size_t>(r * cols + at)] = nan;  // position `at` in every row
    std::vector<float> y(x.size(), -1.0f);
    forward(test::cpu_context(), rows, cols, 1.0f, x.data(), y.data());
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j) {
        const float got = y[static_cast<std::size_t>(r * cols + j)];
        if (j > r)
          CHECK(got == 0.0f);  // masked
        else if (at <= r)
          CHECK(std::isnan(got));  // the row sees the NaN
        else
          CHECK(got == doctest::Approx(1.0 / (r + 1)));  // it does not: uniform
      }
  }
}
