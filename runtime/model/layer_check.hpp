// layer_check.hpp: the generic gradient check any registered layer can be run through.
//
// It builds the layer from its config, draws an input and parameters from the seed, and
// compares backward (dx and every parameter gradient) with central finite differences
// of the scalar L = sum(y * r) for a fixed random r, on the CPU. It also checks that
// forward writes the declared output shape and that accumulate = true adds. Used by the
// tests of the built-in layers, by `troupe check-layer`, and for plugin layers.
#pragma once

#include <string>
#include <vector>

#include "runtime/config/config.hpp"
#include "runtime/model/layer.hpp"

namespace troupe {

struct gradient_check_options {
  shape_t input_shape = {7};     // per sample
  std::int64_t batch = 3;
  std::uint64_t seed = 1;
  double step = 1e-3;            // finite-difference step h
  // Float32 forward passes: central differences carry O(h^2) truncation plus roughly
  // eps_f32 * |L| / h of rounding, so with h = 1e-3 and |L| ~ 10 the absolute error of
  // one derivative is around 1e-3; compare relative to the gradient's scale.
  double tolerance = 2e-2;
  double kink_margin = 2e-2;     // keep inputs this far from 0 (ReLU's kink)
};

struct gradient_check_result {
  bool passed = true;
  double worst_error = 0;        // max |analytic - numeric| / max(1, |numeric|) seen
  std::vector<std::string> failures;  // one line per failing quantity
  std::string summary;           // one line: what was checked and the worst error
};

/// Runs the check. Throws user_error, before any work, when the check would be too big:
/// a tensor past limits::max_tensor_elements, or more than limits::max_gradient_check_flops
/// of finite differences (check_gradient_check_size).
gradient_check_result check_layer_gradients(const layer_config& config,
                                            const gradient_check_options& options);

/// Throws user_error when checking `math` (a layer of type `type`) with `options` would
/// build a tensor past limits::max_tensor_elements or take more than
/// limits::max_gradient_check_flops (Note [input limits] in runtime/base/limits.hpp).
void check_gradient_check_size(const layer& math, const std::string& type,
                               const gradient_check_options& options);

}  // namespace troupe
