// faulty_plugin.cpp: a plugin whose layers break the layer contract, each in one way
// (tests/plugins/scale_layer.hpp): a wrong dx, a backward that throws; and an actor kind
// ("test_throwing_task", on a grads wire) whose task posted to its device's stream throws.
// The runtime must name each failure and end the run, never terminate.
#include <stdexcept>

#include "tests/plugins/scale_layer.hpp"
#include "troupe/actor_kind.hpp"
#include "troupe/plugin.hpp"

TROUPE_PLUGIN("troupe_test_faulty_plugin");

namespace {

TROUPE_REGISTER_LAYER("test_wrong_gradient", "test_scale whose dx forgets a (test plugin)",
                      scale_layer_factory(scale_fault::wrong_gradient));
TROUPE_REGISTER_LAYER("test_throwing_backward", "test_scale whose backward throws (test plugin)",
                      scale_layer_factory(scale_fault::throwing_backward));

/// Passes gradients on unchanged, but first posts a task to its device's stream that
/// throws (as an actor's handler-side work would, e.g. a callback on the stream thread).
class throwing_task final : public troupe::grads_filter {
 public:
  throwing_task(caf::actor_config& config, std::string name, troupe::device* on)
      : grads_filter(config, std::move(name), on, "passed on") {}

 protected:
  troupe::event transform(std::vector<troupe::tensor>&, const troupe::weight_grads_msg&) override {
    on().work().post(
        [] { throw std::runtime_error("test_throwing_task: a posted task fails on purpose"); });
    return on().work().last();  // unchanged: ready once they are here
  }
  std::string role() const override { return "test_throwing_task"; }
};

TROUPE_REGISTER_ACTOR_KIND("test_throwing_task",
                           "passes gradients on; its posted task throws (test plugin)",
                           troupe::accepts{"grads"}, troupe::emits{"grads"},
                           [](troupe::actor_spawn& spawn) {
                             return spawn.system.spawn<throwing_task>(spawn.name, &spawn.on);
                           });

}  // namespace
