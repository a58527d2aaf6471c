// normalisation.hpp: how a source's feature values become the floats a model reads:
// x * scale, minus mean, over std, in double, each one value for every feature or one a
// feature ([data] scale, mean, std). The .npy and CSV sources share it, so that one value
// normalises to the same bits from either (and as the IDX source's pixels do).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

struct dataset;  // runtime/data/dataset.hpp

/// As the config gives it: each 1 value, or one a feature.
struct feature_normalisation {
  std::vector<double> scale{1.0};
  std::vector<double> mean{0.0};
  std::vector<double> std{1.0};
};

/// Resolved for D features: one scale, mean and std a feature.
struct per_feature_normalisation {
  std::vector<double> scale, mean, std;  // (D) each
  bool identity = true;                  // scale 1, mean 0, std 1 everywhere
  bool uniform = true;                   // every feature alike

  /// Feature f's value v as the model reads it.
  float apply(std::int64_t f, double v) const {
    const auto i = static_cast<std::size_t>(f);
    return static_cast<float>((v * scale[i] - mean[i]) / std[i]);
  }
};

/// Each feature's mean and standard deviation (population: sklearn's StandardScaler) over
/// every sample of `rows`, read in chunks, in double; a feature that never varies gets std 1
/// (as StandardScaler does), so it normalises to 0 instead of dividing by 0.
struct feature_statistics {
  std::vector<double> mean, std;  // (D) each
};
feature_statistics statistics_of(const dataset& rows);

/// Resolves `n` for `features` values a sample. Throws data_error naming `path` for a
/// vector of neither 1 nor D values, or a std that is 0 or not finite.
per_feature_normalisation resolve_normalisation(const feature_normalisation& n,
                                                std::int64_t features, const std::string& path);

}  // namespace troupe
