// session.hpp: one training run, from a checked config to a finished outcome.
//
// run_session() runs the session's phases in order (session.cpp): check the outputs,
// restore (everything that can be checked before anything is spawned: layer types and
// settings, shapes along the model, the actor graph, batch and data sizes, a checkpoint to
// resume; prepare.hpp), start the devices, spawn every actor the topology lists (through
// the actor kind registry), wire them, run until the trainer is done, collect the final
// parameters, finish (the trace, the outcome). One process, several nodes and a simulated
// run differ only in the run mode the phases call (run_modes.hpp). Errors in the input
// throw config_error / data_error before the first actor exists.
//
// Sessions share nothing: each has its own actor system, devices and trace recorder (with
// its own message log), so several may run in one process, one after the other or at once
// on separate threads, and their traces never mix.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "actors/session/cluster.hpp"
#include "actors/session/prepare.hpp"
#include "actors/trainer/trainer_actor.hpp"
#include "runtime/checkpoint/restore.hpp"
#include "runtime/collective/gloo_allreduce.hpp"
#include "runtime/core/simulation.hpp"
#include "runtime/config/config.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/graph/topology.hpp"

namespace troupe {

struct session_options {
  bool quiet = false;           // no progress output
  bool progress_bar = false;    // redraw a bar (a terminal) instead of printing lines
  bool keep_parameters = false; // copy the final parameters into the result
  std::int64_t sample_length = 300;  // a language model's text after training; 0: none
  /// Override [run] metrics and [run] trace when set; "" writes none (--metrics "").
  std::optional<std::string> metrics_path;
  std::optional<std::string> trace_path;
  bool log_messages = false;    // print messages as they are handled...
  std::string log_filter;       // ...those matching this (trace::recorder_settings)
  double watchdog = -1;         // overrides [run] watchdog (seconds) when >= 0
  std::string resume;           // continue from this checkpoint (prepare_session)
  /// Train, or evaluate `resume`'s parameters once (`troupe eval`), on `evaluation`.
  session_purpose purpose = session_purpose::train;
  evaluated_split evaluation = evaluated_split::automatic;
  bool watch_interrupts = false;  // stop cleanly on SIGINT / SIGTERM (actors/trainer/interrupts.hpp)
  /// This run's own stop request (a signal number once set: the clean stop SIGINT asks
  /// for, of this session only) and each metrics line as it is made: how a program that
  /// runs sessions on threads of its own (the Python module) stops and watches one.
  std::shared_ptr<const std::atomic<int>> stop_request;
  std::function<void(const std::string&)> on_record;
  /// This process's node in a run over several ([cluster] nodes > 1): which rank, where
  /// the coordinator is, the secret, the config's identity (actors/session/cluster.hpp).
  std::optional<cluster_node> cluster;
  /// Where gloo averagers rendezvous: empty store, an in-process one for this session;
  /// empty prefix, one unique to this session. A multi-node run passes the store every
  /// node reaches and the run's prefix (the same on every node), and the node's address.
  gloo_rendezvous gloo;
  /// A simulated run (`troupe simulate`): every device of every node in this process, as
  /// streams on `simulation`'s virtual clock (runtime/core/simulation.hpp); the trace is
  /// recorded in virtual time and returned in session_result::trace_json.
  simulation* world = nullptr;
  /// The config's data set, already loaded (a simulation's, which prepared the session to
  /// price its jobs); null: run_session loads it.
  std::shared_ptr<const dataset_split> data;
};

struct session_result {
  run_outcome outcome;
  /// The trace file written (this node's), or empty: none was asked for, it went to node0,
  /// or writing it failed (then outcome says so).
  std::string trace_written;
  /// Final parameters per model layer (empty for parameterless layers), host copies;
  /// filled only with session_options::keep_parameters.
  std::vector<std::vector<std::vector<float>>> parameters;
  /// The parameterised layers (index, type, each parameter's name and shape), with
  /// `parameters`: what names them as torch's state_dict does (parameter_name()).
  std::vector<model_layer> model;
  /// A language model's text ([data] source = "text"), written after training from the
  /// final parameters (host_model.hpp); empty otherwise.
  std::string sample;
  /// averaging = "async": staleness[s] updates were applied s updates after the version
  /// their gradients were computed on, over every layer's server (Note [asynchronous
  /// server] in actors/training/async_server.cpp); empty otherwise.
  std::vector<std::int64_t> staleness;
  /// A simulated run's trace (session_options::world), as `troupe run --trace` writes it.
  std::string trace_json;
};

session_result run_session(const run_config& config, const session_options& options);

}  // namespace troupe
