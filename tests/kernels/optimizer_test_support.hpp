// optimizer_test_support.hpp: what the SGD and Adam update-kernel tests share: running a
// check in place and out of place, and replaying the PyTorch reference sequence
// (tests/reference/optimizer_reference.json, made by make_optimizer_reference.py).
//
// Header-only and test-only. Each test keeps its own optimizer run (the kernel call) and
// says next to its call why its tolerance holds.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernel_test_support.hpp"

namespace troupe::test {

/// Runs `body(in_place)` for in_place = true, then false.
template <class Body>
void in_place_and_out_of_place(Body&& body) {
  for (const bool in_place : {true, false}) {
    CAPTURE(in_place);
    body(in_place);
  }
}

/// The reference file, parsed (the test fails if it cannot be read).
inline nlohmann::json optimizer_reference() {
  std::ifstream file{TROUPE_SOURCE_DIR "/tests/reference/optimizer_reference.json"};
  REQUIRE(file.good());
  return nlohmann::json::parse(file);
}

/// Feeds reference case `c`'s gradients to `run` step by step (`run.step(gradient)`) and
/// checks `run.param` after each step against PyTorch's parameters within `atol`.
template <class Run>
void check_reference_steps(Run& run, const nlohmann::json& c, double atol) {
  const auto& grads = c.at("gradients");
  const auto& after = c.at("params_after_step");
  for (std::size_t step = 0; step < grads.size(); ++step) {
    CAPTURE(step);
    run.step(grads[step].get<std::vector<float>>());
    TROUPE_CHECK_CLOSE(run.param, after[step].get<std::vector<float>>(), atol, 0.0);
  }
}

}  // namespace troupe::test
