// abi_mismatch_plugin.cpp: a plugin built as if against the next ABI version, for
// load_plugin's ABI check. It registers a layer, a kernel and an actor kind like any
// plugin: after it is refused, none of them may be registered (Note [plugin
// registrations] in include/troupe/registration.hpp).
#include "tests/plugins/scale_layer.hpp"
#include "troupe/actor_kind.hpp"
#include "troupe/kernel.hpp"
#include "troupe/plugin.hpp"

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
                           [](troupe::actor_spawn&) -> caf::actor { return {}; });

}  // namespace
