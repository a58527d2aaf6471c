// good_plugin.cpp: a well-formed troupe plugin, as the tests load it: a layer
// ("test_scale", y = a * x with a learnable a per feature) and an actor kind
// ("test_grad_scaler", which multiplies the gradients passing through it by its `factor`
// setting; it accepts and emits grads wires, so it can sit between a layer and its
// averager or optimizer).
#include <caf/all.hpp>

#include "actors/actor_kinds.hpp"
#include "actors/failures.hpp"
#include "actors/inputs.hpp"
#include "kernels/ops.hpp"
#include "runtime/core/transfer.hpp"
#include "runtime/plugin/plugin.hpp"
#include "tests/plugins/grads_wiring.hpp"
#include "tests/plugins/scale_layer.hpp"

TROUPE_PLUGIN("troupe_test_plugin");

namespace {

TROUPE_REGISTER_LAYER("test_scale", "y = a * x, a learnable per feature (test plugin)",
                      scale_layer_factory(scale_fault::none));

/// Scales each weight_grads_msg in place (the sender hands its tensors over, see
/// actors/messages.hpp) on its device's stream and passes it on to its one grads sink.
class grad_scaler final : public caf::event_based_actor {
 public:
  grad_scaler(caf::actor_config& config, std::string name, float factor, troupe::device* on)
      : caf::event_based_actor(config), name_(std::move(name)), factor_(factor), on_(on) {
    scale_ = troupe::kernels::lookup<troupe::kernels::ops::scale>(on_->id().type);
  }

  caf::behavior make_behavior() override {
    troupe::report_failures_to(this, name_, &trainer_);
    return {
        take_grads_wiring(name_, trainer_, sink_),
        [this](troupe::weight_grads_msg& message) {
          if (troupe::come_back_when_ready(
                  this, troupe::pending_input(on_->id(), message.grads), message))
            return;
          message.grads = troupe::arrive(message.grads, *on_);
          auto done = on_->work().submit(
              [scale = scale_, context = on_->context(), grads = message.grads, f = factor_] {
                for (const auto& g : grads)
                  scale(context, g.numel(), f, g.f32());
              });
          for (auto& g : message.grads)
            g.set_ready(done);
          ++steps_;
          send(sink_, std::move(message));
        },
        [this](troupe::status_atom) {
          return name_ + " (test_grad_scaler, factor " + std::to_string(factor_) + "): passed on " +
                 std::to_string(steps_) + " gradient message(s)";
        },
        [this](troupe::finish_atom) { quit(); },
    };
  }

 private:
  std::string name_;
  float factor_;
  troupe::device* on_;
  troupe::kernels::ops::scale::function scale_ = nullptr;
  caf::actor trainer_;
  caf::actor sink_;
  std::int64_t steps_ = 0;
};

/// The `factor` setting: a required number.
float read_factor(const troupe::actor_plan& plan) {
  for (const auto& [key, value] : plan.settings)
    if (key != "factor")
      throw troupe::config_error(value.where, "[[actor]] '" + plan.name + "': unknown key '" +
                                                  key + "' (test_grad_scaler takes only factor)");
  auto found = plan.settings.find("factor");
  if (found == plan.settings.end())
    throw troupe::config_error(plan.where, "[[actor]] '" + plan.name +
                                               "': missing key 'factor' (e.g. factor = 0.5)");
  const auto& value = found->second.value;
  if (const auto* number = std::get_if<double>(&value))
    return static_cast<float>(*number);
  if (const auto* integer = std::get_if<std::int64_t>(&value))
    return static_cast<float>(*integer);
  throw troupe::config_error(found->second.where,
                             "[[actor]] '" + plan.name + "' factor: expected a number");
}

TROUPE_REGISTER_ACTOR_KIND("test_grad_scaler",
                           "multiplies the gradients passing through by `factor` (test plugin)",
                           troupe::accepts{"grads"}, troupe::emits{"grads"},
                           [](const troupe::actor_plan& plan, troupe::spawn_context& context) {
                             return context.system.spawn<grad_scaler>(
                                 plan.name, read_factor(plan), &context.devices.at(plan.device));
                           });

}  // namespace
