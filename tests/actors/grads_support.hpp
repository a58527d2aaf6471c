// grads_support.hpp: deterministic weight gradients for the averager tests.
//
// Header-only and test-only: the ring, central and gloo averager tests all sum the same
// kind of gradients, so they make them the same way.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "troupe/tensor.hpp"

namespace troupe::test {

/// Deterministic gradients of one (step, replica) for a layer with parameters `shapes`,
/// on `device`. Magnitudes vary over a few powers of two so that rounding matters.
inline std::vector<tensor> make_grads(const std::vector<shape_t>& shapes, std::int64_t step,
                                      std::int32_t replica, device_id device) {
  std::mt19937 random{static_cast<std::uint32_t>(1000 * step + 17 * replica + 5)};
  std::uniform_real_distribution<float> value{-1.0f, 1.0f};
  std::uniform_int_distribution<int> exponent{-6, 3};
  std::vector<tensor> grads;
  for (const auto& shape : shapes) {
    std::vector<float> values(static_cast<std::size_t>(element_count(shape)));
    for (auto& v : values)
      v = std::ldexp(value(random), exponent(random));
    grads.push_back(tensor::from(values, shape, device));
  }
  return grads;
}

/// The gradients' values, one tensor after another.
inline std::vector<float> flatten(const std::vector<tensor>& ts) {
  std::vector<float> out;
  for (const auto& t : ts) {
    auto v = t.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

/// Checks `got` against the double-precision sum of `by_replica`: each element within
/// `relative` of the magnitudes summed, sum_r |g_r|.
inline void check_within(const std::vector<float>& got,
                         const std::vector<std::vector<float>>& by_replica, double relative) {
  REQUIRE(got.size() == by_replica[0].size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    double exact = 0, magnitude = 0;
    for (const auto& g : by_replica) {
      exact += g[i];
      magnitude += std::abs(static_cast<double>(g[i]));
    }
    INFO("element " << i << ": got " << got[i] << ", exact " << exact);
    CHECK(std::abs(got[i] - exact) <= relative * magnitude);
  }
}

/// Checks a float sum against the double-precision one. Each of the R - 1 float additions
/// rounds by at most half an ulp of its partial sum, and every partial sum is at most
/// sum_r |g_r| in size, so the error is at most (R - 1) * 2^-24 * sum_r |g_r| (plus
/// nothing: there is no underflow at these scales).
inline void check_against_double(const std::vector<float>& got,
                                 const std::vector<std::vector<float>>& by_replica) {
  check_within(got, by_replica, static_cast<double>(by_replica.size() - 1) * std::ldexp(1.0, -24));
}

}  // namespace troupe::test
