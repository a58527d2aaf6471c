// bce_with_logits_test.cpp: the CPU binary cross-entropy on logits (ops::bce_with_logits)
// against a double-precision reference and its finite differences, with hard and soft
// targets, logits of +-100 (no overflow), and the elements counted right. PyTorch's values on
// the same inputs: tests/actors/losses/loss_reference_test.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

// -(y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))), summed, in double (log1p for accuracy).
template <class X>
double reference_loss(const X& x, const std::vector<float>& y) {
  double total = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double v = x[i];
    // log sigmoid(v) = -log1p(exp(-v)); log(1 - sigmoid(v)) = -log1p(exp(v)).
    const double log_p = v >= 0 ? -std::log1p(std::exp(-v)) : v - std::log1p(std::exp(v));
    const double log_q = v >= 0 ? -v - std::log1p(std::exp(-v)) : -std::log1p(std::exp(v));
    total -= y[i] * log_p + (1 - y[i]) * log_q;
  }
  return total;
}

}  // namespace

TEST_CASE("bce_with_logits matches a double-precision reference and its finite differences") {
  auto bce = kernels::lookup<kernels::ops::bce_with_logits>(kernels::device_type::cpu);
  std::uint32_t seed = 1100;
  for (const bool soft : {false, true}) {
    for (const std::int64_t n : {1, 9, 1000}) {
      CAPTURE(soft);
      CAPTURE(n);
      const auto x = test::random_floats(static_cast<std::size_t>(n), ++seed, -6.0f, 6.0f);
      auto y = test::random_floats(static_cast<std::size_t>(n), ++seed, 0.0f, 1.0f);
      if (!soft)
        for (auto& t : y)
          t = t < 0.5f ? 0.0f : 1.0f;
      const float grad_scale = 0.125f;
      float sums[3] = {-1, -1, -1};
      std::vector<float> dx(x.size());
      bce(test::cpu_context(), n, x.data(), y.data(), grad_scale, sums, dx.data());

      const double want = reference_loss(x, y);
      // Per element: a few double roundings; the sum rounds once to float.
      CHECK(std::abs(sums[0] - want) <= 1.2e-7 * std::abs(want) + 1e-12 * n);
      CHECK(sums[1] == static_cast<float>(n));
      std::int64_t right = 0;
      for (std::size_t i = 0; i < y.size(); ++i)
        right += (x[i] > 0) == (y[i] >= 0.5f) ? 1 : 0;
      CHECK(sums[2] == static_cast<float>(right));

      // h = 1e-4: the loss's second derivative is sigmoid' <= 1/4 and its third <= 0.1, so
      // the truncation is < 1e-9; rounding eps_double * |loss| / h < 1e-9.
      const double h = 1e-4;
      std::vector<double> perturbed(x.begin(), x.end());
      std::vector<double> expected(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        perturbed[i] = x[i] + h;
        const double up = reference_loss(perturbed, y);
        perturbed[i] = x[i] - h;
        const double down = reference_loss(perturbed, y);
        perturbed[i] = x[i];
        expected[i] = grad_scale * (up - down) / (2 * h);
      }
      // sigmoid(x) - y in double, rounded once to float (|.| <= 1 * 0.125).
      TROUPE_CHECK_CLOSE(dx, expected, 1e-8, 1e-6);
    }
  }
}

TEST_CASE("bce_with_logits stays finite for logits of +-100") {
  auto bce = kernels::lookup<kernels::ops::bce_with_logits>(kernels::device_type::cpu);
  const std::vector<float> x{100.0f, -100.0f, 100.0f, -100.0f};
  const std::vector<float> y{1.0f, 0.0f, 0.0f, 1.0f};
  float sums[3];
  std::vector<float> dx(4);
  bce(test::cpu_context(), 4, x.data(), y.data(), 1.0f, sums, dx.data());
  // Right with certainty: loss log1p(e^-100) ~ 3.7e-44 each; wrong: 100 each.
  CHECK(sums[0] == doctest::Approx(200.0));
  CHECK(sums[2] == 2.0f);
  // sigmoid(100) - 1 rounds to 0; sigmoid(-100) = e^-100 is a float denormal (3.7e-44).
  CHECK(dx[0] == 0.0f);
  CHECK(std::abs(dx[1]) < 1e-40f);
  CHECK(dx[2] == 1.0f);
  CHECK(dx[3] == doctest::Approx(-1.0f));
}
