// grads_filter, the base of actors on a grads wire: a filter that doubles gradients gets
// the wiring (one grads wire in, one out), the pass-on with its readiness, the checks of
// the message and the status line from the base, and only submits its math. A scoped
// actor plays the layer, the optimizer and the trainer, with real messages.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <chrono>
#include <string>

#include "tests/actors/actor_test_support.hpp"
#include "troupe/grads_filter.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

using test::patience;

/// Doubles every gradient in place on its device's stream.
class doubler final : public grads_filter {
 public:
  doubler(caf::actor_config& config, std::string name, device* on)
      : grads_filter(config, std::move(name), on, "doubled"),
        scale_(kernels::lookup<kernels::ops::scale>(this->on().id().type)) {}

 protected:
  event transform(std::vector<tensor>& grads, const weight_grads_msg& message) override {
    return on().work().submit(
        [scale = scale_, context = on().context(), grads] {
          for (const auto& g : grads)
            scale(context, g.numel(), 2.0f, g.f32());
        },
        job_for_step("double", message.step, message.replica));
  }
  std::string role() const override { return "doubler"; }

 private:
  kernels::ops::scale::function scale_;
};

struct filter_fixture : test::plain_actor_fixture {
  caf::actor spawn_wired() {
    auto filter = system.spawn<doubler>("double_0", &devices.at({device_type::cpu, 0}));
    auto me = caf::actor_cast<caf::actor>(self);
    wiring_msg wiring;
    wiring.trainer = me;
    wiring.incoming.push_back(wire_end{"grads", "layer_0", "layer", me, 0, 0, "cpu:0", 0});
    wiring.outgoing.push_back(wire_end{"grads", "optimizer_0", "optimizer", me, -1, 0, "cpu:0", 0});
    self->send(filter, std::move(wiring));
    return filter;
  }
};

}  // namespace

TEST_CASE_FIXTURE(filter_fixture, "a grads filter passes transformed gradients on to its sink") {
  auto filter = spawn_wired();
  // From another device: the filter works on a copy on its own, the sender's stay as sent.
  auto grads = std::vector<tensor>{tensor::from({1, -2, 3}, {3}, {device_type::cpu, 1}),
                                   tensor::from({0.5f}, {1}, {device_type::cpu, 1})};
  self->send(filter, weight_grads_msg{5, 2, 1, grads, trace_stamp{}});
  self->receive(
      [&](weight_grads_msg& m) {
        CHECK(m.step == 5);
        CHECK(m.layer == 2);
        CHECK(m.replica == 1);
        REQUIRE(m.grads.size() == 2);
        CHECK(m.grads[0].device() == device_id{device_type::cpu, 0});
        CHECK(m.grads[0].to_vector() == std::vector<float>{2, -4, 6});
        CHECK(m.grads[1].to_vector() == std::vector<float>{1});
      },
      [&](failure_msg& m) { FAIL(m.actor << ": " << m.what); },
      caf::after(patience) >> [&] { FAIL("nothing reached the sink"); });
  CHECK(grads[0].to_vector() == std::vector<float>{1, -2, 3});
  std::string status;
  self->request(filter, patience, status_atom::value)
      .receive([&](std::string& s) { status = s; }, [&](caf::error& e) { FAIL(system.render(e)); });
  CHECK(status == "double_0 (doubler on cpu:0): doubled 1 step(s) of gradients from layer_0");
  self->send(filter, finish_atom::value);
  devices.synchronize();
}

TEST_CASE_FIXTURE(filter_fixture,
                  "a grads filter reports gradients without tensors, naming the step") {
  auto filter = spawn_wired();
  self->send(filter, weight_grads_msg{3, 2, 0, {}, trace_stamp{}});
  self->receive(
      [&](failure_msg& m) {
        CHECK(m.actor == "double_0");
        CHECK(m.what == "double_0: gradients of step 3 hold no tensors");
      },
      [&](weight_grads_msg&) { FAIL("an empty message was passed on"); },
      caf::after(patience) >> [&] { FAIL("no failure reported"); });
}
