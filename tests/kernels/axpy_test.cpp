// axpy_test.cpp: the CPU axpy against y + alpha * x in double.
#include <doctest/doctest.h>

#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

TEST_CASE("axpy adds alpha * x to y over odd lengths") {
  auto axpy = kernels::lookup<kernels::ops::axpy>(kernels::device_type::cpu);
  for (std::size_t n : {1, 7, 1000, 4099}) {
    for (float alpha : {1.0f, -0.3f}) {
      CAPTURE(n);
      CAPTURE(alpha);
      const auto x = test::random_floats(n, 800 + n);
      auto y = test::random_floats(n, 900 + n);
      std::vector<double> want(n);
      for (std::size_t i = 0; i < n; ++i)
        want[i] = static_cast<double>(y[i]) + static_cast<double>(alpha) * x[i];
      axpy(test::cpu_context(), n, alpha, x.data(), y.data());
      // Two roundings (product, sum) of values of size <= 1.3: 2 * 0.5 ulp(2) = 2.4e-7.
      TROUPE_CHECK_CLOSE(y, want, 2.4e-7, 0.0);
    }
  }
}
