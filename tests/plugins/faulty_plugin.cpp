// faulty_plugin.cpp: a plugin whose layers break the layer contract, each in one way
// (tests/plugins/scale_layer.hpp): a wrong dx, a forward that puts another tensor into
// its output, a backward that throws. The runtime must name each failure.
#include "runtime/plugin/plugin.hpp"
#include "tests/plugins/scale_layer.hpp"

TROUPE_PLUGIN("troupe_test_faulty_plugin");

namespace {

TROUPE_REGISTER_LAYER("test_wrong_gradient", "test_scale whose dx forgets a (test plugin)",
                      [](troupe::layer_settings& s) {
                        return std::make_unique<scale_layer>(s, scale_fault::wrong_gradient);
                      });
TROUPE_REGISTER_LAYER("test_reassigned_output",
                      "test_scale whose forward returns a wider tensor (test plugin)",
                      [](troupe::layer_settings& s) {
                        return std::make_unique<scale_layer>(s, scale_fault::reassigned_output);
                      });
TROUPE_REGISTER_LAYER("test_throwing_backward", "test_scale whose backward throws (test plugin)",
                      [](troupe::layer_settings& s) {
                        return std::make_unique<scale_layer>(s, scale_fault::throwing_backward);
                      });

}  // namespace
