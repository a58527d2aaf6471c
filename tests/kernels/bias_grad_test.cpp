// bias_grad_test.cpp: the CPU bias_grad against a naive double-precision column sum, with
// beta = 0 (overwrite) and beta = 1 (accumulate over micro-batches).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

TEST_CASE("bias_grad sums dy over rows, overwriting with beta = 0 and accumulating with 1") {
  auto bias_grad = kernels::lookup<kernels::ops::bias_grad>(kernels::device_type::cpu);
  const int shapes[][2] = {{1, 1}, {1, 10}, {7, 3}, {256, 128}, {33, 17}};
  std::uint32_t seed = 10;
  for (const auto& shape : shapes) {
    for (float beta : {0.0f, 1.0f}) {
      const int rows = shape[0], cols = shape[1];
      CAPTURE(rows);
      CAPTURE(cols);
      CAPTURE(beta);
      const auto dy = test::random_floats(static_cast<std::size_t>(rows) * cols, ++seed);
      auto db = test::random_floats(cols, ++seed);
      std::vector<double> want(cols);
      for (int c = 0; c < cols; ++c) {
        double sum = beta * static_cast<double>(db[c]);
        for (int r = 0; r < rows; ++r)
          sum += dy[r * cols + c];
        want[c] = sum;
      }
      bias_grad(test::cpu_context(), rows, cols, dy.data(), beta, db.data());
      // rows + 1 float additions of terms in [-1, 1): the sequential-sum bound is
      // (rows + 1) * 2^-24 * sum|terms| <= (rows + 1)^2 * 6e-8 absolute; for 256 rows that
      // is 4e-3, while the typical error is ~sqrt(rows) ulps. We allow the rigorous bound.
      const double bound = (rows + 1.0) * (rows + 1.0) * 6e-8;
      TROUPE_CHECK_CLOSE(db, want, bound, 0.0);
    }
  }
}

TEST_CASE("bias_grad with beta = 0 ignores NaN already in db") {
  auto bias_grad = kernels::lookup<kernels::ops::bias_grad>(kernels::device_type::cpu);
  const std::vector<float> dy{1, 2, 3, 4, 5, 6};  // (2, 3)
  std::vector<float> db(3, std::numeric_limits<float>::quiet_NaN());
  bias_grad(test::cpu_context(), 2, 3, dy.data(), 0.0f, db.data());
  CHECK(db == std::vector<float>{5, 7, 9});
  bias_grad(test::cpu_context(), 2, 3, dy.data(), 1.0f, db.data());
  CHECK(db == std::vector<float>{10, 14, 18});
}
