// plugin_command_test.cpp: --plugin and [run] plugins on the command line, with the test
// plugins CMake builds (tests/plugins/): listings, check-layer's verdicts, and the exit
// codes and messages of plugins that do not load (2, bad input) and of a plugin layer
// that breaks a run (1).
#include <doctest/doctest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli/run_troupe.hpp"
#include "tests/config_text.hpp"
#include "tests/plugins/test_plugins.hpp"
#include "tests/sanitizers.hpp"
#include "tests/text_checks.hpp"

namespace {

using troupe::testing::run_troupe;
using troupe::testing::write_config;

/// A two-step run of linear -> `layer` -> linear, loading `plugin` through [run] plugins.
std::string run_config_with(const std::string& plugin, const std::string& layer) {
  return R"(
[run]
steps = 2
evaluate = false
metrics = ""
plugins = [")" + plugin + "\"]\n" + troupe::test::data_section({8, 32, 8, 5, 3}) +
         troupe::test::linear(4) + troupe::test::layer(layer) + troupe::test::linear(3);
}

using troupe::test::contains;

}  // namespace

TEST_CASE("troupe layers --plugin lists the plugin's layer and actor kind with its wires") {
  auto r = run_troupe("layers --plugin " + test_plugins::good());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(contains(r.output, "test_scale"));
  CHECK(contains(r.output, "test_grad_scaler"));
  CHECK(contains(r.output, "(accepts grads; emits grads)"));
  CHECK(contains(r.output, "linear"));  // the built-in ones are still there
  // What the plugin added is marked with its name; troupe's own entries are not.
  CHECK(contains(r.output, "test_scale         [plugin troupe_test_plugin] y = a * x"));
  CHECK(contains(r.output, "test_grad_scaler   [plugin troupe_test_plugin] "));
  CHECK(contains(r.output, "test_margin        [plugin troupe_test_plugin] "));
  CHECK(contains(r.output, "linear             fully connected"));
}

TEST_CASE("troupe check-layer passes a plugin's layer and fails its broken variant") {
  auto good = run_troupe("check-layer test_scale --plugin " + test_plugins::good());
  INFO(good.output);
  CHECK(good.exit_code == 0);
  CHECK(contains(good.output, "PASS"));
  auto broken = run_troupe("check-layer test_wrong_gradient --plugin " + test_plugins::faulty());
  INFO(broken.output);
  CHECK(broken.exit_code == 1);
  CHECK(contains(broken.output, "FAIL dx["));
}

TEST_CASE("troupe check-layer fails each deliberately broken layer at its defaults, without a crash") {
  // tests/plugins/broken_layers_plugin.cpp: wrong in one way each, some only by 0.01 * dy.
  for (const std::string layer :
       {"test_leaky_no_slope", "test_leaky_wrong_sign", "test_tanh_missing_leak",
        "test_dense_transposed", "test_dense_overwrites", "test_dense_bias_mean",
        "test_writes_null_dx", "test_dense_needs_dx"}) {
    auto r = run_troupe("check-layer " + layer + " --plugin " + test_plugins::broken_layers());
    INFO(layer << ": " << r.output);
    CHECK(r.exit_code == 1);
    CHECK(contains(r.output, "\nFAIL"));
    CHECK(contains(r.output, "worst element: "));
  }
  // A first layer's dx is null: writing through it is named, in a child, not a bare crash.
  auto r = run_troupe("check-layer test_writes_null_dx --plugin " + test_plugins::broken_layers());
  CHECK(contains(r.output, "FAIL backward wrote to dx, which is null for a first layer"));
  if (!troupe::testing::under_sanitizer)  // AddressSanitizer's handler ends the child instead
    CHECK(contains(r.output, "Segmentation fault"));
  // The correct one passes, at its default slope and at two drawn ones.
  auto right = run_troupe("check-layer test_leaky_right --plugin " + test_plugins::broken_layers());
  INFO(right.output);
  CHECK(right.exit_code == 0);
  CHECK(contains(right.output, "at the given settings, slope = "));
}

// Exit code 2, not 139: a library without TROUPE_PLUGIN that registers layers once crashed
// the process at exit, after its refusal (its registrations ran its unmapped code).
TEST_CASE("a plugin that does not load is bad input: exit code 2 and what went wrong") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/no/such/plugin.so", "error: plugin '/no/such/plugin.so' does not exist"},
      {test_plugins::not_a_plugin(), "is not a troupe plugin"},
      {test_plugins::abi_mismatch(), "was built against troupe ABI version"},
      {test_plugins::clashing(), "layer type 'linear' is registered twice"},
      {test_plugins::throwing_registration(), "this registration fails on purpose"},
  };
  for (const auto& [plugin, message] : cases) {
    const std::string& path = plugin;  // not a binding: INFO's lambda captures it (clang 14)
    for (const std::string command : {"layers", "check-layer linear --set out=2"}) {
      auto r = run_troupe(command + " --plugin " + path);
      INFO(command << " --plugin " << path << ": " << r.output);
      CHECK(r.exit_code == 2);
      CHECK(contains(r.output, message));
    }
  }
}

TEST_CASE("a [run] plugins entry that does not load is a config error at that entry") {
  auto config = write_config("missing_plugin", run_config_with("no_such_plugin.so", "relu"));
  auto r = run_troupe("run " + config);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output, config + ":6:"));  // the entry's line in the file
  CHECK(contains(r.output, "no_such_plugin.so' does not exist"));
}

TEST_CASE("an unknown layer type names the plugin's layers and the nearest one") {
  auto r = run_troupe("check-layer test_scal --plugin " + test_plugins::good());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output, "unknown layer type 'test_scal'; did you mean 'test_scale'?"));
  CHECK(contains(r.output, "registered: "));
}

TEST_CASE("troupe run of a plugin layer whose backward throws exits 1 naming where") {
  auto config = write_config("throwing",
                             run_config_with(test_plugins::faulty(), "test_throwing_backward"));
  auto r = run_troupe("run " + config);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "(test_throwing_backward) backward of step 0, micro-batch 0"));
  CHECK(contains(r.output, "fails on purpose"));
}

TEST_CASE("a run whose plugin layer writes to a null dx crashes with a word on what to check") {
  // The first layer gets no dx; test_writes_null_dx writes it anyway. check-layer names that
  // (above); a run still crashes, but says how to find the layer.
  auto config = write_config("null_dx", R"(
[run]
steps = 1
evaluate = false
metrics = ""
plugins = [")" + test_plugins::broken_layers() + "\"]\n" +
                                            troupe::test::data_section({8, 16, 8, 5, 3}) +
                                            troupe::test::layer("test_writes_null_dx") +
                                            troupe::test::linear(3));
  auto r = run_troupe("run " + config + " -q");
  INFO(r.output);
  CHECK(r.exit_code != 0);
  if (!troupe::testing::under_sanitizer) {
    CHECK(r.exit_code == 128 + SIGSEGV);  // the signal's usual end, through the shell
    CHECK(contains(r.output, "troupe: crashed (Segmentation fault)"));
    CHECK(contains(r.output, "troupe check-layer NAME --plugin PATH"));
  }
}
