// actor_kinds.hpp: the registry of actor kinds a topology can name.
//
// Each kind ("data_loader", "layer", "loss", "averager", "optimizer", and any a plugin
// adds) has a factory that spawns one actor from its actor_plan and the run's context.
// The actor then receives a wiring_msg with its wires before the run starts, so a kind
// needs no knowledge of the others: the session spawns whatever the topology lists.
// Built-in kinds register at the end of their actor's file, like layers do.
//
// The built-in kinds have their signatures in the runtime already
// (runtime/graph/actor_signature.hpp) and register with TROUPE_REGISTER_BUILTIN_ACTOR_KIND,
// whose factory sees the whole plan and run. Custom kinds (plugins) register through the
// public troupe/actor_kind.hpp, with a signature and a factory that sees only its own
// [[actor]] table (actor_spawn); both end up in this one registry.
//
// Every actor but the data loader is placed on its plan's device: its handlers run on
// that device's stream thread, between jobs (actors/base/device_scheduler.hpp).
#pragma once

#include <caf/all.hpp>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/base/checkpoint_plan.hpp"
#include "actors/base/run_plan.hpp"
#include "runtime/checkpoint/restore.hpp"
#include "runtime/collective/gloo_allreduce.hpp"
#include "runtime/config/config.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/graph/actor_signature.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/model/interleaved_schedule.hpp"
#include "runtime/model/lr_schedule.hpp"
#include "troupe/actor_kind.hpp"

namespace troupe {

/// What a factory may use to build its actor. Everything outlives the actors.
/// By layer actor name: whether every layer reading its activations takes them in bf16
/// (bf16_readers_of in actors/training/layer_actor.hpp, Note [bf16 activations]).
using bf16_readers = std::unordered_map<std::string, bool>;

struct spawn_context {
  caf::actor_system& system;
  device_set& devices;
  const run_config& config;
  const topology& graph;
  const run_plan& plan;
  const lr_schedule& schedule;
  std::shared_ptr<const dataset_split> data;
  const run_start& start;  // where the optimizers start (a checkpoint, init_from)
  const checkpoint_plan& checkpoints;  // when the optimizers send the writer copies
  const gloo_rendezvous& gloo;         // where gloo averagers meet (store set)
  const stage_sequencers& sequencers;  // interleaved pipelines: each device's turns
  const bf16_readers& readers_in_bf16;  // layer actors whose readers take bf16 activations
};

using actor_factory = std::function<caf::actor(const actor_plan&, spawn_context&)>;

/// Registers a built-in kind (one whose signature the runtime has); twice throws.
void register_builtin_actor_kind(const std::string& kind, const std::string& description,
                                 actor_factory factory);

/// Spawns the actor `plan` describes; an unknown kind is a config_error at its position,
/// naming the nearest registered kind.
caf::actor spawn_actor(const actor_plan& plan, spawn_context& context);

std::vector<std::pair<std::string, std::string>> registered_actor_kinds();

/// "actor kind 'x' is registered twice": the clash message.
inline std::string actor_kind_registered_twice(const std::string& kind) {
  return "actor kind '" + kind + "' is registered twice";
}

/// What TROUPE_REGISTER_BUILTIN_ACTOR_KIND makes: registers at static initialisation (a
/// clash is kept for check_builtin_registrations()); never throws.
struct builtin_actor_kind_registrar {
  builtin_actor_kind_registrar(const std::string& kind, const std::string& description,
                               actor_factory factory) {
    detail::register_or_defer(
        "actor kind '" + kind + "'",
        [kind] { return has_actor_kind(kind) ? actor_kind_registered_twice(kind) : std::string{}; },
        [kind, description, factory = std::move(factory)] {
          register_builtin_actor_kind(kind, description, factory);
        });
  }
};

}  // namespace troupe

/// Makes a built-in actor kind available to topologies by name: (kind, description, factory).
#define TROUPE_REGISTER_BUILTIN_ACTOR_KIND(kind, description, ...)        \
  static const ::troupe::builtin_actor_kind_registrar TROUPE_KIND_CONCAT( \
      troupe_builtin_kind_registrar_, __LINE__) {                         \
    kind, description, __VA_ARGS__                                        \
  }
