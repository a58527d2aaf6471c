// normalisation.cpp: resolving [data] scale, mean and std for a source's features.
#include "runtime/data/normalisation.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/base/limits.hpp"
#include "runtime/data/dataset.hpp"
#include "troupe/error.hpp"

namespace troupe {

per_feature_normalisation resolve_normalisation(const feature_normalisation& n,
                                                std::int64_t features, const std::string& path) {
  auto per_feature = [&](const std::vector<double>& values, const char* what) {
    if (values.size() != 1 && static_cast<std::int64_t>(values.size()) != features)
      throw data_error(quote_user_path(path) + ": [data] " + what + " has " +
                       std::to_string(values.size()) + " values; expected 1 or one per feature (" +
                       std::to_string(features) + ")");
    std::vector<double> out(static_cast<std::size_t>(features));
    for (std::size_t f = 0; f < out.size(); ++f)
      out[f] = values.size() == 1 ? values[0] : values[f];
    return out;
  };
  per_feature_normalisation out;
  out.scale = per_feature(n.scale, "scale");
  out.mean = per_feature(n.mean, "mean");
  out.std = per_feature(n.std, "std");
  for (const auto s : out.std)
    if (s == 0 || !std::isfinite(s))
      throw data_error(quote_user_path(path) + ": [data] std must be finite and not 0");
  auto all = [](const std::vector<double>& v, double x) {
    return std::all_of(v.begin(), v.end(), [x](double y) { return y == x; });
  };
  out.identity = all(out.scale, 1) && all(out.mean, 0) && all(out.std, 1);
  out.uniform = out.scale.empty() || (all(out.scale, out.scale.front()) &&
                                      all(out.mean, out.mean.front()) &&
                                      all(out.std, out.std.front()));
  return out;
}

feature_statistics statistics_of(const dataset& rows) {
  const auto features = static_cast<std::size_t>(rows.features);
  // Sums of x - x0 (x0: the first sample) and their squares: no cancellation for values far
  // from 0 with a small spread.
  std::vector<float> first(features), chunk;
  std::vector<double> sum(features), squares(features);
  const std::int64_t first_row = 0;
  rows.gather(&first_row, 0, 1, first.data());
  constexpr std::int64_t rows_a_chunk = 4096;
  std::vector<std::int64_t> picked(static_cast<std::size_t>(rows_a_chunk));
  for (std::int64_t start = 0; start < rows.count; start += rows_a_chunk) {
    const auto count = std::min(rows_a_chunk, rows.count - start);
    for (std::int64_t i = 0; i < count; ++i)
      picked[static_cast<std::size_t>(i)] = start + i;
    chunk.resize(static_cast<std::size_t>(count) * features);
    rows.gather(picked.data(), 0, static_cast<std::size_t>(count), chunk.data());
    for (std::int64_t i = 0; i < count; ++i)
      for (std::size_t f = 0; f < features; ++f) {
        const double d = static_cast<double>(chunk[static_cast<std::size_t>(i) * features + f]) -
                         first[f];
        sum[f] += d;
        squares[f] += d * d;
      }
  }
  feature_statistics out;
  const auto n = static_cast<double>(rows.count);
  for (std::size_t f = 0; f < features; ++f) {
    const double shifted_mean = sum[f] / n;
    const double variance = std::max(0.0, squares[f] / n - shifted_mean * shifted_mean);
    out.mean.push_back(first[f] + shifted_mean);
    out.std.push_back(variance > 0 ? std::sqrt(variance) : 1.0);
  }
  return out;
}

}  // namespace troupe
