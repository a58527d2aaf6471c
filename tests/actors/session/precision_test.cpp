// precision_test.cpp: whole runs in [run] precision = "bf16": they train, they hold to one
// device across wirings (troupe verify's bf16 tolerance), a layer kept in fp32 computes
// exactly what an fp32 run does, and checkpoints keep the fp32 masters, resuming bit for bit
// in bf16 and in fp32.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "actors/session/session.hpp"
#include "actors/tools/verify.hpp"
#include "kernels/cpu/onednn_matmul.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "runtime/trace_tools/summary.hpp"
#include "runtime/trace_tools/trace_file.hpp"
#include "tests/actors/equivalence_support.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "tests/jsonl.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;

namespace {

using parameters = std::vector<std::vector<std::vector<float>>>;

bool have_bf16() {
  if (kernels::cpu::onednn_has_bf16())
    return true;
  MESSAGE("skipped: this CPU has no native bf16 (oneDNN: " << kernels::cpu::onednn_isa_name()
                                                           << "), where precision = \"bf16\" "
                                                              "is refused");
  return false;
}

// An MLP on synthetic data: `precision` for the run, `layer_keys` added to each linear layer,
// `parallel` the [parallel] lines.
std::string mlp(const std::string& precision, const std::string& layer_keys = "",
                const std::string& parallel = "") {
  auto linear = [&](int out) {
    return test::layer("linear", "out = " + std::to_string(out) + "\n" + layer_keys);
  };
  return "[run]\nsteps = 30\nseed = 3\nevaluate = false\nprecision = \"" + precision + "\"\n" +
         test::data_section({64, 1024, 256, 48, 6}) + "\n[model]\n" + linear(64) +
         test::layer("relu") + linear(32) + test::layer("tanh") + linear(6) +
         "\n[optimizer]\ntype = \"adam\"\nlr = 3e-3\n\n[parallel]\n" + parallel;
}

// A small sequence model (layer_norm, causal attention, a per-position linear, gelu, a
// classifier) on synthetic samples read as 6 positions of 8 features.
std::string attention_model(const std::string& precision, const std::string& parallel = "") {
  return "[run]\nsteps = 30\nseed = 5\nevaluate = false\nprecision = \"" + precision + "\"\n" +
         test::data_section({24, 480, 10, 48, 4}) + "\n[model]\n" +
         test::layer("unflatten", "positions = 6\nfeatures = 8\n") + test::layer("layer_norm") +
         test::layer("attention", "heads = 2\n") + test::linear(8) + test::layer("gelu") +
         test::layer("flatten") + test::linear(4) +
         "\n[optimizer]\ntype = \"adam\"\nlr = 0.01\n\n[parallel]\n" + parallel;
}

struct outcome {
  parameters params;
  std::vector<double> losses;
};

outcome train_in_precision(const std::string& text, const std::string& resume = "",
                           const std::string& checkpoints = "", std::int64_t steps = 30) {
  test::temp_directory d{"troupe-precision"};
  const auto metrics = d.file("m.jsonl");
  auto config = parse_config(text, d.file("p.toml"));
  config.run.steps = steps;
  config.run.checkpoint = checkpoints;
  auto options = test::quiet_options(metrics);
  options.keep_parameters = true;
  options.resume = resume;
  outcome out;
  out.params = test::run_ok(config, options).parameters;
  std::ifstream in(metrics);
  for (const auto& r : test::read_jsonl(in))
    if (r.contains("loss") && !r.contains("event"))
      out.losses.push_back(r["loss"].get<double>());
  return out;
}

}  // namespace

TEST_CASE("an MLP trains in bf16 as in fp32, up to bf16's rounding") {
  if (!have_bf16())
    return;
  const auto fp32 = train_in_precision(mlp("fp32")), bf16 = train_in_precision(mlp("bf16"));
  REQUIRE(fp32.losses.size() == 30);
  REQUIRE(bf16.losses.size() == 30);
  // The same first batch through weights rounded to bf16: within a few bf16 units (2^-8) of
  // fp32's loss; and after 30 steps it has learnt as much (the loss falls alike).
  CHECK(std::fabs(bf16.losses[0] - fp32.losses[0]) <= 0.02 * fp32.losses[0]);
  CHECK(bf16.losses[0] != fp32.losses[0]);  // it did compute in bf16
  const double fall32 = fp32.losses[0] - fp32.losses.back();
  const double fall16 = bf16.losses[0] - bf16.losses.back();
  CHECK(fall32 > 0.1 * fp32.losses[0]);
  CHECK(std::fabs(fall16 - fall32) <= 0.1 * fall32);
}

TEST_CASE("an attention model trains in bf16 as in fp32, and holds to one device across wirings") {
  if (!have_bf16())
    return;
  const auto fp32 = train_in_precision(attention_model("fp32"));
  const auto bf16 = train_in_precision(attention_model("bf16"));
  REQUIRE(fp32.losses.size() == 30);
  REQUIRE(bf16.losses.size() == 30);
  CHECK(std::fabs(bf16.losses[0] - fp32.losses[0]) <= 0.02 * fp32.losses[0]);
  CHECK(bf16.losses[0] != fp32.losses[0]);  // attention and linear computed in bf16
  const double fall32 = fp32.losses[0] - fp32.losses.back();
  const double fall16 = bf16.losses[0] - bf16.losses.back();
  CHECK(fall32 > 0.1 * fp32.losses[0]);
  CHECK(std::fabs(fall16 - fall32) <= 0.1 * fall32);
  for (const std::string parallel :
       {"devices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n",
        "devices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 2], [3, 6]]\nmicrobatches = 4\n"}) {
    CAPTURE(parallel);
    const auto config = parse_config(attention_model("bf16", parallel), "bf16.toml");
    const auto result = verify_against_single_device(config, 10, default_tolerance(config));
    CHECK(result.passed);
    MESSAGE("worst relative difference " << result.worst);
  }
}

TEST_CASE("a bf16 run with every linear layer kept in fp32 is the fp32 run, bit for bit") {
  if (!have_bf16())
    return;
  CHECK(train_in_precision(mlp("bf16", "precision = \"fp32\"\n")).params ==
        train_in_precision(mlp("fp32")).params);
}

TEST_CASE("DP2 and a pipeline in bf16 hold to one device in bf16 within verify's bf16 tolerance") {
  if (!have_bf16())
    return;
  for (const std::string parallel :
       {"devices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n",
        "devices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\nmicrobatches = 4\n"}) {
    CAPTURE(parallel);
    const auto config = parse_config(mlp("bf16", "", parallel), "bf16.toml");
    CHECK(default_tolerance(config) == 1.0 / 256);
    const auto result = verify_against_single_device(config, 10, default_tolerance(config));
    CHECK(result.passed);
    MESSAGE("worst relative difference " << result.worst);
  }
  CHECK(default_tolerance(parse_config(mlp("fp32"), "fp32.toml")) == 1e-5);
}

TEST_CASE("a bf16 run's checkpoint keeps fp32 masters and resumes bit for bit, in bf16 or fp32") {
  if (!have_bf16())
    return;
  test::temp_directory d{"troupe-bf16-resume"};
  const auto root = d.file("checkpoints");
  const auto straight = train_in_precision(mlp("bf16"));
  train_in_precision(mlp("bf16"), "", root, 12);
  const auto latest = latest_checkpoint(root);
  REQUIRE(latest);
  CHECK(train_in_precision(mlp("bf16"), latest->path).params == straight.params);
  // The same masters go on in fp32: the first 12 steps as in bf16, the rest as fp32 steps.
  const auto switched = train_in_precision(mlp("fp32"), latest->path).params;
  CHECK(switched != straight.params);
  CHECK(switched != train_in_precision(mlp("fp32")).params);
}

TEST_CASE("a bf16 run's parameter wires carry 2 bytes a weight element: the optimizer rounds") {
  if (!have_bf16())
    return;
  // Per message: the weight and the bias of layers 0, 2 and 4 (48 -> 64 -> 32 -> 6).
  struct linear {
    std::int64_t index, weight, bias;
  };
  const std::vector<linear> linears = {{0, 48 * 64, 64}, {2, 64 * 32, 32}, {4, 32 * 6, 6}};
  for (const std::string precision : {"fp32", "bf16"}) {
    INFO(precision);
    test::temp_directory d{"troupe-precision-wires"};
    auto config = parse_config(mlp(precision), d.file("p.toml"));
    config.run.steps = 3;
    auto options = test::quiet_options();
    options.trace_path = d.file("trace.json");
    test::run_ok(config, options);
    const auto summary = summarize_trace(load_trace(d.file("trace.json")));
    for (const auto& l : linears) {
      // From its optimizer to the layer (here the fused chain: Note [fused layers]).
      const std::string optimizer = "optimizer_" + std::to_string(l.index);
      INFO(optimizer);
      auto wire = std::find_if(
          summary.wires.begin(), summary.wires.end(),
          [&](const wire_traffic& w) { return w.from == optimizer && w.kind == "params"; });
      REQUIRE(wire != summary.wires.end());
      CHECK(wire->messages == 4);  // versions 0 to 3
      const std::int64_t weight_bytes = precision == "bf16" ? 2 : 4;
      CHECK(wire->bytes == wire->messages * (l.weight * weight_bytes + l.bias * 4));
    }
  }
}

TEST_CASE("a bf16 run's activations and their gradients move in bf16 where both sides take it") {
  if (!have_bf16())
    return;
  // mlp(): linear 0 -> relu 1 -> linear 2 -> tanh 3 -> linear 4 -> loss, unfused so that
  // every pair is a wire. Linear 0 makes bf16 for the relu, which keeps it for linear 2;
  // linear 2 makes f32 for the tanh, which takes f32 only; linear 4 f32 for the loss. Each
  // gradient goes back in the dtype of the x it belongs to (Note [bf16 activations]).
  std::map<std::string, std::map<std::string, std::int64_t>> bytes;  // precision, wire
  for (const std::string precision : {"fp32", "bf16"}) {
    test::temp_directory d{"troupe-precision-activations"};
    auto text = mlp(precision);
    text.insert(text.find("[run]\n") + 6, "fuse_layers = false\n");
    auto config = parse_config(text, d.file("p.toml"));
    config.run.steps = 3;
    auto options = test::quiet_options();
    options.trace_path = d.file("trace.json");
    test::run_ok(config, options);
    for (const auto& w : summarize_trace(load_trace(d.file("trace.json"))).wires)
      if (w.kind == "forward" || w.kind == "backward")
        bytes[precision][w.kind + " " + w.from + " -> " + w.to] += w.bytes;
  }
  const std::map<std::string, bool> halved = {
      {"forward layer_0 -> layer_1", true},   {"forward layer_1 -> layer_2", true},
      {"forward layer_2 -> layer_3", false},  {"forward layer_3 -> layer_4", false},
      {"backward layer_1 -> layer_0", true},  {"backward layer_2 -> layer_1", true},
      {"backward layer_3 -> layer_2", false}, {"backward layer_4 -> layer_3", false}};
  for (const auto& [wire, half] : halved) {
    const std::string name = wire;  // not a binding: INFO's lambda captures it (clang 14)
    INFO(name);
    REQUIRE(bytes["fp32"][name] > 0);
    CHECK(bytes["bf16"][name] * (half ? 2 : 1) == bytes["fp32"][name]);
  }
}

TEST_CASE(
    "DP2 with reduce_dtype = bf16 sends half the ring's bytes and trains near the fp32 ring") {
  // An fp32 run: the reduce's dtype is the ring's alone, and needs no bf16 arithmetic.
  const std::string dp2 = "devices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n";
  std::map<std::string, std::int64_t> ring_bytes;
  std::map<std::string, parameters> trained;
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"fp32", ""},
      {"bf16", "reduce_dtype = \"bf16\"\n"},
      // ZeRO-1 over a ring in bf16, in buckets of 256 floats: the same math.
      {"bf16 sharded", "reduce_dtype = \"bf16\"\nshard_optimizer = true\n"}};
  for (const auto& run : runs) {
    const std::string& reduce = run.first;  // not a binding: INFO's lambda captures it (clang 14)
    const std::string& lines = run.second;
    INFO(reduce);
    test::temp_directory d{"troupe-reduce-dtype"};
    auto config = parse_config(mlp("fp32", "", dp2 + lines), d.file("p.toml"));
    config.run.steps = 10;
    auto options = test::quiet_options();
    options.trace_path = d.file("trace.json");
    options.keep_parameters = true;
    trained[reduce] = test::run_ok(config, options).parameters;
    for (const auto& w : summarize_trace(load_trace(d.file("trace.json"))).wires)
      if (w.kind == "ring")
        ring_bytes[reduce] += w.bytes;
  }
  CHECK(ring_bytes["fp32"] > 0);
  CHECK(ring_bytes["bf16"] * 2 == ring_bytes["fp32"]);
  // Near, not equal: the sums are exact to bf16's rounding (the averager test checks them
  // bit for bit), but Adam moves a parameter by about lr whatever its gradient's size, so a
  // near-zero gradient element whose sign the rounding flips moves it the other way: 1.5%
  // of a tensor's largest magnitude after 10 steps here (AMD EPYC, Haswell kernels); 10%
  // would take most of a tensor's elements moving the wrong way.
  const auto difference = test::largest_difference(trained["fp32"], trained["bf16"]);
  MESSAGE("bf16 reduce vs fp32 reduce after 10 steps: worst relative difference " << difference);
  CHECK(difference > 0);
  CHECK(difference < 0.1);
  CHECK(test::largest_difference(trained["bf16"], trained["bf16 sharded"]) == 0);
}
