// bias_add_test.cpp: the CPU bias_add against a naive double-precision broadcast add.
#include <doctest/doctest.h>

#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

TEST_CASE("bias_add adds the bias to every row, for one row and for many") {
  auto bias_add = kernels::lookup<kernels::ops::bias_add>(kernels::device_type::cpu);
  const int shapes[][2] = {{1, 1}, {1, 10}, {7, 3}, {128, 256}, {33, 17}};
  std::uint32_t seed = 1;
  for (const auto& shape : shapes) {
    const int rows = shape[0], cols = shape[1];
    CAPTURE(rows);
    CAPTURE(cols);
    const auto bias = test::random_floats(cols, ++seed);
    auto y = test::random_floats(static_cast<std::size_t>(rows) * cols, ++seed);
    std::vector<double> want(y.size());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        want[r * cols + c] = static_cast<double>(y[r * cols + c]) + bias[c];
    bias_add(test::cpu_context(), rows, cols, bias.data(), y.data());
    // One float addition: the result is the double sum rounded once, within half an ulp
    // (2^-24 relative); 1.2e-7 is one float epsilon.
    TROUPE_CHECK_CLOSE(y, want, 0.0, 1.2e-7);
  }
}
