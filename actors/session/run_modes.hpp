// run_modes.hpp: how a run differs between one process, several nodes and a simulation.
//
// The session (session.cpp) runs the same phases in every mode: check outputs, restore,
// start devices, spawn, wire, run, collect, finish. What differs is asked of the mode
// the run was given, never branched on inside a phase:
//   one process       every device and actor here; the session drives the run.
//   simulated         one process whose devices are streams on a simulation's virtual
//                     clock (`troupe simulate`); its trace comes back as text.
//   coordinator       node0 of several: drives the run, and lets the workers join
//                     (coordinator_gate: rendezvous, roster, watch, their traces).
//   worker            node k > 0: joins node0's run with its actors and serves it
//                     (worker_link) until node0 says the run is over.
//
// Not here: the joining itself (cluster.hpp), the actors (spawned by kind).
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <optional>

#include "actors/session/session_state.hpp"
#include "runtime/collective/gloo_allreduce.hpp"
#include "runtime/net/shared_memory.hpp"
#include "troupe/device.hpp"
#include "troupe/trace.hpp"

namespace troupe {

/// Tensors to the other nodes of this machine go through shared memory (Note [tensors
/// through shared memory] in runtime/net/shared_memory.cpp): the links are made before the
/// actor system and gone after it.
struct process_links {
  std::optional<net::shm_links> links;
  std::optional<net::shm_links::scope> in_use;
};

class run_mode {
 public:
  virtual ~run_mode() = default;

  /// This process's node (rank 0 unless it is a worker), and whether it drives the run:
  /// spawns the trainer and the checkpoint writer, starts the run, collects its result.
  virtual int rank() const { return 0; }
  virtual bool drives() const { return true; }
  /// Whether every node's actors run in this process (a simulation plays them all).
  virtual bool plays_every_node() const { return false; }

  // ---- start devices ----
  /// The trace recorder's clock and whether it records although no trace file was asked
  /// for (a simulation's trace is its result).
  virtual void set_clock(trace::recorder_settings& settings) const { (void)settings; }
  /// This node's devices: a core each (after the cores of this machine's nodes before it),
  /// or a GPU; a cuda:N this machine lacks is the config's error, where it names it.
  virtual std::unique_ptr<device_set> make_devices(const session_state& s) const;
  /// Told the tracks of every actor, once registered.
  virtual void tracks_registered(const std::map<std::string, std::uint32_t>& tracks) const {
    (void)tracks;
  }
  /// Whether the checkpoint writer gets a thread of its own (not in virtual time).
  virtual bool writer_on_own_thread() const { return true; }

  // ---- the actor system ----
  /// Before it exists: CAF's network and the shared-memory links of several nodes.
  virtual void configure(caf::actor_system_config& config, process_links& links,
                         const session_state& s) const {
    (void)config, (void)links, (void)s;
  }
  /// As soon as it exists (a simulation routes every actor through virtual time).
  virtual void started(caf::actor_system& system) const { (void)system; }

  // ---- spawn ----
  /// Once the trainer and the writer exist (or not, on a worker): joins the run of
  /// several nodes; a worker learns node0's trainer and writer here.
  virtual void join(session_state& s) { (void)s; }
  /// Where the gloo averagers rendezvous: `given` when set, else this process's own
  /// store and a prefix unique to the session (over several nodes: node0's, the run's).
  virtual gloo_rendezvous gloo(const session_state& s, gloo_rendezvous given) const;

  // ---- wire, run, collect, finish ----
  virtual void wire(session_state& s) = 0;
  virtual void run(session_state& s) = 0;
  virtual void collect(session_state& s) = 0;
  /// Tells every actor the run is over (and the workers how it ended).
  virtual void finish(session_state& s) = 0;
  /// Whether the trace comes back in the result (a simulation's) rather than a file only.
  virtual bool returns_trace() const { return false; }

  /// Drops what lives in the actor system (a scoped actor, a gate, a link) before it goes.
  virtual void close() {}
};

/// The mode of a run of `graph` in this process: several nodes need options.cluster to be
/// this process's node of exactly that many (user_error otherwise); TLS does not cover
/// gloo's own connections (config_error at the averaging key).
std::unique_ptr<run_mode> make_run_mode(const session_state& s);

}  // namespace troupe
