// throwing_registration_plugin.cpp: a plugin whose second registration throws when the
// loader commits it, after the first went in: the load must fail naming it and take the
// first back (Note [undoing a failed load] in kernels/registration_journal.hpp).
#include <stdexcept>

#include "tests/plugins/scale_layer.hpp"
#include "troupe/plugin.hpp"

TROUPE_PLUGIN("troupe_test_throwing_registration");

namespace {

TROUPE_REGISTER_LAYER("test_registered_before_the_throw", "committed first (test plugin)",
                      scale_layer_factory(scale_fault::none));

// What a registration line records, with a commit that fails (as a registry of the
// plugin's own, filled by the commit, might).
const bool throwing_entry = [] {
  troupe::detail::deferred_registrations().push_back(troupe::detail::deferred_registration{
      "layer type 'test_throwing_registration'", [] { return std::string{}; },
      [] { throw std::runtime_error("this registration fails on purpose"); }});
  return true;
}();

}  // namespace
