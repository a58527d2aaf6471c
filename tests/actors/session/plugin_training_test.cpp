// plugin_training_test.cpp: plugin layers and actor kinds in whole runs.
//
// The test plugins (tests/plugins/) reach the runs through [run] plugins, as a user's
// config would name them. The plugin layer must train in pipeline and data parallel
// wirings exactly as on one device; the plugin's gradient scaler, placed on a grads wire
// of an ejected config, must really sit on that wire; and a plugin layer that breaks the
// layer contract must end the run with a message that says where.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "actors/session/session.hpp"
#include "actors/tools/verify.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/model/layer.hpp"
#include "runtime/plugin/plugin.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "tests/plugins/test_plugins.hpp"
#include "tests/temp_files.hpp"
#include "tests/text_checks.hpp"

using namespace troupe;

namespace {

constexpr std::int64_t plugin_features = 12;
constexpr std::int64_t plugin_classes = 4;

/// A small SGD run (no momentum, no weight decay) whose layers are `layers` (TOML
/// [[model.layers]] tables), loading `plugin` through [run] plugins.
std::string plugin_config_text(const std::string& plugin, const std::string& layers,
                               const std::string& parallel = "") {
  return R"(
[run]
steps = 8
seed = 5
evaluate = false
plugins = [")" + plugin + "\"]\n" + test::data_section({16, 160, 10, 12, 4}) + "\n" +
         layers + R"(
[optimizer]
type = "sgd"
lr = 0.1
momentum = 0.0
)" + parallel;
}

const std::string scale_model = test::linear(10) + test::layer("test_scale") +
                                 test::layer("tanh") + test::linear(4);

session_result train_with_plugin(const run_config& config) {
  auto options = test::quiet_options();
  options.keep_parameters = true;
  options.watchdog = 60;  // a hang ends the test with the watchdog's report, not forever
  return run_session(config, options);
}

session_result train_ok(const run_config& config) {
  auto result = train_with_plugin(config);
  INFO(result.outcome.failure);
  REQUIRE(result.outcome.exit_code == exit_code::ok);
  return result;
}

/// The explicit form of a shorthand config, with a test_grad_scaler of `factor` put on
/// the grads wire of model layer `layer` (between the layer and its optimizer), as
/// format_explicit writes it: a user would edit this text.
std::string ejected_with_scaler(const run_config& shorthand, std::int32_t layer, double factor) {
  auto graph = expand_shorthand(shorthand, check_model(shorthand, plugin_features, plugin_classes));
  auto& scaler = test_plugins::insert_on_grads_wire(graph, layer, "scaler", "test_grad_scaler");
  scaler.settings["factor"] = setting_value{factor, {}};
  return format_explicit(graph, shorthand);
}

run_config read(const std::string& text) {
  return parse_config(text, "ejected.toml");
}

run_config ejected(const run_config& shorthand) {
  auto graph = expand_shorthand(shorthand, check_model(shorthand, plugin_features, plugin_classes));
  return read(format_explicit(graph, shorthand));
}

/// Model layer `layer`'s parameters as the optimizer initialises them (version 0).
std::vector<std::vector<float>> initial_parameters(const run_config& config, std::int32_t layer) {
  auto shapes = check_model(config, plugin_features, plugin_classes);
  auto specs = create_layer(config.model.layers.at(static_cast<std::size_t>(layer)))
                   ->parameters(shapes.at(static_cast<std::size_t>(layer)));
  std::vector<std::vector<float>> out;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::vector<float> values(static_cast<std::size_t>(element_count(specs[i].shape)));
    initialise_parameter(specs[i], config.run.seed, layer, static_cast<std::int64_t>(i),
                         values.data());
    out.push_back(values);
  }
  return out;
}

using troupe::test::contains;

}  // namespace

TEST_CASE("a plugin layer trains in PP2 and DP2 wirings as on one device") {
  // Tolerance as in equivalence_test.cpp: the wirings differ only in the order of float
  // sums (per micro-batch or per replica gradients, ~1e-7 relative); SGD with lr = 0.1
  // moves parameters by lr * that per step, so after 8 steps they agree far below 1e-5,
  // while a lost micro-batch or a wrong scale moves them by 1e-3 or more.
  const std::vector<std::pair<const char*, std::string>> wirings = {
      {"PP2, GPipe, M = 2",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nmicrobatches = 2\n"},
      {"DP2, ring averaging",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\n"},
  };
  for (const auto& [wiring, parallel] : wirings) {
    const char* name = wiring;  // not a binding: INFO's lambda captures it (clang 14)
    INFO(name);
    auto config =
        parse_config(plugin_config_text(test_plugins::good(), scale_model, parallel), "p.toml");
    auto result = verify_against_single_device(config, 8, 1e-5);
    INFO("worst relative difference " << result.worst);
    CHECK(result.passed);
    REQUIRE(result.differences.size() == 5);  // linear (2), test_scale (1), linear (2)
    // Named as the layers name them, not by index.
    CHECK(result.differences[2].layer_type == "test_scale");
    CHECK(result.differences[2].name == "scale");
    CHECK(result.differences[4].name == "bias");
  }
}

TEST_CASE("a plugin actor on a grads wire really sits on it") {
  auto shorthand = parse_config(plugin_config_text(test_plugins::good(), scale_model), "s.toml");
  load_config_plugins(shorthand);  // the shorthand is expanded here, before any run loads it
  auto plain = train_ok(ejected(shorthand)).parameters;

  SUBCASE("factor 1 changes nothing") {
    // Multiplying by 1.0f is exact and everything else runs the same sums in the same
    // order on one device, so the parameters agree bit for bit.
    auto scaled = train_ok(read(ejected_with_scaler(shorthand, 0, 1.0))).parameters;
    CHECK(scaled == plain);
  }
  SUBCASE("factor 0 freezes the layer it serves, and only that one") {
    // SGD without momentum or weight decay: p - lr * 0 = p exactly, every step.
    auto scaled = train_ok(read(ejected_with_scaler(shorthand, 0, 0.0))).parameters;
    CHECK(scaled.at(0) == initial_parameters(shorthand, 0));
    CHECK(plain.at(0) != initial_parameters(shorthand, 0));
    CHECK(scaled.at(3) != initial_parameters(shorthand, 3));
  }
  SUBCASE("a factor of another type is refused before the run starts") {
    auto text = ejected_with_scaler(shorthand, 0, 1.0);
    auto at = text.find("factor = 1.0");
    REQUIRE(at != std::string::npos);
    text.replace(at, 12, "factor = \"one\"");
    CHECK_THROWS_WITH_AS(
        train_with_plugin(read(text)),
        doctest::Contains("actor 'scaler' setting 'factor': expected a number, found a string"),
        config_error);
  }
}

TEST_CASE("an exception in a plugin layer's backward ends the run naming where it happened") {
  auto layers = test::linear(6) + test::layer("test_throwing_backward") + test::linear(4);
  auto result = train_with_plugin(parse_config(
      plugin_config_text(test_plugins::faulty(), layers, "[parallel]\nmicrobatches = 2\n"),
      "t.toml"));
  INFO(result.outcome.failure);
  CHECK(result.outcome.exit_code == exit_code::run_failed);
  CHECK(contains(result.outcome.failure, "layer_1 (test_throwing_backward) backward of step 0, "
                                         "micro-batch "));
  CHECK(contains(result.outcome.failure, "the test plugin's backward fails on purpose"));
}

TEST_CASE("a run that an exception ends after tracing started still writes its trace") {
  // The plugin kind reads its settings only when it is spawned (session.cpp): a factor out
  // of its range throws there, after the recorder started. Note [the trace on every path].
  auto shorthand = parse_config(plugin_config_text(test_plugins::good(), scale_model), "s.toml");
  load_config_plugins(shorthand);
  auto config = read(ejected_with_scaler(shorthand, 0, 1e31));
  test::temp_directory d{"troupe-trace-throw"};
  auto options = test::quiet_options();
  options.trace_path = d.file("t.json");
  CHECK_THROWS_AS(run_session(config, options), config_error);
  REQUIRE(std::filesystem::exists(*options.trace_path));
  std::ifstream in(*options.trace_path);
  CHECK(nlohmann::json::parse(in).contains("traceEvents"));
}
