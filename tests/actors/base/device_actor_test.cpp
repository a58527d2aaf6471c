// device_actor, the base of device-placed actors: a small derived actor (it passes
// weight gradients on to its sink and throws on an int) gets the protocol from the base
// alone: the wiring with its hook, a throwing handler's failure reported to the trainer,
// the status answer with its own description, readiness for tensors from another device,
// and finish. A scoped actor plays the trainer and the sink, with real messages.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <chrono>
#include <future>
#include <stdexcept>
#include <string>

#include "tests/actors/actor_test_support.hpp"
#include "troupe/device_actor.hpp"

using namespace troupe;

namespace {

using test::patience;

/// Passes weight gradients on to its one grads sink; an int makes it throw.
class relay final : public device_actor {
 public:
  relay(caf::actor_config& config, std::string name, device* on)
      : device_actor(config, std::move(name), on) {}

 protected:
  caf::message_handler handlers() override {
    return {
        [this](weight_grads_msg& message) {
          if (deferred_until_ready(message, message.grads))
            return;
          auto span = handling_span(message);
          ++passed_;
          send(sink_, std::move(message));
        },
        [](int value) { throw std::runtime_error("refused " + std::to_string(value)); },
    };
  }
  void connect(const wiring_msg& wiring) override {
    ++connections_;
    sink_ = wiring.out("grads").at(0).peer;
  }
  void release_peers() override { sink_ = nullptr; }
  std::string role() const override { return "relay"; }
  std::string waiting_for() const override {
    return ": passed " + std::to_string(passed_) + " after " + std::to_string(connections_) +
           " wiring(s)";
  }

 private:
  caf::actor sink_;
  int passed_ = 0;
  int connections_ = 0;
};

struct fixture : test::plain_actor_fixture {
  /// A relay on cpu:0, wired with the scoped actor as its trainer and sink.
  caf::actor spawn_wired() {
    auto relay_actor = system.spawn<relay>("relay_0", &devices.at({device_type::cpu, 0}));
    test::wire_self_as_sink(self, relay_actor);
    return relay_actor;
  }

  std::string status_of(const caf::actor& a) {
    std::string answer;
    self->request(a, patience, status_atom::value)
        .receive([&](std::string& s) { answer = std::move(s); },
                 [&](caf::error& e) { FAIL("no status: " << system.render(e)); });
    return answer;
  }
};

}  // namespace

TEST_CASE_FIXTURE(fixture, "a derived actor takes its neighbours from the wiring hook") {
  auto a = spawn_wired();
  auto grads = std::vector<tensor>{tensor::from({1, 2, 3}, {3}, {device_type::cpu, 0})};
  self->send(a, weight_grads_msg{4, 0, 1, grads, trace_stamp{}});
  self->receive(
      [&](weight_grads_msg& m) {
        CHECK(m.step == 4);
        CHECK(m.replica == 1);
        REQUIRE(m.grads.size() == 1);
        CHECK(m.grads[0].to_vector() == std::vector<float>{1, 2, 3});
      },
      caf::after(patience) >> [&] { FAIL("nothing reached the sink"); });
  self->send(a, finish_atom::value);
  devices.synchronize();
}

TEST_CASE_FIXTURE(fixture, "the base answers status with the derived actor's description") {
  auto a = spawn_wired();
  CHECK(status_of(a) == "relay_0 (relay on cpu:0): passed 0 after 1 wiring(s)");
  self->send(a, finish_atom::value);
}

TEST_CASE_FIXTURE(fixture, "a throwing handler's failure reaches the trainer, naming the actor") {
  auto a = spawn_wired();
  self->monitor(a);
  self->send(a, 7);
  self->receive(
      [&](failure_msg& m) {
        CHECK(m.actor == "relay_0");
        CHECK(m.what == "refused 7");
      },
      caf::after(patience) >> [&] { FAIL("no failure reported"); });
  // And the actor is gone, with that error.
  self->receive(
      [&](caf::down_msg& down) {
        CHECK(down.source == a.address());
        CHECK(down.reason != caf::exit_reason::normal);
      },
      caf::after(patience) >> [&] { FAIL("the failed actor is still alive"); });
}

TEST_CASE_FIXTURE(fixture, "finish ends the actor normally") {
  auto a = spawn_wired();
  self->monitor(a);
  self->send(a, finish_atom::value);
  self->receive([&](caf::down_msg& down) { CHECK(down.reason == caf::exit_reason::normal); },
                caf::after(patience) >> [&] { FAIL("the actor did not quit on finish"); });
}

TEST_CASE_FIXTURE(fixture, "a message waits for its tensors from another device to be written") {
  auto a = spawn_wired();
  // A tensor on cpu:1 whose writing job is held back until we let it run.
  std::promise<void> go;
  auto gate = go.get_future().share();
  auto x = tensor::from({5, 6}, {2}, {device_type::cpu, 1});
  x.set_ready(devices.at({device_type::cpu, 1}).work().submit([gate, x] {
    gate.wait();
    x.f32()[0] = 50;  // what the job writes must be what the relay passes on
  }));
  self->send(a, weight_grads_msg{0, 0, 0, {x}, trace_stamp{}});
  // Put aside, not handled: nothing reaches the sink, and the actor still answers.
  self->receive([&](weight_grads_msg&) { FAIL("handled before its input was written"); },
                caf::after(std::chrono::milliseconds(200)) >> [] {});
  CHECK(status_of(a) == "relay_0 (relay on cpu:0): passed 0 after 1 wiring(s)");
  go.set_value();
  self->receive(
      [&](weight_grads_msg& m) {
        REQUIRE(m.grads.size() == 1);
        CHECK(m.grads[0].ready().reached());
        CHECK(m.grads[0].to_vector() == std::vector<float>{50, 6});
      },
      caf::after(patience) >> [&] { FAIL("the message did not come back once ready"); });
  CHECK(status_of(a) == "relay_0 (relay on cpu:0): passed 1 after 1 wiring(s)");
  self->send(a, finish_atom::value);
  devices.synchronize();
}

TEST_CASE("job labels name their fields instead of positions") {
  micro_tag tag;
  tag.step = 3;
  tag.microbatch = 2;
  tag.replica = 1;
  tag.stage = phase::eval;
  auto pass = micro_batch_job("forward", 9, tag, 64);
  CHECK(std::string{pass.name} == "forward");
  CHECK(pass.actor == 9);
  CHECK(pass.step == 3);
  CHECK(pass.microbatch == 2);
  CHECK(pass.replica == 1);
  CHECK(pass.phase == 1);
  CHECK(pass.bytes == 64);
  auto whole = step_job("update", 4, 7);
  CHECK(std::string{whole.name} == "update");
  CHECK(whole.actor == 4);
  CHECK(whole.step == 7);
  CHECK(whole.microbatch == -1);
  CHECK(whole.replica == -1);
  CHECK(whole.phase == 0);
  CHECK(whole.bytes == 0);
  CHECK(step_job("reduce", 4, 7, 2).replica == 2);
}
