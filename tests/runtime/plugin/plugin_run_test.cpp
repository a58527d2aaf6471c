// plugin_run_test.cpp: a plugin actor whose task posted to its device's stream throws, in a
// whole run: the run must end with exit 1 and the task's message (Note [one failure path]
// in runtime/core/stream.cpp), not terminate the process.
#include <doctest/doctest.h>

#include "actors/session/session.hpp"
#include "actors/tools/verify.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/model/loss.hpp"
#include "runtime/plugin/plugin.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "tests/plugins/test_plugins.hpp"

using namespace troupe;

namespace {

/// A small SGD run over synthetic data (12 features, 4 classes) that loads the faulty
/// plugin through [run] plugins.
std::string shorthand_text() {
  return R"(
[run]
steps = 4
seed = 5
evaluate = false
plugins = [")" + test_plugins::faulty() + "\"]\n" + test::data_section({16, 160, 10, 12, 4}) +
         test::linear(6) + test::layer("relu") + test::linear(4) + R"(
[optimizer]
type = "sgd"
lr = 0.1
)";
}

/// The explicit form of the shorthand with a test_throwing_task on the grads wire of model
/// layer 0, as a user would put it there after `troupe plan --eject`.
run_config with_throwing_task() {
  auto shorthand = parse_config(shorthand_text(), "shorthand.toml");
  auto graph = expand_shorthand(shorthand, check_model(shorthand, 12, 4));
  test_plugins::insert_on_grads_wire(graph, 0, "thrower", "test_throwing_task");
  return parse_config(format_explicit(graph, shorthand), "thrower.toml");
}

}  // namespace

TEST_CASE("a posted task that throws ends the run with exit 1 and its message") {
  test_plugins::load();
  auto config = with_throwing_task();
  auto options = test::quiet_options();
  options.watchdog = 60;  // a hang ends the test with the watchdog's report, not forever
  auto result = run_session(config, options);
  INFO(result.outcome.failure);
  CHECK(result.outcome.exit_code == exit_code::run_failed);
  CHECK(result.outcome.failure.find("a posted task fails on purpose") != std::string::npos);
}

TEST_CASE("a plugin's loss kind trains a run named in [model] loss, and refuses other devices") {
  const auto text = R"(
[run]
steps = 120
seed = 5
plugins = [")" + test_plugins::good() + "\"]\n" + test::data_section({16, 160, 64, 12, 4}) +
                    "[model]\nloss = { type = \"test_margin\", margin = 1.0 }\n" +
                    test::linear(16) + test::layer("relu") + test::linear(4) + R"(
[optimizer]
type = "adam"
lr = 0.01
)";
  const auto config = parse_config(text, "margin.toml");
  auto result = test::run_ok(config, test::quiet_options());
  // Four separable classes: chance is 25%; the hinge loss learns them.
  INFO("test accuracy " << result.outcome.test_accuracy);
  CHECK(result.outcome.test_accuracy > 0.8);
  CHECK(has_loss("test_margin"));
  CHECK_THROWS_WITH_AS(create_loss(config.model, kernels::device_type::cuda),
                       doctest::Contains("runs on CPU devices only"), config_error);
}
