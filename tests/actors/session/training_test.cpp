// Whole runs through the actors on synthetic data: learning, metrics, determinism and
// failures that end the run cleanly.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "actors/base/device_scheduler.hpp"
#include "actors/session/session.hpp"
#include "runtime/model/layer.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"
#include "tests/jsonl.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;

namespace {

std::string synthetic_config(const std::string& extra_layers = "", const std::string& run = "") {
  return R"(
[run]
epochs = 2
seed = 7
)" + run + test::data_section({64, 2048, 1000, 64, 4, 500}) + "\n" + test::linear(32) +
         extra_layers + "\n" + test::layer("relu") + "\n" + test::linear(4) + R"(
[optimizer]
type = "adam"
lr = 0.01
)";
}

using troupe::test::read_jsonl;

std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

std::string training_temp(const std::string& name) {
  return troupe::test::temp_file("troupe_test_" + name);
}

}  // namespace

TEST_CASE("an MLP trained through actors separates synthetic data with over 95% accuracy") {
  auto config = parse_config(synthetic_config(), "synthetic.toml");
  auto options = test::quiet_options(training_temp("metrics.jsonl"));
  auto result = test::run_ok(config, options);
  const auto& outcome = result.outcome;
  INFO(outcome.failure);
  CHECK(outcome.steps == 2 * (2048 / 64));
  CHECK(outcome.test_accuracy > 0.95);

  auto records = read_jsonl(*options.metrics_path);
  int steps = 0, evaluations = 0, done = 0;
  double first_loss = -1, last_loss = -1;
  for (const auto& r : records) {
    if (r.contains("test_accuracy") && r.contains("test_loss")) {
      ++evaluations;
      CHECK(r["test_accuracy"].get<double>() >= 0.0);
      CHECK(r["test_accuracy"].get<double>() <= 1.0);
    } else if (r.contains("event")) {
      ++done;
      CHECK(r["event"] == "done");
    } else {
      for (const char* key : {"step", "epoch", "loss", "accuracy", "lr", "samples_per_s"})
        CHECK(r.contains(key));
      CHECK(r["step"].get<int>() == steps);
      if (first_loss < 0)
        first_loss = r["loss"].get<double>();
      last_loss = r["loss"].get<double>();
      ++steps;
    }
  }
  CHECK(steps == 64);
  CHECK(evaluations == 2);
  CHECK(done == 1);
  CHECK(last_loss < 0.5 * first_loss);
}

TEST_CASE("two runs with the same seed end with the same parameters") {
  auto config = parse_config(synthetic_config("", "steps = 10\nevaluate = false\n"),
                             "synthetic.toml");
  auto options = test::quiet_options(training_temp("determinism.jsonl"));
  options.keep_parameters = true;
  auto a = run_session(config, options);
  auto b = run_session(config, options);
  REQUIRE(a.outcome.exit_code == exit_code::ok);
  REQUIRE(a.parameters.size() == 3);
  CHECK(a.parameters[0].size() == 2);  // weight and bias
  CHECK(a.parameters[1].empty());      // relu has none
  CHECK(a.parameters == b.parameters);
  config.run.seed = 8;
  auto c = run_session(config, options);
  CHECK(c.parameters != a.parameters);
}

namespace {

// A layer that throws in forward at step 3, to test that failures end the run.
class failing_layer final : public layer {
 public:
  std::string type() const override { return "test_failing"; }
  shape_t output_shape(const shape_t& input) const override { return input; }
  void forward(const layer_context&, const std::vector<tensor>&, const tensor& x, const tensor& y,
               std::vector<tensor>&) const override {
    if (++calls_ == 4)
      throw std::runtime_error("deliberate failure");
    std::copy(x.f32(), x.f32() + x.numel(), y.f32());
  }
  void backward(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>&,
                const tensor& dy, tensor* dx, std::vector<tensor>&, bool) const override {
    if (dx != nullptr)
      std::copy(dy.f32(), dy.f32() + dy.numel(), dx->f32());
  }

 private:
  mutable int calls_ = 0;
};

TROUPE_REGISTER_LAYER("test_failing", "throws in its 4th forward",
                      [](layer_settings&) { return std::make_unique<failing_layer>(); });

}  // namespace

TEST_CASE(
    "the host thread takes the trainer's turns only: the loader handles its messages on its "
    "device") {
  // A message to the sleeping host thread costs its sender a wake-up (16 us a notify on the
  // development VM, on the device's thread); the loader's credits came back that way, once
  // a micro-batch. Now the host takes a loss report a step and replica (the sums of its
  // micro-batches) and the trainer's other turns (about one a step): 60 turns here, 163
  // with the loader on the host.
  constexpr std::size_t steps = 20;
  auto config = parse_config(
      synthetic_config("", "steps = 20\nevaluate = false\n") +
          "\n[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\nmicrobatches = 2\n",
      "synthetic.toml");
  std::vector<std::int64_t> turns;
  {
    struct recording {  // until the session has ended, however it ends
      explicit recording(std::vector<std::int64_t>* into) {
        device_scheduler::record_host_turns(into);
      }
      ~recording() { device_scheduler::record_host_turns(nullptr); }
    } recorded{&turns};
    test::run_ok(config, test::quiet_options());
  }
  const std::size_t reports = steps * 2;
  INFO("host turns: " << turns.size());
  CHECK(turns.size() >= reports);
  CHECK(turns.size() <= reports + steps + 10);
}

TEST_CASE("an exception in a layer ends the run with the actor, layer, step and micro-batch") {
  auto config = parse_config(
      synthetic_config("\n[[model.layers]]\ntype = \"test_failing\"\n", "evaluate = false\n"),
      "synthetic.toml");
  auto options = test::quiet_options(training_temp("failure.jsonl"));
  auto threads_before = thread_count();
  auto result = run_session(config, options);
  // No orphan threads: the device streams and the scheduler's threads are gone with the session.
  CHECK(thread_count() == threads_before);
  CHECK(result.outcome.exit_code == exit_code::run_failed);
  CHECK(result.outcome.failure.find("layer_1 (test_failing) forward of step 3, micro-batch 0") !=
        std::string::npos);
  CHECK(result.outcome.failure.find("deliberate failure") != std::string::npos);
  auto records = read_jsonl(*options.metrics_path);
  REQUIRE_FALSE(records.empty());
  CHECK(records.back()["event"] == "failed");
}

TEST_CASE("a model whose output does not match the classes is an error at its last layer") {
  auto text = synthetic_config();
  text.replace(text.rfind("out = 4"), 7, "out = 5");
  auto config = parse_config(text, "synthetic.toml");
  test::check_refused(config, "synthetic.toml:22:1: the model's output shape (5) must be (4)");
}
