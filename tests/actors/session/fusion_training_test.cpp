// fusion_training_test.cpp: fused layers (Note [fused layers] in runtime/graph/fusion.hpp)
// in whole runs: the same parameters bit for bit as each layer alone, in every wiring that
// fuses, and a trace that still shows every layer (its spans inside the fused jobs).
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/config/precision.hpp"
#include "runtime/trace_tools/summary.hpp"
#include "runtime/trace_tools/trace_file.hpp"
#include "tests/actors/equivalence_support.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;

namespace {

std::string unfused(std::string text) {
  const std::string run = "[run]\n";
  const auto at = text.find(run);
  REQUIRE(at != std::string::npos);
  return text.insert(at + run.size(), "fuse_layers = false\n");
}

// The equivalence MLP with a dropout after its tanh: dropout's masks are keyed by its
// layer index, which a fused member must keep.
std::string with_dropout(const std::string& parallel) {
  auto text = test::equivalence_config(parallel);
  const std::string tanh = test::layer("tanh");
  const auto at = text.find(tanh);
  REQUIRE(at != std::string::npos);
  return text.insert(at + tanh.size(), test::layer("dropout", "p = 0.25\n"));
}

}  // namespace

TEST_CASE("fused layers train to the same parameters bit for bit as layers alone") {
  const std::vector<std::pair<const char*, std::string>> wirings = {
      {"one device", ""},
      {"micro-batched (M = 4)", "[parallel]\nmicrobatches = 4\n"},
      {"data parallel, ring (R = 2)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\n"},
      {"data parallel, central (R = 2)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"central\"\n"},
      {"pipeline 1F1B (P = 2, M = 4)",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nmicrobatches = 4\n"
       "schedule = \"1f1b\"\n"},
  };
  for (const auto& [name, parallel] : wirings) {
    const std::string what = name;  // not a binding: INFO's lambda captures it (clang 14)
    INFO(what);
    const auto config = with_dropout(parallel);
    CHECK(test::largest_difference(test::train_twenty_steps(config),
                                   test::train_twenty_steps(unfused(config))) == 0);
  }
}

TEST_CASE("fused layers in bf16 round each member's weights as alone, bit for bit") {
  if (!this_cpu_bf16().native) {
    MESSAGE("skipped: this CPU has no native bf16 ([run] precision = \"bf16\" is refused here)");
    return;
  }
  // Each member's weight is rounded from its own slot of the fused parameters.
  auto config = with_dropout("[parallel]\nmicrobatches = 2\n");
  config.insert(config.find("[run]\n") + 6, "precision = \"bf16\"\n");
  CHECK(test::largest_difference(test::train_twenty_steps(config),
                                 test::train_twenty_steps(unfused(config))) == 0);
}

TEST_CASE("a fused run's trace has one job a pass and every member's span inside it") {
  const auto path = test::temp_file("troupe_fusion_trace.json");
  auto config = parse_config(with_dropout(""), "fusion.toml");
  config.run.steps = 3;
  auto options = test::quiet_options();
  options.trace_path = path;
  REQUIRE(test::run_ok(config, options).outcome.steps == 3);
  std::ifstream in(path);
  const auto trace = nlohmann::json::parse(in);
  // 7 layers fused into one actor: one forward job a step, and a forward part per layer.
  int forward_jobs = 0;
  std::map<std::string, int> forward_parts, backward_parts;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["args"]["phase"] != "train")
      continue;
    if (e["cat"] == "job" && e["name"] == "forward") {
      ++forward_jobs;
      CHECK(e["args"]["actor"] == "layer_0..layer_5");
    }
    if (e["cat"] == "part")
      ++(e["name"] == "forward" ? forward_parts : backward_parts)[e["args"]["actor"]];
  }
  CHECK(forward_jobs == 3);
  // The summary gives each layer its parts as compute (two a step), and the actors' compute
  // adds up to the device's busy time.
  const auto summary = summarize_trace(load_trace(path));
  double compute = 0;
  for (const auto& a : summary.actors) {
    compute += a.compute_us;
    if (a.name.rfind("layer_", 0) == 0 && a.name.find("..") == std::string::npos) {
      INFO(a.name);
      CHECK(a.jobs == 6);
      CHECK(a.compute_us > 0);
    }
  }
  REQUIRE(summary.devices.size() == 1);
  CHECK(compute == doctest::Approx(summary.devices[0].busy_us).epsilon(0.01));
  const std::set<std::string> layers{"layer_0", "layer_1", "layer_2", "layer_3", "layer_4",
                                     "layer_5"};
  REQUIRE(forward_parts.size() == layers.size());
  for (const auto& [layer, count] : forward_parts) {
    CHECK(layers.count(layer) == 1);
    CHECK(count == 3);
    CHECK(backward_parts[layer] == 3);
  }
}
