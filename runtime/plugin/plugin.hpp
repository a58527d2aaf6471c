// plugin.hpp: the runtime's side of plugins: loading those a config names, and checking
// troupe's own registrations. What makes a library a plugin, and load_plugin(), are the
// public troupe/plugin.hpp.
#pragma once

#include "runtime/config/config.hpp"
#include "troupe/plugin.hpp"

namespace troupe {

/// Loads the plugins a config's [run] plugins lists, relative to the config's directory.
/// Throws config_error at the entry of a plugin that does not load.
void load_config_plugins(const run_config& config);

/// The name of the loaded plugin that registered `what` ("layer type 'swish'", "loss 'focal'",
/// "actor kind 'clipper'": the registration lines' words), or "" for troupe's own.
std::string plugin_that_registered(const std::string& what);

/// Throws check_failure if a built-in registration failed at start-up (a name registered
/// twice inside troupe itself).
void check_builtin_registrations();

}  // namespace troupe
