// regression_loss_test.cpp: the CPU regression losses (ops::mse_loss, ops::l1_loss,
// ops::huber_loss) against a double-precision reference: the loss, the element count, the
// sums of d^2 and |d| behind RMSE and MAE, and the gradient, also against central finite
// differences of the double loss; in place and without a gradient. PyTorch's values on the
// same inputs: tests/actors/losses/loss_reference_test.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/error.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

/// One regression loss: its kernel and its per-element loss in double.
struct regression_case {
  std::string name;
  kernels::ops::mse_loss::function kernel;
  std::function<double(double d, double delta)> loss;
};

std::vector<regression_case> regression_cases() {
  using kernels::device_type;
  return {
      {"mse", kernels::lookup<kernels::ops::mse_loss>(device_type::cpu),
       [](double d, double) { return d * d; }},
      {"l1", kernels::lookup<kernels::ops::l1_loss>(device_type::cpu),
       [](double d, double) { return std::abs(d); }},
      {"huber", kernels::lookup<kernels::ops::huber_loss>(device_type::cpu),
       [](double d, double delta) {
         return std::abs(d) < delta ? 0.5 * d * d : delta * (std::abs(d) - 0.5 * delta);
       }},
  };
}

template <class X>
double reference_loss(const regression_case& c, const X& x, const std::vector<float>& y,
                      double delta) {
  double total = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    total += c.loss(static_cast<double>(x[i]) - y[i], delta);
  return total;
}

}  // namespace

TEST_CASE("the regression losses match a double-precision reference and its finite "
          "differences") {
  const double delta = 0.7;  // |d| up to 4: both sides of Huber's delta
  std::uint32_t seed = 900;
  for (const auto& c : regression_cases()) {
    for (const std::int64_t n : {1, 7, 1000}) {
      CAPTURE(c.name);
      CAPTURE(n);
      const auto x = test::random_floats(static_cast<std::size_t>(n), ++seed, -2.0f, 2.0f);
      const auto y = test::random_floats(static_cast<std::size_t>(n), ++seed, -2.0f, 2.0f);
      const float grad_scale = 0.25f;
      float sums[4] = {-1, -1, -1, -1};
      std::vector<float> dx(x.size(), -9.0f);
      c.kernel(test::cpu_context(), n, x.data(), y.data(), static_cast<float>(delta), grad_scale,
               sums, dx.data());

      double squares = 0, absolutes = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(x[static_cast<std::size_t>(i)]) - y[i];
        squares += d * d;
        absolutes += std::abs(d);
      }
      // Sums in double of exact float differences, rounded once to float: 2^-24 relative.
      const double want = reference_loss(c, x, y, delta);
      CHECK(std::abs(sums[0] - want) <= 1.2e-7 * std::abs(want));
      CHECK(sums[1] == static_cast<float>(n));
      CHECK(std::abs(sums[2] - squares) <= 1.2e-7 * squares);
      CHECK(std::abs(sums[3] - absolutes) <= 1.2e-7 * absolutes);

      // Central differences of the double loss, h = 1e-3. An element within h of a kink
      // (d = 0 for l1, |d| = delta for Huber) has no derivative a difference can show: it
      // is compared with the one-sided rule instead (the kernel's own, taken as given).
      const double h = 1e-3;
      std::vector<double> perturbed(x.begin(), x.end());
      std::vector<double> expected(x.size());
      std::int64_t near_kinks = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double d = perturbed[i] - y[i];
        if (std::abs(d) <= h || std::abs(std::abs(d) - delta) <= h) {
          expected[i] = dx[i];
          ++near_kinks;
          continue;
        }
        perturbed[i] = x[i] + h;
        const double up = reference_loss(c, perturbed, y, delta);
        perturbed[i] = x[i] - h;
        const double down = reference_loss(c, perturbed, y, delta);
        perturbed[i] = x[i];
        expected[i] = grad_scale * (up - down) / (2 * h);
      }
      // Away from kinks each loss is a polynomial of degree <= 2 in x_i: central
      // differences are exact up to rounding (eps_double * |loss| / h ~ 1e-10 here); the
      // kernel rounds grad_scale * derivative once to float: 2^-24 relative of <= 4 * 0.25.
      TROUPE_CHECK_CLOSE(dx, expected, 1e-7, 1e-6);
      CHECK(near_kinks <= n / 100);  // nearly every element is checked

      float no_gradient[4] = {};
      c.kernel(test::cpu_context(), n, x.data(), y.data(), static_cast<float>(delta),
               grad_scale, no_gradient, nullptr);
      CHECK(no_gradient[0] == sums[0]);
      auto in_place = x;  // the gradient may overwrite the predictions
      c.kernel(test::cpu_context(), n, in_place.data(), y.data(), static_cast<float>(delta),
               grad_scale, no_gradient, in_place.data());
      CHECK(in_place == dx);
    }
  }
}

TEST_CASE("l1's gradient is 0 where the prediction equals the target, as torch.sign") {
  auto l1 = kernels::lookup<kernels::ops::l1_loss>(kernels::device_type::cpu);
  const std::vector<float> x{1.0f, 2.0f, -3.0f};
  const std::vector<float> y{1.0f, 1.0f, 0.0f};
  float sums[4];
  std::vector<float> dx(3);
  l1(test::cpu_context(), 3, x.data(), y.data(), 0.0f, 1.0f, sums, dx.data());
  CHECK(dx == std::vector<float>{0.0f, 1.0f, -1.0f});
  CHECK(sums[0] == 4.0f);
}

TEST_CASE("huber_loss refuses a delta that is not positive") {
  auto huber = kernels::lookup<kernels::ops::huber_loss>(kernels::device_type::cpu);
  const std::vector<float> x{1.0f}, y{0.0f};
  float sums[4];
  CHECK_THROWS_AS(huber(test::cpu_context(), 1, x.data(), y.data(), 0.0f, 1.0f, sums, nullptr),
                  check_failure);
}
