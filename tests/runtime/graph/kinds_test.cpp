// kinds_test.cpp: the enums a config chooses from (runtime/config/choices.hpp) and the graph's
// kinds (runtime/graph/kinds.hpp): each value's name parses back to it, nothing else parses,
// and an unknown name in a config is a config error with did-you-mean at its position.
#include "runtime/graph/kinds.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>

#include "tests/runtime/graph/test_configs.hpp"

using namespace troupe;

namespace {

template <class Enum>
void check_round_trip(std::size_t count) {
  CHECK(enum_values<Enum>::all.size() == count);
  std::set<std::string> names;
  for (auto value : enum_values<Enum>::all) {
    const std::string name = to_string(value);
    INFO("name " << name);
    CHECK(parse_enum<Enum>(name) == value);
    CHECK(names.insert(name).second);  // names are distinct
    CHECK_FALSE(parse_enum<Enum>(name + " ").has_value());
    CHECK_FALSE(parse_enum<Enum>(" " + name).has_value());
  }
  CHECK_FALSE(parse_enum<Enum>("").has_value());
}

}  // namespace

TEST_CASE("every choice and kind parses back from its name, and nothing else parses") {
  check_round_trip<data_source>(9);
  check_round_trip<optimizer_type>(3);
  check_round_trip<lr_schedule_type>(3);
  check_round_trip<pipeline_schedule>(3);
  check_round_trip<averaging_method>(3);
  check_round_trip<actor_kind>(5);
  check_round_trip<wire_kind>(5);
  CHECK(enum_names<data_source>() ==
        std::vector<std::string>{"fashion-mnist", "synthetic", "text", "npy", "csv", "tokens", "images", "npz",
                                 "safetensors"});
  CHECK(enum_names<optimizer_type>() == std::vector<std::string>{"sgd", "adam", "adamw"});
  CHECK(enum_names<pipeline_schedule>() == std::vector<std::string>{"gpipe", "1f1b", "zb-h1"});
  CHECK(enum_names<averaging_method>() == std::vector<std::string>{"ring", "central", "gloo"});
  CHECK(enum_names<wire_kind>() ==
        std::vector<std::string>{"activations", "labels", "grads", "ring", "params"});
  CHECK_FALSE(parse_enum<optimizer_type>("SGD").has_value());
  CHECK_FALSE(parse_enum<pipeline_schedule>("one_f_one_b").has_value());
  CHECK_FALSE(parse_enum<pipeline_schedule>("zb_h1").has_value());
}

TEST_CASE(
    "custom is not an actor kind a config can name, and a plan's custom kind keeps its name") {
  CHECK_FALSE(parse_enum<actor_kind>("custom").has_value());
  actor_plan plan;
  plan.kind = actor_kind::custom;
  plan.custom_kind = "grad_clipper";
  CHECK(plan.kind_name() == "grad_clipper");
  plan.kind = actor_kind::averager;
  CHECK(plan.kind_name() == "averager");
}

TEST_CASE("an unknown optimizer, schedule or averaging name is a config error with did-you-mean") {
  using namespace topology_test;
  auto error_of = [](const std::string& text) -> std::string {
    try {
      parse_config(text, "t.toml");
    } catch (const config_error& error) {
      return error.where().to_string() + ": " + error.what();
    }
    return "no error";
  };
  const std::string model = "[model]\n[[model.layers]]\ntype = \"linear\"\n";
  CHECK(error_of(header + model + "[optimizer]\ntype = \"sdg\"\n")
            .find("t.toml:10:8: unknown optimizer type 'sdg'; did you mean 'sgd'? (expected "
                  "one of 'sgd', 'adam', 'adamw')") != std::string::npos);
  CHECK(error_of(header + model + "[optimizer.schedule]\ntype = \"cosin\"\n")
            .find("t.toml:10:8: unknown schedule type 'cosin'; did you mean 'cosine'?") !=
        std::string::npos);
  CHECK(error_of(header + model + "[parallel]\nschedule = \"1fb1\"\n")
            .find("t.toml:10:12: unknown pipeline schedule '1fb1'") != std::string::npos);
  CHECK(error_of(header + model + "[parallel]\naveraging = \"centrl\"\n")
            .find("t.toml:10:13: unknown gradient averaging 'centrl'; did you mean 'central'?") !=
        std::string::npos);
  CHECK(error_of(header + model + "[parallel]\naveraging = \"glo\"\n")
            .find("t.toml:10:13: unknown gradient averaging 'glo'; did you mean 'gloo'? (expected "
                  "one of 'ring', 'central', 'gloo', 'local_sgd', 'diloco', 'async')") !=
        std::string::npos);
}
