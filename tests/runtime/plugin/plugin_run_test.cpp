// plugin_run_test.cpp: a plugin actor whose task posted to its device's stream throws, in a
// whole run: the run must end with exit 1 and the task's message (Note [one failure path]
// in runtime/core/stream.cpp), not terminate the process.
#include <doctest/doctest.h>

#include "actors/session/session.hpp"
#include "actors/tools/verify.hpp"
#include "runtime/graph/topology.hpp"
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
