// good_plugin.cpp: a well-formed troupe plugin, as the tests load it: a layer
// ("test_scale", y = a * x with a learnable a per feature) and an actor kind
// ("test_grad_scaler", which multiplies the gradients passing through it by its `factor`
// setting; it accepts and emits grads wires, so it can sit between a layer and its
// averager or optimizer).
#include "tests/plugins/scale_layer.hpp"
#include "troupe/actor_kind.hpp"
#include "troupe/ops.hpp"
#include "troupe/plugin.hpp"

TROUPE_PLUGIN("troupe_test_plugin");

namespace {

TROUPE_REGISTER_LAYER("test_scale", "y = a * x, a learnable per feature (test plugin)",
                      scale_layer_factory(scale_fault::none));

/// Scales each weight_grads_msg in place (the sender hands its tensors over, see
/// troupe/messages.hpp) on its device's stream and passes it on to its one grads sink.
class grad_scaler final : public troupe::grads_filter {
 public:
  grad_scaler(caf::actor_config& config, std::string name, float factor, troupe::device* on)
      : grads_filter(config, std::move(name), on, "scaled"),
        factor_(factor),
        scale_(troupe::kernels::lookup<troupe::kernels::ops::scale>(this->on().id().type)) {}

 protected:
  troupe::event transform(std::vector<troupe::tensor>& grads,
                          const troupe::weight_grads_msg& message) override {
    return on().work().submit(
        [scale = scale_, context = on().context(), grads, f = factor_] {
          for (const auto& g : grads)
            scale(context, g.numel(), f, g.f32());
        },
        job_for_step("scale", message.step, message.replica));
  }
  std::string role() const override {
    return "test_grad_scaler, factor " + std::to_string(factor_);
  }

 private:
  float factor_;
  troupe::kernels::ops::scale::function scale_;
};

TROUPE_REGISTER_ACTOR_KIND("test_grad_scaler",
                           "multiplies the gradients passing through by `factor` (test plugin)",
                           troupe::accepts{"grads"}, troupe::emits{"grads"},
                           [](troupe::actor_spawn& spawn) {
                             const auto factor = spawn.settings.number("factor", -1e30, 1e30);
                             return spawn.system.spawn<grad_scaler>(
                                 spawn.name, static_cast<float>(factor), &spawn.on);
                           });

}  // namespace
