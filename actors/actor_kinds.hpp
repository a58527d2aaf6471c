// actor_kinds.hpp: the registry of actor kinds a topology can name.
//
// Each kind ("data_loader", "layer", "loss", "averager", "optimizer", and any a plugin
// adds) has a factory that spawns one actor from its actor_plan and the run's context.
// The actor then receives a wiring_msg with its wires before the run starts, so a kind
// needs no knowledge of the others: the session spawns whatever the topology lists.
// Built-in kinds register at the end of their actor's file, like layers do.
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/data_loader_actor.hpp"
#include "runtime/config.hpp"
#include "runtime/dataset.hpp"
#include "runtime/lr_schedule.hpp"
#include "runtime/topology.hpp"

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

struct actor_kind_registrar {
  actor_kind_registrar(const std::string& kind, const std::string& description,
                       actor_factory factory) {
    try {
      register_actor_kind(kind, description, std::move(factory));
    } catch (const std::exception& e) {
      kernels::record_registration_error(e.what());  // reported by the plugin loader
    }
  }
};

}  // namespace troupe

#define TROUPE_KIND_CONCAT_INNER(a, b) a##b
#define TROUPE_KIND_CONCAT(a, b) TROUPE_KIND_CONCAT_INNER(a, b)

/// Makes an actor kind available to topologies by name.
#define TROUPE_REGISTER_ACTOR_KIND(kind, description, ...)                               \
  static const ::troupe::actor_kind_registrar TROUPE_KIND_CONCAT(troupe_kind_registrar_,  \
                                                                 __LINE__) {              \
    kind, description, __VA_ARGS__                                                        \
  }
