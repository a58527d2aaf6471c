// vector_math_test.cpp: the vectorisable exp and tanh (kernels/cpu/vector_math.hpp) against
// double precision over the whole float range: every 4099th bit pattern (about a million
// floats of every exponent and both signs), a dense sweep where each function changes form,
// and the special values. Each is held to the bound its header states.
#include "kernels/cpu/vector_math.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>
#include "kernel_test_support.hpp"

using troupe::kernels::cpu::exp_nonpositive;
using troupe::kernels::cpu::tanh_vectorisable;

namespace {

using troupe::test::from_bits;

// Floats across the range: a stride through the bit patterns, and a dense sweep of [a, b].
std::vector<float> samples(float a, float b) {
  std::vector<float> out;
  for (std::uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 4099)
    out.push_back(from_bits(static_cast<std::uint32_t>(bits)));
  for (int i = 0; i <= 200000; ++i)
    out.push_back(a + (b - a) * static_cast<float>(i) / 200000.0f);
  return out;
}

// |got - want| / |want| (0 when both are 0).
double relative(float got, double want) {
  return want == 0 ? std::fabs(got) : std::fabs(got - want) / std::fabs(want);
}

}  // namespace

TEST_CASE("tanh is within 2.4e-7 relative of double tanh for every float, NaN and inf too") {
  double worst = 0;
  float worst_at = 0;
  for (float x : samples(-11.0f, 11.0f)) {
    if (std::isnan(x))
      continue;
    const double error = relative(tanh_vectorisable(x), std::tanh(static_cast<double>(x)));
    if (error > worst)
      worst = error, worst_at = x;
  }
  INFO("worst relative error " << worst << " at x = " << worst_at);
  CHECK(worst < 2.4e-7);
  // The sweep crosses the polynomial's edge at 0.625 and the clamp at 10.
  CHECK(std::isnan(tanh_vectorisable(std::numeric_limits<float>::quiet_NaN())));
  CHECK(tanh_vectorisable(std::numeric_limits<float>::infinity()) == 1.0f);
  CHECK(tanh_vectorisable(-std::numeric_limits<float>::infinity()) == -1.0f);
  CHECK(std::signbit(tanh_vectorisable(-0.0f)));
  CHECK(tanh_vectorisable(0.0f) == 0.0f);
  CHECK(tanh_vectorisable(1e-30f) == 1e-30f);  // tiny: tanh x = x
  CHECK(tanh_vectorisable(20.0f) == 1.0f);
}

TEST_CASE("exp of a non-positive float is within 2e-7 relative of double exp down to -87, 0 below") {
  double worst = 0;
  float worst_at = 0;
  for (float x : samples(-90.0f, 0.0f)) {
    if (!(x <= 0.0f))
      continue;  // NaN, and the positive half: not this function's
    const float got = exp_nonpositive(x);
    if (x >= -87.0f) {
      const double error = relative(got, std::exp(static_cast<double>(x)));
      if (error > worst)
        worst = error, worst_at = x;
    } else {
      CHECK(got == 0.0f);  // below -87: 0 (exp is a denormal or 0 there)
    }
  }
  INFO("worst relative error " << worst << " at x = " << worst_at);
  CHECK(worst < 2e-7);
  CHECK(exp_nonpositive(0.0f) == 1.0f);
  CHECK(exp_nonpositive(-0.0f) == 1.0f);
  CHECK(std::isnan(exp_nonpositive(std::numeric_limits<float>::quiet_NaN())));
  CHECK(exp_nonpositive(-std::numeric_limits<float>::infinity()) == 0.0f);
}
