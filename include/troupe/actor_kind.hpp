// actor_kind.hpp: adding an actor kind that topologies can place on a wire (public facade).
//
// A custom kind is an actor class on troupe's own base (troupe/device_actor.hpp, or
// troupe/grads_filter.hpp for one-in-one-out actors on a grads wire), which owns the
// protocol every built-in actor speaks, and one registration line that names the wires
// it takes and the factory that spawns it from its [[actor]] table:
//
//     TROUPE_REGISTER_ACTOR_KIND("grad_clipper", "clips a layer's gradients (max_norm)",
//                                troupe::accepts{"grads"}, troupe::emits{"grads"},
//                                [](troupe::actor_spawn& spawn) {
//                                  auto max_norm = spawn.settings.number("max_norm", 1e-30, 1e30);
//                                  return spawn.system.spawn<grad_clipper>(spawn.name, max_norm,
//                                                                          &spawn.on);
//                                });
//
// The table's keys other than name, kind, device, replica, stage and layer are its
// settings, read through spawn.settings (typed, ranges checked, errors at file:line:col);
// a key the factory did not read is refused once it returns, as for layers.
// validate_topology() checks every wire to and from the kind against accepts / emits.
//
// The actor is placed on its device: its handlers run on that device's stream thread,
// between jobs. A handler submits work and returns; it must never block (and never wait
// for its own stream).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "troupe/device.hpp"
#include "troupe/device_actor.hpp"
#include "troupe/grads_filter.hpp"
#include "troupe/registration.hpp"
#include "troupe/settings.hpp"

namespace troupe {

/// The wire kinds a custom kind accepts (wires that end at it): "activations", "labels",
/// "grads", "ring", "params"...
struct accepts {
  accepts(std::initializer_list<std::string> kinds) : wire_kinds(kinds) {}
  std::vector<std::string> wire_kinds;
};

/// ... and those it emits (wires that start at it).
struct emits {
  emits(std::initializer_list<std::string> kinds) : wire_kinds(kinds) {}
  std::vector<std::string> wire_kinds;
};

/// What a custom kind's factory builds its actor from: one [[actor]] table.
struct actor_spawn {
  caf::actor_system& system;
  const std::string& name;     // the [[actor]] name, unique in the run
  device& on;                  // the device it is placed on (outlives the actor)
  troupe::settings& settings;  // the table's own keys
  std::int32_t replica = -1;   // -1 when the table gives none
  std::int32_t stage = -1;
  std::int32_t layer = -1;
};

using custom_actor_factory = std::function<caf::actor(actor_spawn&)>;

/// Registers a custom kind with its signature. A kind registered twice, or a signature
/// naming a wire kind that does not exist, throws (actor_kind_conflict says which).
void register_actor_kind(const std::string& kind, const std::string& description, const accepts& in,
                         const emits& out, custom_actor_factory factory);

/// Why `kind` with that signature cannot be registered now, or "".
std::string actor_kind_conflict(const std::string& kind, const accepts& in, const emits& out);

bool has_actor_kind(const std::string& kind);

/// Spawns an actor of a registered custom kind as a run does (settings read, unread keys
/// refused), for tests of a plugin's kind; the caller sends it its wiring_msg. Throws
/// config_error for an unknown kind or bad settings.
caf::actor spawn_custom_actor(const std::string& kind, actor_spawn& spawn);

/// What TROUPE_REGISTER_ACTOR_KIND makes: registers at construction, or inside a plugin
/// records the registration for the loader (Note [plugin registrations] in
/// troupe/registration.hpp); never throws.
struct TROUPE_LOCAL actor_kind_registrar {
  actor_kind_registrar(const std::string& kind, const std::string& description, const accepts& in,
                       const emits& out, custom_actor_factory factory) {
    detail::register_or_defer(
        "actor kind '" + kind + "'", [kind, in, out] { return actor_kind_conflict(kind, in, out); },
        [kind, description, in, out, factory = std::move(factory)] {
          register_actor_kind(kind, description, in, out, factory);
        });
  }
};

}  // namespace troupe

#define TROUPE_KIND_CONCAT_INNER(a, b) a##b
#define TROUPE_KIND_CONCAT(a, b) TROUPE_KIND_CONCAT_INNER(a, b)

/// Makes an actor kind available to topologies by name:
/// (kind, description, troupe::accepts{...}, troupe::emits{...}, factory).
#define TROUPE_REGISTER_ACTOR_KIND(kind, description, in, out, ...)                      \
  static const ::troupe::actor_kind_registrar TROUPE_KIND_CONCAT(troupe_kind_registrar_, \
                                                                 __COUNTER__) {          \
    kind, description, in, out, __VA_ARGS__                                              \
  }
