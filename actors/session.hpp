// session.hpp: one training run, from a checked config to a finished outcome.
//
// run_session() checks everything that can be checked before anything is spawned (layer
// types and settings, shapes along the model, the actor graph, batch and data sizes,
// devices), loads the data, creates the devices, spawns every actor the topology lists
// (through the actor kind registry), sends each its wiring, runs until the trainer is
// done, and returns the outcome and the final parameters. Errors in the input throw
// config_error / data_error before the first actor exists.
//
// Sessions share nothing: each has its own actor system, devices and trace recorder (with
// its own message log), so several may run in one process, one after the other or at once
// on separate threads, and their traces never mix.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "actors/cluster.hpp"
#include "actors/trainer_actor.hpp"
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
  std::string metrics_path;     // overrides [run] metrics when not empty
  std::string trace_path;       // overrides [run] trace when not empty
  bool log_messages = false;    // print messages as they are handled...
  std::string log_filter;       // ...those matching this (trace::recorder_settings)
  double watchdog = -1;         // overrides [run] watchdog (seconds) when >= 0
  std::string resume;           // continue from this checkpoint (prepare_session)
  bool watch_interrupts = false;  // stop cleanly on SIGINT / SIGTERM (actors/interrupts.hpp)
  /// This process's node in a run over several ([cluster] nodes > 1): which rank, where
  /// the coordinator is, the secret, the config's identity (actors/cluster.hpp).
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
  /// A language model's text ([data] source = "text"), written after training from the
  /// final parameters (host_model.hpp); empty otherwise.
  std::string sample;
  /// A simulated run's trace (session_options::world), as `troupe run --trace` writes it.
  std::string trace_json;
};

/// The model's per-sample shapes: shapes[i] is the input of layer i, shapes.back() the
/// output. Throws config_error at the layer that does not fit.
std::vector<shape_t> check_model(const run_config& config, std::int64_t input_features,
                                 std::int64_t classes, std::int64_t positions = 1);

/// Everything a run needs that can be checked before spawning: data, the actor graph
/// (expanded from the shorthand or read from an explicit config, then validated), how the
/// run is cut into steps, and the learning-rate schedule. `troupe plan` stops here.
struct session_prepared {
  std::shared_ptr<const dataset_split> data;
  topology graph;
  run_plan plan;
  lr_schedule schedule;
  std::vector<model_layer> model;  // the parameterised layers, for checkpoints
  run_start start;                 // step 0 from the seed, or a checkpoint's
};

/// `resume`: a checkpoint (or a directory of them, meaning its newest complete one) to
/// continue from; it is verified and must fit the model (data_error, exit 2, otherwise).
session_prepared prepare_session(const run_config& config, const std::string& resume = "");

/// The same with the data given rather than loaded: of it only the counts, features and
/// classes are read (the config fuzzer, tests/fuzz/fuzz_config.cpp, passes no samples).
session_prepared prepare_session(const run_config& config,
                                 std::shared_ptr<const dataset_split> data,
                                 const std::string& resume = "");

session_result run_session(const run_config& config, const session_options& options);

}  // namespace troupe
