// clipper_test.cpp: drives the plugin's grad_clipper actor with real weight_grads_msg
// messages, loaded the way `troupe run` loads it (load_plugin, then the actor-kind
// registry: spawn_custom_actor), and checks what it sends on against a double-precision
// reference. It uses the installed facade only (troupe/*.hpp).
//
// Built only with -DCUSTOM_LAYERS_BUILD_TESTS=ON (scripts/check-install.sh does) and run as
// ./build/clipper_test; the plugin's layer has its own check: `troupe check-layer swish`.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "troupe/actor_kind.hpp"
#include "troupe/plugin.hpp"

using namespace troupe;

namespace {

constexpr std::chrono::seconds patience{30};

struct fixture {
  fixture() {
    load_plugin(CUSTOM_LAYERS_PLUGIN);
    add_message_types(config_);
  }
  caf::actor_system_config config_;
};

/// The two devices a run of the clipper would have.
struct harness {
  explicit harness(caf::actor_system& system)
      : system(system), devices{{{device_type::cpu, 0}, {device_type::cpu, 1}}} {}

  /// Spawns clip_2 on cpu:0 from these [[actor]] settings, as a run would.
  caf::actor spawn(setting_map values, source_position where = {}) {
    settings own{"actor", "clip_2", std::move(values), std::move(where)};
    actor_spawn spawn{system, name, devices.at({device_type::cpu, 0}), own};
    return spawn_custom_actor("grad_clipper", spawn);
  }

  caf::actor_system& system;
  const std::string name = "clip_2";
  device_set devices;
};

caf::actor spawn_clipper(harness& h, caf::scoped_actor& self, setting_value max_norm) {
  auto clipper = h.spawn({{"max_norm", std::move(max_norm)}});
  auto me = caf::actor_cast<caf::actor>(self);
  wiring_msg wiring;
  wiring.trainer = me;
  wiring.incoming.push_back(wire_end{"grads", "layer_2", "layer", me, 0, 0, "cpu:0", 0});
  wiring.outgoing.push_back(wire_end{"grads", "optimizer_2", "optimizer", me, -1, 0, "cpu:0", 0});
  self->send(clipper, std::move(wiring));
  return clipper;
}

/// A weight (5, 3) and a bias (5) of values in [-scale, scale].
std::vector<std::vector<float>> make_values(float scale, std::uint32_t seed) {
  std::mt19937 random{seed};
  std::uniform_real_distribution<float> value{-scale, scale};
  std::vector<std::vector<float>> out{std::vector<float>(15), std::vector<float>(5)};
  for (auto& t : out)
    for (auto& v : t) v = value(random);
  return out;
}

std::vector<tensor> to_tensors(const std::vector<std::vector<float>>& values, device_id on) {
  return {tensor::from(values[0], {5, 3}, on), tensor::from(values[1], {5}, on)};
}

std::vector<tensor> receive_grads(caf::scoped_actor& self) {
  std::vector<tensor> grads;
  self->receive([&](weight_grads_msg& m) { grads = std::move(m.grads); },
                [&](failure_msg& m) { FAIL(m.actor << ": " << m.what); },
                caf::after(patience) >>
                    [&] { FAIL("nothing after " << patience.count() << " s"); });
  for (const auto& g : grads) g.wait_ready();
  return grads;
}

/// The clipped values in double: g * min(1, max_norm / ||g||).
std::vector<std::vector<double>> reference(const std::vector<std::vector<float>>& values,
                                           double max_norm) {
  double squares = 0;
  for (const auto& t : values)
    for (float v : t) squares += static_cast<double>(v) * v;
  const double factor = std::min(1.0, max_norm / std::sqrt(squares));
  std::vector<std::vector<double>> out;
  for (const auto& t : values) {
    out.emplace_back();
    for (float v : t) out.back().push_back(v * factor);
  }
  return out;
}

void check_close(const std::vector<tensor>& got, const std::vector<std::vector<double>>& expected) {
  REQUIRE(got.size() == expected.size());
  for (std::size_t t = 0; t < got.size(); ++t) {
    auto values = got[t].to_vector();
    REQUIRE(values.size() == expected[t].size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      // The factor carries the float rounding of the sum of squares (summed in double, then
      // rounded once), of sqrt and of the division: a few 2^-24 relative; the product one
      // more. 1e-6 relative is about 16 ulps, well above that and far below any real error.
      CHECK(std::abs(values[i] - expected[t][i]) <= 1e-6 * std::abs(expected[t][i]) + 1e-30);
    }
  }
}

}  // namespace

TEST_CASE_FIXTURE(fixture, "gradients above max_norm are scaled to exactly that global norm") {
  caf::actor_system system{config_};
  caf::scoped_actor self{system};
  harness h{system};
  auto clipper = spawn_clipper(h, self, setting_value{0.5, {}});
  auto values = make_values(1.0f, 3);  // norm about 2.6 (20 values of mean square 1/3)
  self->send(clipper, weight_grads_msg{4, 2, 0, to_tensors(values, {device_type::cpu, 0}), {}});
  auto got = receive_grads(self);
  check_close(got, reference(values, 0.5));
  double squares = 0;
  for (const auto& g : got)
    for (float v : g.to_vector()) squares += static_cast<double>(v) * v;
  CHECK(std::sqrt(squares) == doctest::Approx(0.5).epsilon(1e-6));
  self->send(clipper, finish_atom::value);
}

TEST_CASE_FIXTURE(fixture, "gradients within max_norm pass on bit for bit") {
  caf::actor_system system{config_};
  caf::scoped_actor self{system};
  harness h{system};
  auto clipper = spawn_clipper(h, self, setting_value{std::int64_t{100}, {}});
  auto values = make_values(1.0f, 5);
  self->send(clipper, weight_grads_msg{0, 2, 0, to_tensors(values, {device_type::cpu, 0}), {}});
  auto got = receive_grads(self);
  CHECK(got[0].to_vector() == values[0]);
  CHECK(got[1].to_vector() == values[1]);
  self->send(clipper, finish_atom::value);
}

TEST_CASE_FIXTURE(fixture,
                  "gradients from another device are clipped once written, leaving the "
                  "sender's untouched") {
  caf::actor_system system{config_};
  caf::scoped_actor self{system};
  harness h{system};
  auto clipper = spawn_clipper(h, self, setting_value{0.25, {}});
  auto values = make_values(2.0f, 7);
  // Written by a job on cpu:1 that takes a while: the clipper must not read them before.
  device_id other{device_type::cpu, 1};
  auto grads = to_tensors({std::vector<float>(15, 0.0f), std::vector<float>(5, 0.0f)}, other);
  auto written = h.devices.at(other).work().submit([grads, values] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::copy(values[0].begin(), values[0].end(), grads[0].f32());
    std::copy(values[1].begin(), values[1].end(), grads[1].f32());
  });
  for (auto& g : grads) g.set_ready(written);
  self->send(clipper, weight_grads_msg{1, 2, 0, grads, {}});
  auto got = receive_grads(self);
  CHECK(got[0].device() == device_id{device_type::cpu, 0});
  check_close(got, reference(values, 0.25));
  CHECK(grads[0].to_vector() == values[0]);  // a copy was clipped, not the sender's tensor
  self->send(clipper, finish_atom::value);
}

TEST_CASE_FIXTURE(fixture,
                  "a message without tensors is reported to the trainer, naming the clipper") {
  caf::actor_system system{config_};
  caf::scoped_actor self{system};
  harness h{system};
  auto clipper = spawn_clipper(h, self, setting_value{1.0, {}});
  self->send(clipper, weight_grads_msg{3, 2, 0, {}, {}});
  bool reported = false;
  self->receive(
      [&](failure_msg& m) {
        CHECK(m.actor == "clip_2");
        CHECK(m.what.find("step 3") != std::string::npos);
        reported = true;
      },
      caf::after(patience) >> [] {});
  CHECK(reported);
}

TEST_CASE_FIXTURE(fixture,
                  "a missing, non-positive or unknown setting is a config error at the actor") {
  caf::actor_system system{config_};
  harness h{system};
  CHECK_THROWS_WITH_AS(h.spawn({}, source_position{"x.toml", 40, 1}),
                       doctest::Contains("x.toml:40:1: actor 'clip_2' needs the number setting "
                                         "'max_norm'"),
                       config_error);
  CHECK_THROWS_WITH_AS(
      h.spawn({{"max_norm", setting_value{-1.0, source_position{"x.toml", 44, 12}}}}),
      doctest::Contains("x.toml:44:12: actor 'clip_2' setting 'max_norm' = -1"), config_error);
  CHECK_THROWS_WITH_AS(
      h.spawn({{"max_norm", setting_value{1.0, {}}},
               {"max_nrom", setting_value{2.0, source_position{"x.toml", 45, 12}}}}),
      doctest::Contains("x.toml:45:12: unknown setting 'max_nrom' for actor 'clip_2'; did you "
                        "mean 'max_norm'?"),
      config_error);
}
