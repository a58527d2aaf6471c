// broken_layers_test.cpp: the gradient check against layers that are wrong in one way each
// (tests/plugins/broken_layers_plugin.cpp): every one fails at its default settings, with
// the failure that names what is wrong; the correct leaky ReLU beside them passes.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "runtime/model/layer_check.hpp"
#include "tests/plugins/test_plugins.hpp"
#include "tests/text_checks.hpp"

using namespace troupe;

namespace {

using test_plugins::layer_of_type;

std::string all_failures(const gradient_check_result& result) {
  std::string text;
  for (const auto& failure : result.failures)
    text += failure + "\n";
  return text;
}

using troupe::test::contains;

}  // namespace

TEST_CASE("the gradient check fails every deliberately broken layer, naming what is wrong") {
  load_plugin(test_plugins::broken_layers());
  const std::vector<std::pair<std::string, std::string>> broken = {
      {"test_leaky_no_slope", "dx["},
      {"test_leaky_wrong_sign", "dx["},
      {"test_tanh_missing_leak", "dx["},
      {"test_dense_transposed", "dweight["},
      {"test_dense_overwrites", "dweight: backward with accumulate = true does not add"},
      {"test_dense_bias_mean", "dbias["},
      {"test_writes_null_dx", "backward wrote to dx, which is null for a first layer"},
      {"test_dense_needs_dx", "backward with dx = null (a first layer's) computed other "
                              "parameter gradients than with a dx"},
  };
  for (const auto& [type, failure] : broken)
    for (std::uint64_t seed : {1, 2, 3}) {
      const std::string& name = type;  // not a binding: INFO's lambda captures it (clang 14)
      gradient_check_options options;
      options.seed = seed;
      auto result = check_layer_gradients(layer_of_type(name), options);
      INFO(name << " (seed " << seed << "): " << result.summary << "\n" << all_failures(result));
      CHECK_FALSE(result.passed);
      CHECK(contains(all_failures(result), failure));
    }
}

TEST_CASE("errors small in scale fail element by element, without drawing other settings") {
  // At the default slope 0.01 a dropped or negated slope term is 1% of the gradient's scale;
  // the per-element comparison catches it on its own.
  load_plugin(test_plugins::broken_layers());
  gradient_check_options options;
  options.vary_settings = false;
  for (const char* type : {"test_leaky_no_slope", "test_leaky_wrong_sign"}) {
    auto result = check_layer_gradients(layer_of_type(type), options);
    INFO(type << ": " << result.summary);
    CHECK_FALSE(result.passed);
    CHECK(result.checked.empty());
    CHECK(result.worst_relative > 0.9);  // the slope term is the whole gradient there
    CHECK(contains(result.summary, "worst element: dx["));
  }
}

TEST_CASE("a correct layer with a declared range passes at its default and at drawn settings") {
  load_plugin(test_plugins::broken_layers());
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    gradient_check_options options;
    options.seed = seed;
    auto result = check_layer_gradients(layer_of_type("test_leaky_right"), options);
    INFO(result.summary << "\n" << all_failures(result));
    CHECK(result.passed);
    // slope's default is 0.01 in [0, 1]: drawn above it and below (kept in the range).
    REQUIRE(result.checked.size() == 2);
    CHECK(contains(result.checked[0], "slope = "));
    CHECK(result.worst_ratio <= 1);
  }
  // A setting the config gives is checked as given, not drawn.
  auto given = layer_of_type("test_leaky_right");
  given.settings["slope"] = setting_value{0.2, given.where};
  auto result = check_layer_gradients(given, gradient_check_options{});
  CHECK(result.passed);
  CHECK(result.checked.empty());
}
