// relu_test.cpp: the CPU relu forward against max(x, 0), its backward against central
// finite differences, and both in place.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

double relu_reference(double x) { return x > 0.0 ? x : 0.0; }

// Inputs at least 1e-3 away from the kink at 0, so that a finite-difference step of 1e-5
// never straddles it.
std::vector<float> inputs_away_from_zero(std::size_t n, std::uint32_t seed) {
  auto x = test::random_floats(n, seed, -3.0f, 3.0f);
  for (auto& v : x)
    if (std::abs(v) < 1e-3f)
      v = v < 0.0f ? -1e-3f : 1e-3f;
  return x;
}

}  // namespace

TEST_CASE("relu_forward is max(x, 0) out of place and in place, over odd lengths") {
  // max(x, 0) is exact in float.
  test::check_elementwise_forward<kernels::ops::relu_forward>(relu_reference, 1, -3.0f, 3.0f,
                                                              0.0, 0.0);
}

TEST_CASE("relu_forward keeps NaN instead of masking it to zero") {
  auto forward = kernels::lookup<kernels::ops::relu_forward>(kernels::device_type::cpu);
  std::vector<float> x{std::numeric_limits<float>::quiet_NaN(), -1.0f, 2.0f};
  std::vector<float> y(3);
  forward(test::cpu_context(), 3, x.data(), y.data());
  CHECK(std::isnan(y[0]));
  CHECK(y[1] == 0.0f);
  CHECK(y[2] == 2.0f);
}

TEST_CASE("relu_backward matches central finite differences of the double relu") {
  auto backward = kernels::lookup<kernels::ops::relu_backward>(kernels::device_type::cpu);
  for (std::size_t n : {1, 7, 1000, 4099}) {
    CAPTURE(n);
    const auto x = inputs_away_from_zero(n, 20 + n);
    const auto dy = test::random_floats(n, 30 + n);
    std::vector<float> y(n);
    for (std::size_t i = 0; i < n; ++i)
      y[i] = static_cast<float>(relu_reference(x[i]));
    const double h = 1e-5;
    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i)
      want[i] = dy[i] * (relu_reference(x[i] + h) - relu_reference(x[i] - h)) / (2 * h);
    std::vector<float> dx(n);
    // Reading x, reading y only, and in place (dx == dy) must agree.
    backward(test::cpu_context(), n, x.data(), y.data(), dy.data(), dx.data());
    // relu is linear on each side of the kink, so the difference quotient is exactly 0 or
    // 1 up to double rounding of (x + h) - (x - h): ~1e-16 / 1e-5 relative.
    TROUPE_CHECK_CLOSE(dx, want, 0.0, 1e-10);
    std::vector<float> from_y(n);
    backward(test::cpu_context(), n, nullptr, y.data(), dy.data(), from_y.data());
    CHECK(from_y == dx);
    auto in_place = dy;
    backward(test::cpu_context(), n, x.data(), y.data(), in_place.data(), in_place.data());
    CHECK(in_place == dx);
  }
}
