// delay.cpp: a layer that takes a set time and computes nothing, for measuring schedules.
//
// y = x in forward and dx = dy in backward, each taking a set time: `forward_us`, and
// `backward_us` (default twice forward, as a linear layer's backward is about twice its
// forward). Split for zero-bubble schedules, backward's input gradient takes backward_us
// minus `weight_us` and its weight gradient `weight_us` (default half of backward_us).
// mode = "sleep" (the default) waits without using the core, so that devices
// sharing a core do not slow each other and P stages can be measured on fewer cores;
// mode = "spin" keeps the core busy, as real compute would. One parameter, always 0 with
// gradient 0, so that optimizers and parameter versions keep the steps synchronous as a
// real layer's would. The time is per micro-batch, whatever its size; the cost used to
// balance stages is forward_us + backward_us, so only compare it with other delay layers.
// `slow_replica = r` with `slow_us = N` adds N microseconds to every forward of data-parallel
// replica r only: a straggler, for the asynchronous server's tests and benchmarks.
// bench/pipeline_schedules.py builds its pipelines from these.
#include <algorithm>
#include <chrono>
#include <thread>

#include "troupe/layer.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

class delay_layer final : public layer {
 public:
  explicit delay_layer(layer_settings& s)
      : forward_(s.integer("forward_us", 1, max_micros)),
        backward_(s.integer("backward_us", 2 * forward_.count(), 0, max_micros)),
        weight_(s.integer("weight_us", backward_.count() / 2, 0, backward_.count())),
        spin_(s.text("mode", "sleep", {"sleep", "spin"}) == "spin"),
        slow_replica_(s.integer("slow_replica", -1, -1, 1 << 20)),
        slow_(s.integer("slow_us", 0, 0, max_micros)) {}

  std::string type() const override { return "delay"; }
  // Its time is the host thread's and its copies are the host's: CPU devices only.
  void bind(device_type type) override {
    if (type != device_type::cpu)
      throw user_error(std::string{"the delay layer runs on CPU devices only, not on "} +
                       kernels::to_string(type));
  }
  shape_t output_shape(const shape_t& input) const override { return input; }
  std::vector<param_spec> parameters(const shape_t&) const override {
    return {{"unused", {1}, init_kind::zeros, 1, 1}};
  }
  double cost(const shape_t&) const override {
    return static_cast<double>((forward_ + backward_).count());
  }

  void forward(const layer_context& context, const std::vector<tensor>&, const tensor& x,
               const tensor& y, std::vector<tensor>&) const override {
    wait(context.replica == slow_replica_ ? forward_ + slow_ : forward_);
    std::copy(x.f32(), x.f32() + x.numel(), y.f32());
  }
  void backward(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>&,
                const tensor& dy, tensor* dx, std::vector<tensor>& grads, bool) const override {
    wait(backward_);
    if (dx != nullptr)
      std::copy(dy.f32(), dy.f32() + dy.numel(), dx->f32());
    grads[0].f32()[0] = 0;  // accumulating zeros is zero too
  }

  bool splits_backward() const override { return true; }
  void backward_input(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>&,
                      const tensor& dy, const tensor& dx) const override {
    wait(backward_ - weight_);
    std::copy(dy.f32(), dy.f32() + dy.numel(), dx.f32());
  }
  void backward_weight(const layer_context&, const std::vector<tensor>&, const std::vector<tensor>&,
                       const tensor&, std::vector<tensor>& grads, bool) const override {
    wait(weight_);
    grads[0].f32()[0] = 0;
  }

 private:
  static constexpr std::int64_t max_micros = 10'000'000;  // 10 s a job

  void wait(std::chrono::microseconds time) const {
    const auto until = std::chrono::steady_clock::now() + time;
    if (!spin_) {
      std::this_thread::sleep_until(until);
      return;
    }
    while (std::chrono::steady_clock::now() < until) {
    }
  }

  std::chrono::microseconds forward_, backward_, weight_;
  bool spin_;
  std::int64_t slow_replica_;
  std::chrono::microseconds slow_;
};

}  // namespace

TROUPE_REGISTER_LAYER("delay",
                      "y = x, taking a set time, for measuring schedules (settings: forward_us, "
                      "backward_us = 2 x forward_us, weight_us = backward_us / 2, mode = \"sleep\" "
                      "| \"spin\", slow_replica, slow_us: a "
                      "straggler replica's extra forward time)",
                      [](layer_settings& s) { return std::make_unique<delay_layer>(s); });

}  // namespace troupe
