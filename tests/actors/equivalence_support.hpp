// equivalence_support.hpp: what the tests that compare a wiring's parameters with another
// run's share (DESIGN.md "Equivalence"): the small MLP they train for 20 steps, the
// training itself, and the largest relative difference between two runs' parameters.
//
// Header-only and test-only: tests/actors/session/equivalence_test.cpp (every wiring),
// tests/actors/session/gpu_training_test.cpp (the fake GPU) and tests/gpu/ (a real GPU).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "actors/session/session.hpp"
#include "actors/tools/verify.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"

namespace troupe::test {

/// A layer's parameters, per layer: what a run with keep_parameters returns.
using trained_parameters = std::vector<std::vector<std::vector<float>>>;

/// 20 steps of a 20-16-12-5 MLP (relu, tanh) on synthetic data, seed 11, without
/// evaluation, with `optimizer` at lr 0.01; `parallel` ends the config (its [parallel]).
inline std::string equivalence_config(const std::string& parallel,
                                      const std::string& optimizer = "adam") {
  return R"(
[run]
steps = 20
seed = 11
evaluate = false
)" + data_section({24, 480, 10, 20, 5}) +
         linear(16) + layer("relu") + linear(12) + layer("tanh") + linear(5) + R"(
[optimizer]
type = ")" +
         optimizer + R"("
lr = 0.01
momentum = 0.5

)" + parallel;
}

/// Trains the config `text` (20 steps) and returns its parameters.
inline trained_parameters train_twenty_steps(const std::string& text) {
  auto config = parse_config(text, "equivalence.toml");
  auto options = quiet_options();
  options.keep_parameters = true;
  auto result = run_ok(config, options);
  REQUIRE(result.outcome.steps == 20);
  return result.parameters;
}

/// The checkpoint after `step` steps under `root` (a test failure when there is none).
inline std::string checkpoint_at(const std::string& root, std::int64_t step) {
  for (const auto& c : list_checkpoints(root))
    if (c.step == step)
      return c.path;
  FAIL("no checkpoint of step " << step << " under " << root);
  return {};
}

/// The largest relative difference between any two corresponding parameters.
inline double largest_difference(const trained_parameters& a, const trained_parameters& b) {
  double difference = 0;
  for (const auto& d : compare_parameters(a, b))
    difference = std::max(difference, d.relative);
  return difference;
}

}  // namespace troupe::test
