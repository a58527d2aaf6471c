// Credits bound memory and choose the schedule (DESIGN.md "Flow control"): a probe layer
// counts the micro-batches it holds (forwards run minus backwards run, on its device's
// stream), and 1F1B must never hold more than P - s at stage s, GPipe exactly M.
#include <doctest/doctest.h>

#include <map>
#include <mutex>

#include "actors/session.hpp"
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
    if (!context.training)
      return;
    std::lock_guard<std::mutex> guard{probes_mutex};
    auto& o = probes[id_];
    o.most = std::max(o.most, ++o.live);
  }
  void backward(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>&,
                const tensor& dy, tensor* dx, std::vector<tensor>&, bool) const override {
    if (dx != nullptr)
      std::copy(dy.f32(), dy.f32() + dy.numel(), dx->f32());
    std::lock_guard<std::mutex> guard{probes_mutex};
    --probes[id_].live;
  }

 private:
  std::string id_;
};

TROUPE_REGISTER_LAYER("test_stash_probe", "counts held micro-batches (tests)",
                      [](layer_settings& s) { return std::make_unique<stash_probe>(s); });

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
