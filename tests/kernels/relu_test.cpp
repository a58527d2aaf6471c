// relu_test.cpp: the CPU relu forward against max(x, 0), its backward against central
// finite differences, and both in place; the bf16 pair against the f32 pair on every value.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/check.hpp"
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

TEST_CASE("relu over bf16 is the f32 relu of every bf16 value, bit for bit, in place too") {
  // All 65536 bit patterns: NaNs, infinities, -0 and denormals included. The f32 kernel's
  // result on the widened value is a bf16 value (x or +0), so its top half is the answer.
  auto forward = kernels::lookup<kernels::ops::relu_forward>(kernels::device_type::cpu);
  auto forward16 = kernels::lookup<kernels::ops::relu_forward_bf16>(kernels::device_type::cpu);
  auto backward = kernels::lookup<kernels::ops::relu_backward>(kernels::device_type::cpu);
  auto backward16 = kernels::lookup<kernels::ops::relu_backward_bf16>(kernels::device_type::cpu);
  const std::size_t n = 65536;
  std::vector<std::uint16_t> x(n);
  std::vector<float> wide(n);
  for (std::size_t h = 0; h < n; ++h) {
    x[h] = static_cast<std::uint16_t>(h);
    wide[h] = test::widened(x[h]);
  }
  std::vector<float> y(n);
  forward(test::cpu_context(), static_cast<std::int64_t>(n), wide.data(), y.data());
  std::vector<std::uint16_t> y16(n, 0x1234), want(n);
  for (std::size_t i = 0; i < n; ++i)
    want[i] = test::top_half(y[i]);
  forward16(test::cpu_context(), static_cast<std::int64_t>(n), x.data(), y16.data());
  CHECK(y16 == want);
  auto in_place = x;
  forward16(test::cpu_context(), static_cast<std::int64_t>(n), in_place.data(), in_place.data());
  CHECK(in_place == want);

  // Backward: every pattern as the sign, against the f32 kernel on the widened values.
  std::vector<std::uint16_t> dy16(n);
  std::vector<float> dy(n);
  const auto noise = test::random_floats(n, 91);
  for (std::size_t i = 0; i < n; ++i) {
    dy16[i] = test::top_half(noise[i]);
    dy[i] = test::widened(dy16[i]);
  }
  std::vector<float> dx(n);
  backward(test::cpu_context(), static_cast<std::int64_t>(n), wide.data(), nullptr, dy.data(),
           dx.data());
  for (std::size_t i = 0; i < n; ++i)
    want[i] = test::top_half(dx[i]);
  std::vector<std::uint16_t> dx16(n, 0x1234);
  backward16(test::cpu_context(), static_cast<std::int64_t>(n), x.data(), nullptr, dy16.data(),
             dx16.data());
  CHECK(dx16 == want);
  std::fill(dx16.begin(), dx16.end(), std::uint16_t{0x1234});
  backward16(test::cpu_context(), static_cast<std::int64_t>(n), nullptr, y16.data(), dy16.data(),
             dx16.data());
  CHECK(dx16 == want);  // reading y = relu(x) instead: the same signs
  auto dy_dx = dy16;
  backward16(test::cpu_context(), static_cast<std::int64_t>(n), x.data(), nullptr, dy_dx.data(),
             dy_dx.data());
  CHECK(dy_dx == want);
  CHECK_THROWS_AS(backward16(test::cpu_context(), 4, nullptr, nullptr, dy16.data(), dx16.data()),
                  check_failure);
}
