// tanh_test.cpp: the CPU tanh against double tanh, and its backward (from y and from x)
// against central finite differences of the double tanh.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

TEST_CASE("tanh_forward matches double tanh, in place too") {
  // glibc's tanhf is accurate to ~1-2 ulp (2.4e-7 relative at worst); the absolute
  // term only matters for an input that is exactly 0.
  test::check_elementwise_forward<kernels::ops::tanh_forward>(
      [](float x) { return std::tanh(static_cast<double>(x)); }, 70, -6.0f, 6.0f, 1e-12, 2.4e-7);
}

TEST_CASE("tanh_backward matches central finite differences, reading y or recomputing from x") {
  auto forward = kernels::lookup<kernels::ops::tanh_forward>(kernels::device_type::cpu);
  auto backward = kernels::lookup<kernels::ops::tanh_backward>(kernels::device_type::cpu);
  for (std::size_t n : {1, 7, 1000, 4099}) {
    CAPTURE(n);
    const auto x = test::random_floats(n, 80 + n, -4.0f, 4.0f);
    const auto dy = test::random_floats(n, 90 + n);
    std::vector<float> y(n);
    forward(test::cpu_context(), n, x.data(), y.data());
    // h = 1e-4: truncation h^2/6 * |tanh'''| (<= 2) < 4e-9, rounding ~1e-12.
    const double h = 1e-4;
    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double xi = x[i];
      want[i] = dy[i] * (std::tanh(xi + h) - std::tanh(xi - h)) / (2 * h);
    }
    // 1 - y^2 from a float y: y carries ~1 ulp of error, so y^2 ~2 ulps of 1 (2.4e-7)
    // absolute, which is what 1 - y^2 inherits (badly, relatively, where y ~ +-1 and the
    // derivative is small: hence an absolute tolerance). |dy| < 1.
    std::vector<float> dx(n);
    backward(test::cpu_context(), n, x.data(), y.data(), dy.data(), dx.data());
    TROUPE_CHECK_CLOSE(dx, want, 4e-7, 4e-7);
    std::vector<float> from_x(n);
    backward(test::cpu_context(), n, x.data(), nullptr, dy.data(), from_x.data());
    TROUPE_CHECK_CLOSE(from_x, want, 4e-7, 4e-7);
    auto in_place = dy;
    backward(test::cpu_context(), n, x.data(), y.data(), in_place.data(), in_place.data());
    CHECK(in_place == dx);
  }
}
