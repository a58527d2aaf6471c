// session_state.hpp: what the phases of one run build and share (actors/session/session.cpp),
// and what they hand the run mode (actors/session/run_modes.hpp). Internal to the session.
//
// Each field is filled by one phase and read by the later ones, in the order of the
// sections below. Not here: the order of the phases (session.cpp) and what differs between
// one process, several nodes and a simulation (run_modes.cpp).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/base/actor_kinds.hpp"
#include "actors/base/checkpoint_plan.hpp"
#include "actors/session/prepare.hpp"
#include "actors/session/session.hpp"
#include "actors/trainer/trainer_actor.hpp"
#include "runtime/collective/gloo_allreduce.hpp"
#include "runtime/model/interleaved_schedule.hpp"
#include "runtime/trace_tools/merge.hpp"
#include "troupe/device.hpp"
#include "troupe/trace.hpp"

namespace troupe {

struct session_state {
  session_state(const run_config& run_config, const session_options& run_options)
      : config(run_config), options(run_options) {}

  const run_config& config;
  const session_options& options;

  // ---- check outputs, restore ----
  int rank = 0;               // this process's node: 0 in one process and on node0
  bool every_node = false;    // every node's actors run here (a simulation)
  bool drives = true;         // this process spawns the trainer and the writer (not a worker)
  std::string metrics_path;   // empty: none (a worker's is always empty)
  std::string trace_path;     // this node's trace file; empty: none
  std::string resume;         // the checkpoint to continue from; empty: step 0
  session_prepared prepared;

  // ---- start devices ----
  std::shared_ptr<trace::recorder> recorder;
  std::unique_ptr<trace::thread_binding> bound_here;  // the session's own thread
  std::unique_ptr<device_set> devices;                // this node's
  std::map<std::string, std::uint32_t> tracks;        // actor name -> trace track
  std::uint32_t trainer_track = 0;

  // ---- spawn, wire (only while the actor system lives: cleared before it goes) ----
  caf::actor_system* system = nullptr;
  std::shared_ptr<trainer_settings> trainer_config;
  caf::actor trainer;  // node0's, on every node
  checkpoint_plan checkpoints;
  std::map<std::string, caf::actor> spawned;   // this node's actors
  std::map<std::string, caf::actor> everyone;  // the run's, once known (the driving node)
  gloo_rendezvous gloo;                        // where gloo averagers meet (spawn_context)
  stage_sequencers sequencers;                 // interleaved pipelines' turns (spawn_context)
  bf16_readers readers_in_bf16;                // layers making bf16 activations (spawn_context)

  // ---- run, collect, finish ----
  std::shared_ptr<run_outcome> outcome = std::make_shared<run_outcome>();
  session_result result;
  std::vector<trace::node_trace> node_traces;  // the workers', collected by node0
  bool trace_sent = false;                     // a worker's went to node0

  const topology& graph() const { return prepared.graph; }

  /// Whether actor `a` of the plan runs in this process.
  bool runs_here(const actor_plan& a) const { return every_node || a.device.node == rank; }

  /// Whether the loader sends batches to a first layer on this node from another node:
  /// then this node assembles them from their rows (batch_assembler_actor.hpp).
  /// The nodes running here whose layers take a loader's batches from another node: each
  /// gets a batch assembler (every node of a simulated run, this node of a real one).
  std::vector<int> batch_assembler_nodes() const;

  /// Sends each of this node's actors its wiring (every wire that starts or ends at it,
  /// the peers' handles from `everyone`), and the batch assembler its trainer.
  void wire_local(caf::scoped_actor& self) const;

  /// Stops this node's actors, and the trainer and the writer where this node drives the
  /// run: a run that fails before it starts must not leave the actor system waiting for
  /// actors that will never be told to finish.
  void stop_spawned() const;

  /// This node's trace as JSON, with what a reader needs without the config (the wiring
  /// and how the run went).
  std::string trace_json(const run_outcome& how) const;

  /// Drops every handle of the actor system's (before it goes).
  void leave_actor_system();
};

}  // namespace troupe
