// simulate.hpp: predicting a wiring before it runs (`troupe simulate`, issue 16).
//
// simulate_run() runs the config as `troupe run` would, the same actors, credits, turns,
// priorities and stream lanes, but on simulated devices (runtime/core/simulation.hpp):
// each job takes the time the calibration of this machine says it takes (calibrate.hpp),
// scaled to the rows it computes, and a copy between nodes takes a link's latency plus
// its bytes over the link's bandwidth. Any number of devices and nodes run in this one
// process. The run is recorded as a trace in virtual time, and the prediction is read
// from it with the same tools as a measured trace: step time and samples/s (Note [step
// time] in runtime/trace_tools/steps.hpp), the bubble of each pipeline stage (summary.hpp), each device's peak of micro-batches held
// and every step's critical path (critical_path.hpp). See Note [what a job costs] in the .cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/tools/calibrate.hpp"
#include "runtime/config/config.hpp"
#include "runtime/net/link_model.hpp"
#include "runtime/trace_tools/critical_path.hpp"
#include "runtime/trace_tools/trace_file.hpp"

namespace troupe {

/// What a handler keeps its device for when neither --handler-us nor the calibration says
/// (an explicit config's calibration does not measure it: Note [what a handler costs]).
constexpr double default_handler_us = 2;

struct simulate_options {
  std::int64_t steps = 20;  // training steps simulated (no evaluation, no checkpoints)
  link_cost link;           // between nodes, machines apart; not given: the nodes are
                            // processes of this machine (Note [nodes of one machine])
  double handler_us = -1;   // the device time of each message an actor handles; < 0: the
                            // calibration's measure, or default_handler_us without one
  double handover_us = -1;  // a message between threads; < 0: the calibration's
  int cores = 0;            // cores the devices share (0: a core each)
  double host_us = -1;      // a host actor's turn, of a core (with cores); < 0: the
                            // calibration's measure, or 0 without one
  double contention = -1;   // two devices of a node at once; < 0: the calibration's
};

struct stage_prediction {
  std::int64_t stage = 0;
  std::vector<std::string> devices;
  double bubble = 0;  // 1 - utilisation over the simulated steps
  double theory = 0;  // the schedule's, for these stages' costs (trace summary)
};

/// What a device holds at its peak (Note [what a device holds] in simulate.cpp).
struct device_memory {
  std::string device;
  std::int64_t held = 0;        // the most micro-batches its layers held at once
  std::int64_t peak_bytes = 0;  // the most bytes of tensors it held at once
};

struct prediction {
  std::string config;
  std::int64_t steps = 0;
  std::int64_t devices = 0;
  std::int64_t nodes = 1;
  std::int64_t replicas = 1;
  std::int64_t stages = 1;
  std::int64_t microbatches = 1;
  std::int64_t batch_size = 0;
  std::string schedule;
  double step_us = 0;        // the run's step time (Note [step time])
  double first_step_us = 0;  // the first: pipelines fill, pools warm
  double samples_per_second = 0;
  double theory_bubble = 0;  // (P - 1) / (M + P - 1) and the like (trace summary)
  std::vector<stage_prediction> pipeline;  // empty unless stages > 1
  /// Per device, its peak of micro-batches held (the layers' "stash") and of bytes.
  std::vector<device_memory> memory;
  trace_explanation explanation;  // every step's critical path
  std::string trace_json;         // the simulated run's trace, virtual times
  std::uint64_t jobs = 0;
  std::uint64_t unpriced_jobs = 0;  // jobs the calibration had no cost for (taken as 0)
  double wall_seconds = 0;          // what the simulation took here
  double handover_us = 0;           // what a message to another thread was taken to cost
  double handler_us = 0;
  double host_us = 0;               // what a host turn took of a core (with cores)
  double contention = 1;            // what a job took longer with another device computing
  std::string between_nodes;        // how messages between nodes were priced (with nodes)
  // The step's range from the calibration's spread of rounds (calibration::rounds_low,
  // rounds_high): the compute of a step as slow or fast as a tenth of the rounds were.
  double step_low_us = 0;
  double step_high_us = 0;
};

/// Runs `config` simulated. `costs` is a calibration of the same model (its layers by
/// index; rows may differ: times scale with rows). Throws config_error / user_error for a
/// config that does not run, a calibration of another model, a run that fails.
prediction simulate_run(const run_config& config, const calibration& costs,
                        const simulate_options& options);

std::string format_prediction_text(const prediction& p);
std::string format_prediction_json(const prediction& p);

/// One wiring tried by search_wirings.
struct wiring_candidate {
  std::int64_t data = 1;           // R
  std::int64_t pipeline = 1;       // P
  std::int64_t microbatches = 1;   // M
  std::string schedule;            // "gpipe", "1f1b", "zb-h1"; "-" without a pipeline
  std::int64_t virtual_stages = 1; // v (interleaved 1F1B)
  double step_us = 0;
  double samples_per_second = 0;
  std::int64_t peak_held = 0;      // the most micro-batches a device held
  std::int64_t peak_bytes = 0;     // the most bytes a device held (device_memory)
  std::string refused;             // why the config refused it (then nothing else is set)
};

/// `troupe simulate --search D`: every wiring of `config`'s model that fits D devices of
/// one node (R x P <= D; M in 1, P, 2P, 4P that divide the batch; GPipe, 1F1B, ZB-H1 and
/// interleaved 1F1B with v = 2 where the model has the layers; stages balanced by cost),
/// each simulated with `options`, fastest first (refused ones last).
std::vector<wiring_candidate> search_wirings(const run_config& config, const calibration& costs,
                                             const simulate_options& options, std::int64_t devices);

std::string format_search_text(const std::vector<wiring_candidate>& tried, std::size_t top);

}  // namespace troupe
