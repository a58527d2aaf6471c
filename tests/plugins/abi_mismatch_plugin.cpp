// abi_mismatch_plugin.cpp: a plugin built as if against the next ABI version, for
// load_plugin's ABI check. It registers a layer, a kernel and an actor kind like any
// plugin: after it is refused, none of them may be registered (Note [plugin
// registrations] in kernels/registration.hpp).
#include <caf/all.hpp>

#include "actors/actor_kinds.hpp"
#include "kernels/kernels.hpp"
#include "runtime/plugin/plugin.hpp"
#include "tests/plugins/scale_layer.hpp"

TROUPE_DETAIL_PLUGIN("troupe_test_abi_mismatch", TROUPE_ABI_VERSION + 1);

namespace {

struct abi_mismatch_op {
  static constexpr const char* name = "test_abi_mismatch.op";
  using function = void (*)(const troupe::kernels::context&);
};

void abi_mismatch_kernel(const troupe::kernels::context&) {}

TROUPE_REGISTER_KERNEL(abi_mismatch_op, troupe::kernels::device_type::cpu, abi_mismatch_kernel);

TROUPE_REGISTER_LAYER("test_abi_mismatch_layer", "must never be registered (test plugin)",
                      scale_layer_factory(scale_fault::none));

TROUPE_REGISTER_ACTOR_KIND("test_abi_mismatch_kind", "must never be registered (test plugin)",
                           troupe::accepts{"grads"}, troupe::emits{"grads"},
                           [](const troupe::actor_plan&, troupe::spawn_context&) -> caf::actor {
                             return {};
                           });

}  // namespace
