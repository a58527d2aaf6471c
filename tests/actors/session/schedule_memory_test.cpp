// Credits bound memory and choose the schedule (DESIGN.md "Flow control"): a probe layer
// counts the micro-batches it holds (forwards run minus backwards run, on its device's
// stream), and 1F1B must never hold more than P - s at stage s, GPipe exactly M, ZB-H1
// (holding a micro-batch until its weight gradient has run) P at every stage.
#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "actors/session/session.hpp"
#include "runtime/model/layer.hpp"
#include "tests/actors/session_support.hpp"
#include "tests/config_text.hpp"

using namespace troupe;

namespace {

struct occupancy {
  int live = 0;
  int most = 0;
};

std::mutex probes_mutex;
std::map<std::string, occupancy> probes;  // by the probe's `id` setting

void count_held(const std::string& id) {
  std::lock_guard<std::mutex> guard{probes_mutex};
  auto& o = probes[id];
  o.most = std::max(o.most, ++o.live);
}

void count_released(const std::string& id) {
  std::lock_guard<std::mutex> guard{probes_mutex};
  --probes[id].live;
}

// An identity layer that records how many micro-batches it holds between forward and
// backward. Forward and backward run on its device's stream, in stream order.
class stash_probe final : public layer {
 public:
  explicit stash_probe(layer_settings& s) : id_(s.text("id", "", {})) {}
  std::string type() const override { return "test_stash_probe"; }
  shape_t output_shape(const shape_t& input) const override { return input; }
  void forward(const layer_context& context, const std::vector<tensor>&, const tensor& x, const tensor& y,
               std::vector<tensor>&) const override {
    std::copy(x.f32(), x.f32() + x.numel(), y.f32());
    if (context.training)
      count_held(id_);
  }
  void backward(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>&,
                const tensor& dy, tensor* dx, std::vector<tensor>&, bool) const override {
    if (dx != nullptr)
      std::copy(dy.f32(), dy.f32() + dy.numel(), dx->f32());
    count_released(id_);
  }

 private:
  std::string id_;
};

TROUPE_REGISTER_LAYER("test_stash_probe", "counts held micro-batches (tests)",
                      [](layer_settings& s) { return std::make_unique<stash_probe>(s); });

// The same with one parameter and a split backward: under ZB-H1 it holds a micro-batch
// from its forward until its weight gradient has run (the input gradient runs first).
class split_stash_probe final : public layer {
 public:
  explicit split_stash_probe(layer_settings& s) : id_(s.text("id", "", {})) {}
  std::string type() const override { return "test_split_stash_probe"; }
  shape_t output_shape(const shape_t& input) const override { return input; }
  std::vector<param_spec> parameters(const shape_t&) const override {
    return {{"unused", {1}, init_kind::zeros, 1, 1}};
  }
  void forward(const layer_context& context, const std::vector<tensor>&, const tensor& x,
               const tensor& y, std::vector<tensor>&) const override {
    std::copy(x.f32(), x.f32() + x.numel(), y.f32());
    if (!context.training)
      return;
    count_held(id_);
    // Forwards and input gradients that take a while keep the main lanes busy, so that
    // weight gradients are deferred and the limit is what bounds them.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  void backward(const layer_context& context, const std::vector<tensor>& params,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>& grads, bool accumulate) const override {
    if (dx != nullptr)
      backward_input(context, params, saved, dy, *dx);
    backward_weight(context, params, saved, dy, grads, accumulate);
  }
  bool splits_backward() const override { return true; }
  void backward_input(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>&,
                      const tensor& dy, const tensor& dx) const override {
    std::copy(dy.f32(), dy.f32() + dy.numel(), dx.f32());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  void backward_weight(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>&,
                       const tensor&, std::vector<tensor>& grads, bool) const override {
    grads[0].f32()[0] = 0;
    count_released(id_);
  }

 private:
  std::string id_;
};

TROUPE_REGISTER_LAYER("test_split_stash_probe", "counts held micro-batches, split (tests)",
                      [](layer_settings& s) { return std::make_unique<split_stash_probe>(s); });

// P = 3 stages, each a linear layer and a split probe, M = 6 micro-batches.
std::map<std::string, occupancy> run_split_pipeline(const std::string& schedule) {
  {
    std::lock_guard<std::mutex> guard{probes_mutex};
    probes.clear();
  }
  auto probe = [](int s) {
    return test::layer("test_split_stash_probe", "id = \"stage " + std::to_string(s) + "\"\n");
  };
  auto text = R"(
[run]
steps = 6
evaluate = false
)" + test::data_section({48, 480, 8, 12, 3}) +
              test::linear(8) + probe(0) + test::linear(8) + probe(1) + test::linear(3) + probe(2) +
              R"(
[parallel]
devices = ["cpu:0", "cpu:1", "cpu:2"]
stages = [[0, 1], [2, 3], [4, 5]]
microbatches = 6
schedule = ")" +
              schedule + "\"\n";
  auto config = parse_config(text, "memory.toml");
  test::run_ok(config, test::quiet_options());
  std::lock_guard<std::mutex> guard{probes_mutex};
  return probes;
}

std::map<std::string, occupancy> run_pipeline(const std::string& schedule) {
  {
    std::lock_guard<std::mutex> guard{probes_mutex};
    probes.clear();
  }
  auto text = R"(
[run]
steps = 6
evaluate = false
)" + test::data_section({32, 256, 8, 12, 3}) +
              test::linear(8) + test::layer("test_stash_probe", "id = \"stage 0\"\n") +
              test::linear(3) + test::layer("test_stash_probe", "id = \"stage 1\"\n") + R"(
[parallel]
devices = ["cpu:0", "cpu:1"]
stages = [[0, 1], [2, 3]]
microbatches = 4
schedule = ")" + schedule + "\"\n";
  auto config = parse_config(text, "memory.toml");
  test::run_ok(config, test::quiet_options());
  std::lock_guard<std::mutex> guard{probes_mutex};
  return probes;
}

}  // namespace

TEST_CASE("1F1B never holds more than P - s micro-batches at stage s") {
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto held = run_pipeline("1f1b");
    CHECK(held["stage 0"].most <= 2);
    CHECK(held["stage 1"].most <= 1);
    CHECK(held["stage 0"].live == 0);
    CHECK(held["stage 1"].live == 0);
  }
}

TEST_CASE("GPipe holds all M micro-batches of a step at every stage") {
  auto held = run_pipeline("gpipe");
  CHECK(held["stage 0"].most == 4);
  CHECK(held["stage 1"].most == 4);
  CHECK(held["stage 0"].live == 0);
}

TEST_CASE("ZB-H1 holds at most P micro-batches at each stage until their weight gradients ran") {
  // 1F1B's peak (P, at stage 0) everywhere: later stages may defer weight gradients up to
  // it, and a forward that would pass it first hurries the oldest of them.
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto held = run_split_pipeline("zb-h1");
    for (const char* stage : {"stage 0", "stage 1", "stage 2"}) {
      INFO(stage);
      CHECK(held[stage].most <= 3);
      CHECK(held[stage].most >= 1);
      CHECK(held[stage].live == 0);
    }
  }
  // The same probes under 1F1B hold P - s (their weight gradient runs with their backward).
  auto held = run_split_pipeline("1f1b");
  CHECK(held["stage 0"].most <= 3);
  CHECK(held["stage 1"].most <= 2);
  CHECK(held["stage 2"].most <= 1);
}

TEST_CASE("interleaved 1F1B never holds more than Megatron's bound on a device") {
  // P = 2 devices, v = 2 stages each; each stage starts with a probe, so the probes of
  // stages 0 and 2 (device 0) count what device 0 holds, those of 1 and 3 device 1's.
  // The bound is 2 (P - d - 1) + (v - 1) P + 1: 5 on device 0, 3 on device 1, where
  // per-wire credits of 1F1B over 4 stages would allow 4 + 2 and 3 + 1.
  for (int microbatches : {4, 8}) {
    {
      std::lock_guard<std::mutex> guard{probes_mutex};
      probes.clear();
    }
    auto stage = [](int device, int features) {
      return test::layer("test_stash_probe", "id = \"device " + std::to_string(device) + "\"\n") +
             test::linear(features);
    };
    auto text = R"(
[run]
steps = 6
evaluate = false
)" + test::data_section({32, 256, 8, 12, 3}) +
                stage(0, 8) + stage(1, 8) + stage(0, 8) + stage(1, 3) + R"(
[parallel]
devices = ["cpu:0", "cpu:1"]
stages = [[0, 1], [2, 3], [4, 5], [6, 7]]
virtual_stages = 2
microbatches = )" + std::to_string(microbatches) +
                "\nschedule = \"1f1b\"\n";
    test::run_ok(parse_config(text, "memory.toml"), test::quiet_options());
    std::lock_guard<std::mutex> guard{probes_mutex};
    INFO("M = " << microbatches);
    CHECK(probes["device 0"].most <= 5);
    CHECK(probes["device 1"].most <= 3);
    // The schedule's warm-up fills the bound: device 1 always reaches it (its warm-up is
    // the group of P forwards of chunk 0 and one of chunk 1, which never wait for it).
    CHECK(probes["device 1"].most == 3);
    CHECK(probes["device 0"].live == 0);
    CHECK(probes["device 1"].live == 0);
  }
}
