// layer_check.hpp: the generic gradient check any registered layer can be run through.
//
// It builds the layer from its config, draws an input and parameters from the seed, and
// compares backward (dx and every parameter gradient) with central finite differences
// of the scalar L = sum(y * r) for a fixed random r, on the CPU, element by element
// (Note [what the gradient check allows]). It also checks that forward writes the declared
// output shape, that accumulate = true adds, that a split backward computes what backward
// does, that backward with dx = null (a first layer's) does not write through it (in a
// child process, so that a crash is a verdict), and it checks again at drawn values of the
// settings the layer declares that the config does not set. Used by the tests of the
// built-in layers, by `troupe check-layer`, and for plugin layers.
#pragma once

#include <string>
#include <vector>

#include "runtime/config/config.hpp"
#include "runtime/model/layer.hpp"

namespace troupe {

// Note [what the gradient check allows]
// An error that is small everywhere can still be wrong in kind: a leaky ReLU whose backward
// drops the slope on x < 0 is off by 0.01 * dy there, which a comparison against the
// gradient's overall scale (what the check did first) lets through at the default slope.
// So each element is compared on its own: element i passes when
//     |analytic_i - numeric_i| <= tolerance * max(|analytic_i|, |numeric_i|) + floor_i.
// floor_i is what the finite differences themselves cannot resolve, estimated from the
// differences at two steps, h and h/2: truncation error shrinks four times from h to h/2
// and rounding error (float32 forward passes, about eps_f32 * |L| / h) doubles, so
// |numeric_h - numeric_h/2| is of the order of the error of either. floor_i is 3 times the
// larger of that element's own estimate and the tensor's 90th percentile of them (one
// element's two estimates may agree by chance), plus 1e-6 of the tensor's scale. A term
// dropped from a gradient is then caught wherever it is larger than the differences' own
// noise, which for float32 forwards is some 1e-5 of the scale, not 2e-2 of it.
struct gradient_check_options {
  shape_t input_shape = {7};     // per sample
  std::int64_t batch = 3;
  std::uint64_t seed = 1;
  double step = 1e-3;            // finite-difference step h (also taken at h/2)
  double tolerance = 1e-2;       // relative, per element, on top of the noise floor
  double kink_margin = 2e-2;     // keep inputs this far from 0 (ReLU's kink)
  bool vary_settings = true;     // check again at drawn values of the settings not given
  bool null_dx = true;           // call backward with dx = null in a child process
};

struct gradient_check_result {
  bool passed = true;
  /// The worst element's |analytic - numeric| / what is allowed there (<= 1 passes), and
  /// its relative error |analytic - numeric| / max(|analytic|, |numeric|).
  double worst_ratio = 0;
  double worst_relative = 0;
  std::string worst;                  // "dx[4]: backward 0, finite differences 0.0031, ..."
  std::vector<std::string> failures;  // one line per failing quantity
  std::vector<std::string> checked;   // the settings checked at besides the given ones
  std::string summary;                // what was checked and the worst element
};

/// Runs the check. Throws user_error, before any work, when the check would be too big:
/// a tensor past limits::max_tensor_elements, or more than limits::max_gradient_check_flops
/// of finite differences (check_gradient_check_size).
gradient_check_result check_layer_gradients(const layer_config& config,
                                            const gradient_check_options& options);

/// Throws user_error when checking `math` (a layer of type `type`) with `options`, `runs`
/// times (once per setting drawn, and once as given), would build a tensor past
/// limits::max_tensor_elements or take more than limits::max_gradient_check_flops (Note
/// [input limits] in runtime/base/limits.hpp).
void check_gradient_check_size(const layer& math, const std::string& type,
                               const gradient_check_options& options, int runs = 1);

}  // namespace troupe
