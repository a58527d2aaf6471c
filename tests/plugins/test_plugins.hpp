// test_plugins.hpp: where CMake put the test plugins (tests/plugins/*.cpp), for the tests
// that load them.
#pragma once

#include <string>

#include "runtime/plugin/plugin.hpp"

namespace test_plugins {

/// test_scale and test_grad_scaler.
inline std::string good() { return TROUPE_TEST_PLUGIN_GOOD; }
/// test_wrong_gradient, test_reassigned_output, test_throwing_backward.
inline std::string faulty() { return TROUPE_TEST_PLUGIN_FAULTY; }
/// A shared library without TROUPE_PLUGIN.
inline std::string not_a_plugin() { return TROUPE_TEST_NOT_A_PLUGIN; }
/// Exports ABI version TROUPE_ABI_VERSION + 1.
inline std::string abi_mismatch() { return TROUPE_TEST_PLUGIN_ABI_MISMATCH; }
/// Registers "linear" again.
inline std::string clashing() { return TROUPE_TEST_PLUGIN_CLASHING; }

/// Loads the good and the faulty plugin (a no-op once they are loaded).
inline void load() {
  troupe::load_plugin(good());
  troupe::load_plugin(faulty());
}

}  // namespace test_plugins
