// verify.hpp: the equivalence check a user can run on their own config.
//
// Runs a config's wiring and the same model on one device with the same seed, data and
// global batch for a few steps, and compares every parameter (DESIGN.md "Equivalence").
// Used by `troupe verify` and the tests of plugins' layers; the equivalence tests hold
// every wiring against one pass over the batch (tests/actors/session/equivalence_test.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/config/config.hpp"

namespace troupe {

struct parameter_difference {
  std::int64_t layer = 0;
  std::int64_t parameter = 0;  // index within the layer (0 weight, 1 bias for linear)
  double relative = 0;         // ||a - b||_inf / ||a||_inf, a = the single-device run
  std::string layer_type;      // "linear" (verify_against_single_device fills it in)
  std::string name;            // the layer's name for it: "weight", "gamma"
};

struct verify_result {
  std::vector<parameter_difference> differences;
  double worst = 0;
  bool passed = false;
};

/// The single-device form of a shorthand config: same everything, [parallel] reduced to
/// its first device, one replica, one stage, one micro-batch.
run_config single_device_form(const run_config& config);

/// What troupe verify compares a config's wiring with: its single-device form, trained in
/// the wiring's R x M micro-batches when the global batch splits evenly into them (Note [the
/// reference's micro-batches] in verify.cpp).
run_config reference_form(const run_config& config);

/// max over tensors of ||a - b||_inf / ||a||_inf (0 when both are empty).
std::vector<parameter_difference> compare_parameters(
    const std::vector<std::vector<std::vector<float>>>& reference,
    const std::vector<std::vector<std::vector<float>>>& other);

/// Trains a config's wiring for `steps` steps somewhere else (a run over several
/// processes) and returns its final parameters, per model layer as run_session keeps them.
using parallel_run = std::function<std::vector<std::vector<std::vector<float>>>(
    const run_config& config, std::int64_t steps)>;

/// The parameters of the newest checkpoint under `root` (a run of `config`), per model
/// layer as run_session keeps them. Throws data_error when one is missing.
std::vector<std::vector<std::vector<float>>> parameters_in_checkpoint(const run_config& config,
                                                                      const std::string& root);

/// The tolerance verify holds a config to when none is given: 1e-5 (float summation order,
/// DESIGN.md "Equivalence"), or bf16's unit roundoff, 2^-8, for a config in bf16
/// (Note [verify's tolerance in bf16] in verify.cpp).
double default_tolerance(const run_config& config);

/// Trains `config` and its reference_form for `steps` steps (no evaluation, no output)
/// and compares. Throws user_error for explicit configs (their model is not
/// written as [model]) and if either run fails. `run_parallel`, when given, trains the
/// config's wiring instead of a session in this process (`troupe verify` of a config over
/// several nodes launches them).
verify_result verify_against_single_device(const run_config& config, std::int64_t steps,
                                           double tolerance, const parallel_run& run_parallel = {});

}  // namespace troupe
