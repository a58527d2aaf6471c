// gelu_test.cpp: the CPU exact (erf) GELU against a double-precision reference, and its
// backward against central finite differences of that reference.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

// torch.nn.GELU(): x * Phi(x), Phi the standard normal CDF.
double gelu_reference(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

}  // namespace

TEST_CASE("gelu_forward matches x * Phi(x) computed in double, in place too") {
  // erff is accurate to ~1 ulp, but 1 + erf(x) cancels for x < 0: its absolute error is
  // ~1 ulp of 1 (1.2e-7), which 0.5 * |x| <= 2.5 turns into ~3e-7 absolute error in y.
  // A few roundings elsewhere cost ~4 ulps relative (5e-7).
  test::check_elementwise_forward<kernels::ops::gelu_forward>(gelu_reference, 40, -5.0f, 5.0f,
                                                              5e-7, 5e-7);
}

TEST_CASE("gelu is 0 at 0, ~x for large x and ~0 for very negative x") {
  auto forward = kernels::lookup<kernels::ops::gelu_forward>(kernels::device_type::cpu);
  std::vector<float> x{0.0f, 10.0f, -10.0f, 1.0f};
  std::vector<float> y(4);
  forward(test::cpu_context(), 4, x.data(), y.data());
  CHECK(y[0] == 0.0f);
  CHECK(y[1] == 10.0f);
  CHECK(std::abs(y[2]) < 1e-20f);
  // GELU(1) = 0.5 * (1 + erf(1/sqrt 2)) = 0.8413447460685429 (torch.nn.GELU()(1.0)).
  CHECK(std::abs(y[3] - 0.8413447460685429) < 1e-7);
}

TEST_CASE("gelu_backward matches central finite differences of the double GELU") {
  auto backward = kernels::lookup<kernels::ops::gelu_backward>(kernels::device_type::cpu);
  for (std::size_t n : {1, 7, 1000, 4099}) {
    CAPTURE(n);
    const auto x = test::random_floats(n, 50 + n, -5.0f, 5.0f);
    const auto dy = test::random_floats(n, 60 + n);
    // h = 1e-4: the truncation error h^2/6 * |GELU'''| (|GELU'''| < 1.2) is < 2e-9 and the
    // rounding error eps_double / h ~ 1e-12, so the reference is good to ~2e-9.
    const double h = 1e-4;
    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i)
      want[i] = dy[i] * (gelu_reference(x[i] + h) - gelu_reference(x[i] - h)) / (2 * h);
    std::vector<float> dx(n);
    backward(test::cpu_context(), n, x.data(), nullptr, dy.data(), dx.data());
    // The float derivative Phi(x) + x * phi(x) has the same cancellation as the forward
    // (~1 ulp of 1 absolute in Phi) plus a few roundings; |dy| < 1.
    TROUPE_CHECK_CLOSE(dx, want, 5e-7, 5e-7);
  }
}
