// scale_test.cpp: the CPU scale against alpha * x in double.
#include <doctest/doctest.h>

#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

TEST_CASE("scale multiplies every element by alpha over odd lengths") {
  auto scale = kernels::lookup<kernels::ops::scale>(kernels::device_type::cpu);
  for (std::size_t n : {1, 7, 1000, 4099}) {
    CAPTURE(n);
    auto x = test::random_floats(n, 1000 + n);
    const float alpha = 1.0f / 3.0f;
    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i)
      want[i] = static_cast<double>(alpha) * x[i];
    scale(test::cpu_context(), n, alpha, x.data());
    // One rounding of the product: half an ulp, 6e-8 relative.
    TROUPE_CHECK_CLOSE(x, want, 0.0, 6e-8);
  }
}
