// actor_kinds.hpp: the registry of actor kinds a topology can name.
//
// Each kind ("data_loader", "layer", "loss", "averager", "optimizer", and any a plugin
// adds) has a factory that spawns one actor from its actor_plan and the run's context.
// The actor then receives a wiring_msg with its wires before the run starts, so a kind
// needs no knowledge of the others: the session spawns whatever the topology lists.
// Built-in kinds register at the end of their actor's file, like layers do.
//
// A kind also says which wires it takes (runtime/graph/actor_signature.hpp), so that explicit
// configs can place it and validate_topology() can check its wires. The five built-in
// kinds have their signatures in the runtime already; any other kind declares its own:
//
//     TROUPE_REGISTER_ACTOR_KIND("grad_clipper", "clips a layer's gradients (max_norm)",
//                                troupe::accepts{"grads"}, troupe::emits{"grads"},
//                                [](const troupe::actor_plan& plan, troupe::spawn_context& c) {
//                                  return c.system.spawn<grad_clipper>(plan.name, ...);
//                                });
//
// Its [[actor]] table's keys other than name, kind, device, replica, stage and layer
// arrive in plan.settings (values with their positions, for the factory to check).
//
// Every actor but the data loader is placed on its plan's device: its handlers run on
// that device's stream thread, between jobs (actors/device_scheduler.hpp). A handler
// submits work and returns; it must never block (and never wait for its own stream).
#pragma once

#include <caf/all.hpp>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/data_loader_actor.hpp"
#include "runtime/graph/actor_signature.hpp"
#include "runtime/config/config.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/model/lr_schedule.hpp"
#include "runtime/graph/topology.hpp"

namespace troupe {

/// What a factory may use to build its actor. Everything outlives the actors.
struct spawn_context {
  caf::actor_system& system;
  device_set& devices;
  const run_config& config;
  const topology& graph;
  const run_plan& plan;
  const lr_schedule& schedule;
  std::shared_ptr<const dataset_split> data;
};

using actor_factory = std::function<caf::actor(const actor_plan&, spawn_context&)>;

/// Registers an actor kind; a kind registered twice throws.
void register_actor_kind(const std::string& kind, const std::string& description,
                         actor_factory factory);

/// Spawns the actor `plan` describes; an unknown kind is a config_error at its position,
/// naming the nearest registered kind.
caf::actor spawn_actor(const actor_plan& plan, spawn_context& context);

bool has_actor_kind(const std::string& kind);
std::vector<std::pair<std::string, std::string>> registered_actor_kinds();

/// The wire kinds a registered kind accepts (wires that end at it)...
struct accepts {
  accepts(std::initializer_list<std::string> kinds) : wire_kinds(kinds) {}
  std::vector<std::string> wire_kinds;
};

/// ... and those it emits (wires that start at it).
struct emits {
  emits(std::initializer_list<std::string> kinds) : wire_kinds(kinds) {}
  std::vector<std::string> wire_kinds;
};

/// Registers a kind with its signature. A kind registered twice, or a signature naming a
/// wire kind that does not exist, throws.
void register_actor_kind(const std::string& kind, const std::string& description,
                         const accepts& in, const emits& out, actor_factory factory);

/// "actor kind 'x' is registered twice": the clash message.
inline std::string actor_kind_registered_twice(const std::string& kind) {
  return "actor kind '" + kind + "' is registered twice";
}

/// What TROUPE_REGISTER_ACTOR_KIND makes: registers at construction, or inside a plugin
/// records the registration for the loader (Note [plugin registrations] in
/// kernels/registration.hpp); never throws.
struct TROUPE_LOCAL actor_kind_registrar {
  /// A built-in kind, whose signature the runtime has. Another kind registered this way
  /// accepts and emits no wires (so any wire to it is refused, naming it).
  actor_kind_registrar(const std::string& kind, const std::string& description,
                       actor_factory factory) {
    detail::register_or_defer(
        "actor kind '" + kind + "'",
        [kind] { return has_actor_kind(kind) ? actor_kind_registered_twice(kind) : std::string{}; },
        [kind, description, factory = std::move(factory)] {
          register_actor_kind(kind, description, factory);
        });
  }
  actor_kind_registrar(const std::string& kind, const std::string& description, const accepts& in,
                       const emits& out, actor_factory factory) {
    detail::register_or_defer(
        "actor kind '" + kind + "'",
        [kind, in, out]() -> std::string {
          if (has_actor_kind(kind) || find_actor_signature(kind) != nullptr)
            return actor_kind_registered_twice(kind);
          const auto& known = wire_kinds();
          for (const auto* list : {&in.wire_kinds, &out.wire_kinds})
            for (const auto& wire : *list)
              if (std::find(known.begin(), known.end(), wire) == known.end())
                return "actor kind '" + kind + "' names wire kind '" + wire +
                       "', which does not exist";
          return {};
        },
        [kind, description, in, out, factory = std::move(factory)] {
          register_actor_kind(kind, description, in, out, factory);
        });
  }
};

}  // namespace troupe

#define TROUPE_KIND_CONCAT_INNER(a, b) a##b
#define TROUPE_KIND_CONCAT(a, b) TROUPE_KIND_CONCAT_INNER(a, b)

/// Makes an actor kind available to topologies by name: (kind, description, factory) for
/// the built-in kinds, (kind, description, troupe::accepts{...}, troupe::emits{...},
/// factory) for any other.
#define TROUPE_REGISTER_ACTOR_KIND(kind, description, ...)                               \
  static const ::troupe::actor_kind_registrar TROUPE_KIND_CONCAT(troupe_kind_registrar_,  \
                                                                 __LINE__) {              \
    kind, description, __VA_ARGS__                                                        \
  }
