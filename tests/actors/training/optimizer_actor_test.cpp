// The optimizer actor, driven with real messages: the scoped actor sends start and each
// step's gradients (as an averager would), and it and a second scoped actor play the two
// replicas of the layer that the optimizer publishes every version to. Each version must
// equal a naive double-precision update computed here from the hyper-parameters of a parsed
// [optimizer] section (so the test reads them the way a run does).
//
// Tolerance: one SGD or Adam update is a handful of float operations per element (a decay,
// a moment update, a square root and a division, the step), each rounding by at most 2^-24
// relative; over three steps, with parameters of size < 2 and updates of size ~lr, the float
// result stays within 32 * 2^-24 * max(1, |p|) (~2e-6) of the double one. A wrong rate, a
// lost momentum, a missing bias correction or a decay applied the wrong way moves a
// parameter by 1e-3 or more.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "actors/training/optimizer_actor.hpp"
#include "runtime/config/config.hpp"
#include "tests/actors/actor_test_support.hpp"
#include "tests/config_text.hpp"
#include "tests/kernels/kernel_test_support.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

constexpr std::uint64_t seed = 7;
constexpr std::int32_t layer_index = 1;
constexpr std::int64_t steps = 3;

const std::vector<param_spec>& specs() {
  static const std::vector<param_spec> s = {
      {"weight", {3, 4}, init_kind::kaiming_uniform, 4, 3},
      {"bias", {3}, init_kind::torch_default, 4, 3},
  };
  return s;
}

/// The [optimizer] section of a run config with `optimizer` as its body.
optimizer_section parse_optimizer(const std::string& optimizer) {
  const std::string text =
      test::data_section({4, 8, 4, 4, 3}) + test::linear(3) + "\n[optimizer]\n" + optimizer;
  return parse_config(text, "optimizer_actor_test.toml").optimizer;
}

/// Gradients of step `step` for parameter `index`: fixed values of both signs.
std::vector<float> gradient_values(std::int64_t step, std::size_t index, std::size_t n) {
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i)
    g[i] =
        0.25f * static_cast<float>(
                    static_cast<int>((i * 5 + index * 3 + static_cast<std::size_t>(step) * 7) % 9) -
                    4) +
        0.125f * static_cast<float>(step);
  return g;
}

/// torch.optim's SGD / Adam / AdamW on one parameter, in double (include/troupe/ops.hpp's math).
struct reference_optimizer {
  std::string type;  // "sgd" | "adam" | "adamw"
  optimizer_section o;
  std::vector<double> p, buffer, m, v;

  void step(std::int64_t t, double lr, const std::vector<float>& grad) {
    if (buffer.empty())
      buffer.assign(p.size(), 0.0), m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    for (std::size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (type == "sgd") {
        double d = g + o.weight_decay * p[i];
        if (o.momentum != 0) {
          buffer[i] = t == 0 ? d : o.momentum * buffer[i] + (1 - o.dampening) * d;
          d = o.nesterov ? d + o.momentum * buffer[i] : buffer[i];
        }
        p[i] -= lr * d;
        continue;
      }
      if (type == "adamw")
        p[i] *= 1 - lr * o.weight_decay;
      else
        g += o.weight_decay * p[i];
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      const double n = static_cast<double>(t + 1);
      const double correction1 = 1 - std::pow(o.beta1, n);
      const double correction2 = 1 - std::pow(o.beta2, n);
      p[i] -= (lr / correction1) * m[i] / (std::sqrt(v[i]) / std::sqrt(correction2) + o.eps);
    }
  }
};

void check_version(const params_msg& got, std::int64_t version,
                   const std::vector<reference_optimizer>& want, const char* who) {
  INFO(who << ", version " << version);
  CHECK(got.version == version);
  CHECK(got.layer == layer_index);
  REQUIRE(got.params.size() == want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    CHECK(got.params[k].shape() == specs()[k].shape);
    auto v = values(got.params[k]);
    REQUIRE(v.size() == want[k].p.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double tolerance = 32 * std::ldexp(1.0, -24) * std::max(1.0, std::abs(want[k].p[i]));
      INFO("parameter " << k << "[" << i << "]: got " << v[i] << ", want " << want[k].p[i]);
      CHECK(std::abs(v[i] - want[k].p[i]) <= tolerance);
    }
  }
}

/// Runs `steps` steps of an optimizer actor and checks every version both subscribers get.
struct optimizer_fixture : actor_fixture {
  caf::scoped_actor other{system};  // the second replica of the layer

  /// `type` and the rest of the [optimizer] table.
  void run(const std::string& type, const std::string& rest) {
    optimizer_actor_settings s;
    s.name = "optimizer_1";
    s.layer_index = layer_index;
    s.params = specs();
    s.optimizer = parse_optimizer("type = \"" + type + "\"\n" + rest);
    // A warm-up makes the rate differ per step, so the step's own rate must be used.
    s.schedule.type = lr_schedule::kind::constant;
    s.schedule.base_lr = s.optimizer.lr;
    s.schedule.warmup_steps = 2;
    s.schedule.total_steps = steps;
    s.seed = seed;
    s.on = &cpu(1);
    const auto schedule = s.schedule;

    std::vector<reference_optimizer> want;
    for (std::size_t k = 0; k < specs().size(); ++k) {
      std::vector<float> init(static_cast<std::size_t>(element_count(specs()[k].shape)));
      initialise_parameter(specs()[k], seed, layer_index, static_cast<std::int64_t>(k),
                           init.data());
      want.push_back(
          reference_optimizer{type, s.optimizer, {init.begin(), init.end()}, {}, {}, {}});
    }

    auto actor = system.spawn<optimizer_actor>(std::move(s));
    place(actor, cpu(1));
    auto to_other = wire("params", caf::actor_cast<caf::actor>(other), "layer", 0, 1);
    self->send(actor, wiring({wire("params", me(), "layer", 0, 0), to_other},
                             {wire("grads", me(), "averager")}));
    self->send(actor, start_atom::value);
    auto receive_version = [&](std::int64_t version) {
      check_version(next<params_msg>("a version"), version, want, "replica 0");
      params_msg theirs;
      other->receive([&](params_msg& m) { theirs = std::move(m); },
                     caf::after(patience) >> [&] { FAIL_CHECK("replica 1 got no version"); });
      check_version(theirs, version, want, "replica 1");
    };
    receive_version(0);

    for (std::int64_t step = 0; step < steps; ++step) {
      CAPTURE(step);
      weight_grads_msg grads;
      grads.step = step;
      grads.layer = layer_index;
      for (std::size_t k = 0; k < specs().size(); ++k) {
        auto g = gradient_values(step, k, want[k].p.size());
        grads.grads.push_back(tensor::from(g, specs()[k].shape, {device_type::cpu, 1}));
        want[k].step(step, schedule.at(step), g);
      }
      self->send(actor, std::move(grads));
      receive_version(step + 1);
    }
    finish(actor);
  }
};

}  // namespace

TEST_CASE_FIXTURE(optimizer_fixture,
                  "the optimizer actor publishes version 0 from the seed and each SGD step's "
                  "update to every replica") {
  run("sgd", "lr = 0.1\nmomentum = 0.9\nnesterov = true\nweight_decay = 0.01\n");
}

TEST_CASE_FIXTURE(optimizer_fixture,
                  "the optimizer actor publishes SGD with dampening, Adam and AdamW updates equal "
                  "to a naive reference") {
  SUBCASE("sgd, momentum with dampening") {
    run("sgd", "lr = 0.05\nmomentum = 0.8\ndampening = 0.25\n");
  }
  SUBCASE("adam with L2 weight decay") {
    run("adam", "lr = 0.01\nbetas = [0.8, 0.95]\neps = 1e-6\nweight_decay = 0.1\n");
  }
  SUBCASE("adamw with decoupled weight decay") { run("adamw", "lr = 0.01\nweight_decay = 0.1\n"); }
}

TEST_CASE_FIXTURE(actor_fixture,
                  "an optimizer whose layer computes its weight in bf16 sends each version with "
                  "the weight rounded from the fp32 master and the bias as it is") {
  optimizer_actor_settings s;
  s.name = "optimizer_1";
  s.layer_index = layer_index;
  s.params = specs();
  s.optimizer = parse_optimizer("type = \"sgd\"\nlr = 0.1\n");
  s.schedule.base_lr = s.optimizer.lr;
  s.seed = seed;
  s.on = &cpu(1);
  s.bf16_params = {true, false};  // linear's: the weight, not the bias
  auto actor = system.spawn<optimizer_actor>(std::move(s));
  place(actor, cpu(1));
  self->send(actor,
             wiring({wire("params", me(), "layer", 0, 0)}, {wire("grads", me(), "averager")}));
  self->send(actor, start_atom::value);
  auto check_version = [&](std::int64_t version) {
    INFO("version " << version);
    auto sent = next<params_msg>("a version");
    CHECK(sent.version == version);
    std::vector<tensor> masters;
    self->request(actor, patience, caf::get_atom::value, version)
        .receive([&](std::vector<tensor>& m) { masters = std::move(m); },
                 [&](caf::error& e) { FAIL_CHECK("no masters: " << to_string(e)); });
    REQUIRE(masters.size() == 2);
    REQUIRE(sent.params.size() == 2);
    CHECK(masters[0].type() == dtype::f32);
    REQUIRE(sent.params[0].type() == dtype::bf16);
    CHECK(sent.params[0].shape() == masters[0].shape());
    REQUIRE(sent.params[1].type() == dtype::f32);
    CHECK(values(sent.params[1]) == values(masters[1]));
    const auto master = values(masters[0]);
    std::vector<std::uint16_t> want(master.size());
    kernels::lookup<kernels::ops::to_bf16>(device_type::cpu)(
        test::cpu_context(), static_cast<std::int64_t>(want.size()), master.data(), want.data());
    sent.params[0].wait_ready();
    const std::uint16_t* got = sent.params[0].bf16();
    CHECK(std::vector<std::uint16_t>(got, got + want.size()) == want);
  };
  check_version(0);
  weight_grads_msg grads;
  grads.step = 0;
  grads.layer = layer_index;
  for (std::size_t k = 0; k < specs().size(); ++k) {
    const auto n = static_cast<std::size_t>(element_count(specs()[k].shape));
    grads.grads.push_back(
        tensor::from(gradient_values(0, k, n), specs()[k].shape, {device_type::cpu, 1}));
  }
  self->send(actor, std::move(grads));
  check_version(1);
  finish(actor);
}
