// abi_mismatch_plugin.cpp: a plugin that claims to be built against the next ABI version,
// written out by hand instead of TROUPE_PLUGIN, for load_plugin's ABI check.
#include "runtime/plugin/plugin.hpp"

extern "C" __attribute__((visibility("default"))) int troupe_plugin_abi_version() {
  return TROUPE_ABI_VERSION + 1;
}

extern "C" __attribute__((visibility("default"))) const char* troupe_plugin_name() {
  return "troupe_test_abi_mismatch";
}
