// axpy_test.cpp: the CPU axpy against y + alpha * x in double, and add against x + y.
#include <doctest/doctest.h>

#include <limits>
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

TEST_CASE("add writes x + y into z, z apart from or the same as x or y") {
  auto add = kernels::lookup<kernels::ops::add>(kernels::device_type::cpu);
  for (std::size_t n : {0, 1, 7, 1000, 4099}) {
    CAPTURE(n);
    const auto x = test::random_floats(n, 1800 + n), y = test::random_floats(n, 1900 + n);
    std::vector<float> want(n);
    for (std::size_t i = 0; i < n; ++i)
      want[i] = x[i] + y[i];  // one correctly rounded addition: what the kernel must give
    std::vector<float> z(n, std::numeric_limits<float>::quiet_NaN());
    add(test::cpu_context(), std::int64_t(n), x.data(), y.data(), z.data());
    CHECK(test::same_bits(z, want));
    auto into_x = x, into_y = y;
    add(test::cpu_context(), std::int64_t(n), into_x.data(), y.data(), into_x.data());
    add(test::cpu_context(), std::int64_t(n), x.data(), into_y.data(), into_y.data());
    CHECK(test::same_bits(into_x, want));
    CHECK(test::same_bits(into_y, want));
  }
}
