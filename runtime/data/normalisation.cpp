// normalisation.cpp: resolving [data] scale, mean and std for a source's features.
#include "runtime/data/normalisation.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/base/limits.hpp"
#include "troupe/error.hpp"

namespace troupe {

per_feature_normalisation resolve_normalisation(const feature_normalisation& n,
                                                std::int64_t features, const std::string& path) {
  auto per_feature = [&](const std::vector<double>& values, const char* what) {
    if (values.size() != 1 && static_cast<std::int64_t>(values.size()) != features)
      throw data_error(quote_user_text(path, limits::max_quoted_path_length) + ": [data] " + what +
                       " has " + std::to_string(values.size()) +
                       " values; expected 1 or one per feature (" + std::to_string(features) +
                       ")");
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
      throw data_error(quote_user_text(path, limits::max_quoted_path_length) +
                       ": [data] std must be finite and not 0");
  auto all = [](const std::vector<double>& v, double x) {
    return std::all_of(v.begin(), v.end(), [x](double y) { return y == x; });
  };
  out.identity = all(out.scale, 1) && all(out.mean, 0) && all(out.std, 1);
  out.uniform = out.scale.empty() || (all(out.scale, out.scale.front()) &&
                                      all(out.mean, out.mean.front()) &&
                                      all(out.std, out.std.front()));
  return out;
}

}  // namespace troupe
