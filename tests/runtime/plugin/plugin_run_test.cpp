// plugin_run_test.cpp: a plugin actor whose task posted to its device's stream throws, in a
// whole run: the run must end with exit 1 and the task's message (Note [one failure path]
// in runtime/core/device.cpp), not terminate the process.
#include <doctest/doctest.h>

#include <algorithm>

#include "actors/session.hpp"
#include "actors/verify.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/plugin/plugin.hpp"
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
plugins = [")" + test_plugins::faulty() + R"("]

[data]
source = "synthetic"
batch_size = 16
synthetic_train = 160
synthetic_test = 10
synthetic_features = 12
synthetic_classes = 4

[[model.layers]]
type = "linear"
out = 6
[[model.layers]]
type = "relu"
[[model.layers]]
type = "linear"
out = 4

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
  auto grads = std::find_if(graph.wires.begin(), graph.wires.end(), [&](const wire_plan& w) {
    const auto* from = graph.find(w.from);
    return w.kind == wire_kind::grads && from->kind == actor_kind::layer && from->layer == 0;
  });
  REQUIRE(grads != graph.wires.end());
  wire_plan onward{"thrower", grads->to, wire_kind::grads, 0, {}};
  grads->to = "thrower";
  graph.wires.push_back(onward);
  actor_plan thrower;
  thrower.name = "thrower";
  thrower.kind = actor_kind::custom;
  thrower.custom_kind = "test_throwing_task";
  thrower.device = graph.devices.front();
  graph.actors.push_back(thrower);
  return parse_config(format_explicit(graph, shorthand), "thrower.toml");
}

}  // namespace

TEST_CASE("a posted task that throws ends the run with exit 1 and its message") {
  test_plugins::load();
  auto config = with_throwing_task();
  session_options options;
  options.quiet = true;
  options.metrics_path = "/dev/null";
  options.watchdog = 60;  // a hang ends the test with the watchdog's report, not forever
  auto result = run_session(config, options);
  INFO(result.outcome.failure);
  CHECK(result.outcome.exit_code == exit_code::run_failed);
  CHECK(result.outcome.failure.find("a posted task fails on purpose") != std::string::npos);
}
