// layer_test_support.hpp: what the tests of single layers share: a layer's config with
// integer settings at known positions (for checking error messages), and a tensor of fixed
// pseudo-random values in [-1, 1).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/model/layer.hpp"

namespace troupe::test {

/// A [[model.layers]] table of `type` in `file`: the table at 3:1, its type at 4:8, and
/// each setting (in key order) on its own line from 5, at column 9.
inline layer_config layer_table(const std::string& file, const std::string& type,
                                const std::map<std::string, std::int64_t>& values) {
  layer_config c;
  c.type = type;
  int line = 5;
  for (const auto& [key, value] : values)
    c.settings[key] = setting_value{value, {file, line++, 9}};
  c.where = {file, 3, 1};
  c.type_where = {file, 4, 8};
  return c;
}

/// A tensor of `shape` with values in [-1, 1) from a fixed LCG: the same inputs everywhere.
inline tensor random_tensor(shape_t shape, std::uint32_t seed) {
  std::vector<float> values(static_cast<std::size_t>(element_count(shape)));
  std::uint32_t state = seed;
  for (auto& v : values) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  return tensor::from(values, std::move(shape));
}

}  // namespace troupe::test
