// session_support.hpp: what the tests that run whole sessions share: options for a run
// inside a test and a run that must end well.
//
// Header-only and test-only. It sets only what every such test wants (no progress output,
// metrics thrown away unless a test reads them); each test adds what it checks (parameters,
// a trace, a watchdog) itself.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "actors/session/session.hpp"
#include "troupe/error.hpp"

namespace troupe::test {

/// Options for a run inside a test: nothing printed, metrics written to `metrics_path`.
inline session_options quiet_options(std::string metrics_path = "/dev/null") {
  session_options options;
  options.quiet = true;
  options.metrics_path = std::move(metrics_path);
  options.sample_length = 0;  // a language model's text: only tests/actors/session/language_model_test.cpp
  return options;
}

/// Runs `config` and requires that the run ends well (showing its failure if not).
inline session_result run_ok(const run_config& config, const session_options& options) {
  auto result = run_session(config, options);
  INFO(result.outcome.failure);
  REQUIRE(result.outcome.exit_code == exit_code::ok);
  return result;
}

/// Runs `config` for `steps` steps, checkpointing into `checkpoints` ("" = none) and
/// resuming from `resume` ("" = from the seed); returns the parameters it ends with.
inline std::vector<std::vector<std::vector<float>>> train_resumable(run_config config,
                                                                    std::int64_t steps,
                                                                    const std::string& checkpoints,
                                                                    const std::string& resume) {
  config.run.steps = steps;
  config.run.checkpoint = checkpoints;
  auto options = quiet_options();
  options.keep_parameters = true;
  options.resume = resume;
  return run_ok(config, options).parameters;
}

/// CHECKs that running `config` (quietly, with its own metrics setting) is refused with a
/// config_error whose message contains `message`.
inline void check_refused(const run_config& config, const std::string& message) {
  session_options options;
  options.quiet = true;
  CHECK_THROWS_WITH_AS(run_session(config, options), doctest::Contains(message.c_str()),
                       config_error);
}

}  // namespace troupe::test
