// fill_test.cpp: the CPU fill writes the value everywhere and nowhere else.
#include <doctest/doctest.h>

#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

TEST_CASE("fill writes the value into exactly n elements") {
  auto fill = kernels::lookup<kernels::ops::fill>(kernels::device_type::cpu);
  for (std::size_t n : {0, 1, 7, 4099}) {
    for (float value : {0.0f, -2.5f}) {
      CAPTURE(n);
      CAPTURE(value);
      std::vector<float> x(n + 1, 9.0f);  // one guard element past the end
      fill(test::cpu_context(), n, value, x.data());
      CHECK(std::vector<float>(x.begin(), x.end() - 1) == std::vector<float>(n, value));
      CHECK(x.back() == 9.0f);
    }
  }
}
