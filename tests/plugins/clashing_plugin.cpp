// clashing_plugin.cpp: a plugin that registers the built-in layer name "linear" again,
// for load_plugin's "registers names that exist" error.
#include "runtime/plugin/plugin.hpp"
#include "tests/plugins/scale_layer.hpp"

TROUPE_PLUGIN("troupe_test_clashing_plugin");

namespace {

TROUPE_REGISTER_LAYER("linear", "a second 'linear' (test plugin)", [](troupe::layer_settings& s) {
  return std::make_unique<scale_layer>(s, scale_fault::none);
});

}  // namespace
