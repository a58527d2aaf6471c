// faulty_plugin.cpp: a plugin whose layers break the layer contract, each in one way
// (tests/plugins/scale_layer.hpp): a wrong dx, a backward that throws; and an actor kind
// ("test_throwing_task", on a grads wire) whose task posted to its device's stream throws.
// The runtime must name each failure and end the run, never terminate.
#include <caf/all.hpp>

#include <stdexcept>

#include "actors/actor_kinds.hpp"
#include "actors/failures.hpp"
#include "actors/messages.hpp"
#include "runtime/plugin/plugin.hpp"
#include "tests/plugins/grads_wiring.hpp"
#include "tests/plugins/scale_layer.hpp"

TROUPE_PLUGIN("troupe_test_faulty_plugin");

namespace {

TROUPE_REGISTER_LAYER("test_wrong_gradient", "test_scale whose dx forgets a (test plugin)",
                      scale_layer_factory(scale_fault::wrong_gradient));
TROUPE_REGISTER_LAYER("test_throwing_backward", "test_scale whose backward throws (test plugin)",
                      scale_layer_factory(scale_fault::throwing_backward));

/// Passes gradients on unchanged, but first posts a task to its device's stream that
/// throws (as an actor's handler-side work would, e.g. a callback on the stream thread).
class throwing_task final : public caf::event_based_actor {
 public:
  throwing_task(caf::actor_config& config, std::string name, troupe::device* on)
      : caf::event_based_actor(config), name_(std::move(name)), on_(on) {}

  caf::behavior make_behavior() override {
    troupe::report_failures_to(this, name_, &trainer_);
    return {
        take_grads_wiring(name_, trainer_, sink_),
        [this](troupe::weight_grads_msg& message) {
          on_->work().post(
              [] { throw std::runtime_error("test_throwing_task: a posted task fails on purpose"); });
          send(sink_, std::move(message));
        },
        [this](troupe::status_atom) { return name_ + " (test_throwing_task)"; },
        [this](troupe::finish_atom) { quit(); },
    };
  }

 private:
  std::string name_;
  troupe::device* on_;
  caf::actor trainer_;
  caf::actor sink_;
};

TROUPE_REGISTER_ACTOR_KIND("test_throwing_task",
                           "passes gradients on; its posted task throws (test plugin)",
                           troupe::accepts{"grads"}, troupe::emits{"grads"},
                           [](const troupe::actor_plan& plan, troupe::spawn_context& context) {
                             return context.system.spawn<throwing_task>(
                                 plan.name, &context.devices.at(plan.device));
                           });

}  // namespace
