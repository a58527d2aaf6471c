// clashing_plugin.cpp: a plugin that registers the built-in layer name "linear" again,
// next to a layer, a kernel and an actor kind of names nobody has: load_plugin must refuse
// it ("registers names that exist") and register none of them (all or nothing).
#include "tests/plugins/scale_layer.hpp"
#include "troupe/actor_kind.hpp"
#include "troupe/kernel.hpp"
#include "troupe/plugin.hpp"

TROUPE_PLUGIN("troupe_test_clashing_plugin");

namespace {

struct clash_op {
  static constexpr const char* name = "test_clash.op";
  using function = void (*)(const troupe::kernels::context&);
};

void clash_kernel(const troupe::kernels::context&) {}

TROUPE_REGISTER_KERNEL(clash_op, troupe::kernels::device_type::cpu, clash_kernel);

TROUPE_REGISTER_LAYER("test_clash_innocent", "a fresh name in a clashing plugin (test plugin)",
                      scale_layer_factory(scale_fault::none));

TROUPE_REGISTER_LAYER("linear", "a second 'linear' (test plugin)",
                      scale_layer_factory(scale_fault::none));

TROUPE_REGISTER_ACTOR_KIND("test_clash_kind", "a fresh kind in a clashing plugin (test plugin)",
                           troupe::accepts{"grads"}, troupe::emits{"grads"},
                           [](troupe::actor_spawn&) -> caf::actor { return {}; });

}  // namespace
