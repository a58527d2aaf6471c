// registration.hpp: how the one-line registrations (TROUPE_REGISTER_LAYER, _KERNEL,
// _ACTOR_KIND) behave inside troupe and inside a plugin.
//
// Note [plugin registrations]
// Inside libtroupe (and a program linked to it) a registration line registers at static
// initialisation, as it always did; a clash is kept for check_builtin_registrations().
// Inside a plugin it must not: dlopen runs a library's static initialisers before the
// loader can look at it, and a plugin built against another ABI must not reach troupe's
// registries at all. So inside a plugin a registration line only appends to a list that is
// local to the plugin (hidden symbols: every shared object has its own), and the loader,
// once the ABI check has passed, calls the plugin's exported troupe_plugin_register()
// (written by TROUPE_PLUGIN), which hands that list over. The loader checks every entry
// against the registries and against each other first, and commits them only if none
// clashes: a rejected plugin leaves nothing registered.
//
// A library is a plugin when it contains TROUPE_PLUGIN: that defines the hidden symbol
// troupe_plugin_marker, which registering_in_plugin() tests (a weak hidden reference,
// resolved when the library is linked, so it costs no call into troupe). Everything on
// that path (the registrars, register_or_defer) is TROUPE_LOCAL, hidden: an inline
// function of default visibility would be bound by the dynamic linker to libtroupe's copy
// of it (loaded first, RTLD_GLOBAL), which registers at once.
//
// It sits in kernels/ because kernels register too and include nothing above them. Not
// here: the registries themselves (runtime/model/layer.hpp, include/troupe/kernel.hpp,
// actors/base/actor_kinds.hpp) and the loader (runtime/plugin/).
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

/// Hidden: each shared object keeps its own copy (Note [plugin registrations]).
#define TROUPE_LOCAL __attribute__((visibility("hidden")))

extern "C" {
/// Defined (hidden) by TROUPE_PLUGIN in a plugin; absent (null) everywhere else.
extern __attribute__((weak, visibility("hidden"))) const char troupe_plugin_marker;
}

namespace troupe::detail {

/// One registration a plugin recorded, to be made by the loader after the ABI check.
struct deferred_registration {
  std::string what;                       // "layer type 'swish'": unique per registry entry
  std::function<std::string()> conflict;  // why it cannot be made now, or ""
  std::function<void()> commit;           // makes it (after every conflict() was "")
};

/// True in a shared object that contains TROUPE_PLUGIN.
TROUPE_LOCAL inline bool registering_in_plugin() { return &troupe_plugin_marker != nullptr; }

/// This shared object's deferred registrations (hidden: one list per plugin).
TROUPE_LOCAL inline std::vector<deferred_registration>& deferred_registrations() {
  static std::vector<deferred_registration> list;
  return list;
}

/// Kept by the registration lines of libtroupe and of programs (never thrown from a static
/// initialiser); reported by check_builtin_registrations().
void record_registration_error(const std::string& message);
std::vector<std::string> take_registration_errors();

/// What every registration line does: in a plugin, defer; elsewhere, `commit` now and keep
/// an error for later.
TROUPE_LOCAL inline void register_or_defer(std::string what, std::function<std::string()> conflict,
                                           std::function<void()> commit) {
  if (registering_in_plugin()) {
    deferred_registrations().push_back(
        deferred_registration{std::move(what), std::move(conflict), std::move(commit)});
    return;
  }
  try {
    commit();
  } catch (const std::exception& e) {
    record_registration_error(e.what());
  }
}

}  // namespace troupe::detail
