// not_a_plugin.cpp: a shared library that is not a troupe plugin (no TROUPE_PLUGIN), for
// load_plugin's "is not a troupe plugin" error. It registers a layer, a kernel and an actor
// kind as a plugin would: without TROUPE_PLUGIN they reach troupe's registries at once,
// inside dlopen, and the failed load must take them back before it closes the library
// (Note [undoing a failed load] in kernels/registration_journal.hpp); once a process that
// tried it crashed at exit in a registry's destructor, running this library's unmapped code.
#include "tests/plugins/scale_layer.hpp"
#include "troupe/actor_kind.hpp"
#include "troupe/kernel.hpp"

extern "C" int troupe_test_not_a_plugin_answer() {
  return 42;
}

namespace {

struct unmarked_op {
  static constexpr const char* name = "test_unmarked.op";
  using function = void (*)(const troupe::kernels::context&);
};

void unmarked_kernel(const troupe::kernels::context&) {}

TROUPE_REGISTER_KERNEL(unmarked_op, troupe::kernels::device_type::cpu, unmarked_kernel);

TROUPE_REGISTER_LAYER("test_unmarked_layer", "a layer of a library without TROUPE_PLUGIN",
                      scale_layer_factory(scale_fault::none));

TROUPE_REGISTER_ACTOR_KIND("test_unmarked_kind", "a kind of a library without TROUPE_PLUGIN",
                           troupe::accepts{"grads"}, troupe::emits{"grads"},
                           [](troupe::actor_spawn&) -> caf::actor { return {}; });

}  // namespace
