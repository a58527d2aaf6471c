// test_plugins.hpp: where CMake put the test plugins (tests/plugins/*.cpp), for the tests
// that load them.
#pragma once

#include <string>

#include "runtime/plugin/plugin.hpp"

namespace test_plugins {

/// test_scale and test_grad_scaler.
inline std::string good() { return TROUPE_TEST_PLUGIN_GOOD; }
/// test_wrong_gradient, test_throwing_backward, and the actor kind test_throwing_task.
inline std::string faulty() { return TROUPE_TEST_PLUGIN_FAULTY; }
/// A shared library without TROUPE_PLUGIN.
inline std::string not_a_plugin() { return TROUPE_TEST_NOT_A_PLUGIN; }
/// Exports ABI version TROUPE_ABI_VERSION + 1; would add test_abi_mismatch_layer, the
/// kernel test_abi_mismatch.op and the actor kind test_abi_mismatch_kind.
inline std::string abi_mismatch() { return TROUPE_TEST_PLUGIN_ABI_MISMATCH; }
/// Registers "linear" again, besides test_clash_innocent, test_clash.op, test_clash_kind.
inline std::string clashing() { return TROUPE_TEST_PLUGIN_CLASHING; }

/// Loads the good and the faulty plugin (a no-op once they are loaded).
inline void load() {
  troupe::load_plugin(good());
  troupe::load_plugin(faulty());
}

}  // namespace test_plugins
