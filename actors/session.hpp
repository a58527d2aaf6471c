// session.hpp: one training run, from a checked config to a finished outcome.
//
// run_session() checks everything that can be checked before anything is spawned (layer
// types and settings, shapes along the model, batch and data sizes, devices), loads the
// data, creates the devices, spawns and wires the actors (data loader, one layer actor
// per layer, the loss, one optimizer per parameterised layer, the trainer), runs until
// the trainer is done, and returns the outcome and the final parameters. Errors in the
// input throw config_error / data_error before the first actor exists.
#pragma once

#include <string>
#include <vector>

#include "actors/trainer_actor.hpp"
#include "runtime/config.hpp"

namespace troupe {

struct session_options {
  bool quiet = false;           // no progress output
  bool progress_bar = false;    // redraw a bar (a terminal) instead of printing lines
  bool keep_parameters = false; // copy the final parameters into the result
  std::string metrics_path;     // overrides [run] metrics when not empty
};

struct session_result {
  run_outcome outcome;
  /// Final parameters per model layer (empty for parameterless layers), host copies;
  /// filled only with session_options::keep_parameters.
  std::vector<std::vector<std::vector<float>>> parameters;
};

/// The model's per-sample shapes: shapes[i] is the input of layer i, shapes.back() the
/// output. Throws config_error at the layer that does not fit.
std::vector<shape_t> check_model(const run_config& config, std::int64_t input_features,
                                 std::int64_t classes);

session_result run_session(const run_config& config, const session_options& options);

}  // namespace troupe
