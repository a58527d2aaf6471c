// grads_support.hpp: deterministic weight gradients for the averager tests.
//
// Header-only and test-only: the ring, central and gloo averager tests all sum the same
// kind of gradients, so they make them the same way.
#pragma once

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

}  // namespace troupe::test
