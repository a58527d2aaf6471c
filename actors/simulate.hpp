// simulate.hpp: predicting a wiring before it runs (`troupe simulate`, issue 16).
//
// simulate_run() runs the config as `troupe run` would, the same actors, credits, turns,
// priorities and stream lanes, but on simulated devices (runtime/core/simulation.hpp):
// each job takes the time the calibration of this machine says it takes (calibrate.hpp),
// scaled to the rows it computes, and a copy between nodes takes a link's latency plus
// its bytes over the link's bandwidth. Any number of devices and nodes run in this one
// process. The run is recorded as a trace in virtual time, and the prediction is read
// from it with the same tools as a measured trace: step time and samples/s from the steps'
// critical paths (critical_path.hpp), the bubble of each pipeline stage (summary.hpp),
// and each device's peak of micro-batches held. See Note [what a job costs] in the .cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/calibrate.hpp"
#include "runtime/config/config.hpp"
#include "runtime/trace_tools/critical_path.hpp"

namespace troupe {

/// A network link between nodes: "25 GB/s, 5 us" (GB/s, Gb/s or MB/s; ns, us or ms), or
/// with the "node: " in front.
struct link_cost {
  double bytes_per_ns = 0;  // GB/s
  double latency_ns = 0;
  bool given = false;
};
/// Throws user_error naming the text for anything else.
link_cost parse_link(const std::string& text);

struct simulate_options {
  std::int64_t steps = 20;  // training steps simulated (no evaluation, no checkpoints)
  link_cost link;           // between nodes; not given: as a copy between devices
  double handler_us = 2;    // the device time of each message an actor handles
  double handover_us = -1;  // a message between threads; < 0: the calibration's
  int cores = 0;            // cores the devices share (0: a core each)
};

struct stage_prediction {
  std::int64_t stage = 0;
  std::vector<std::string> devices;
  double bubble = 0;  // 1 - utilisation over the simulated steps
  double theory = 0;  // the schedule's, for these stages' costs (trace summary)
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
  double step_us = 0;        // median over the steps after the first
  double first_step_us = 0;  // the first: pipelines fill, pools warm
  double samples_per_second = 0;
  double theory_bubble = 0;  // (P - 1) / (M + P - 1) and the like (trace summary)
  std::vector<stage_prediction> pipeline;  // empty unless stages > 1
  /// Per device, the most micro-batches its layers held at once (their "stash").
  std::vector<std::pair<std::string, std::int64_t>> peak_held;
  trace_explanation explanation;  // every step's critical path
  std::string trace_json;         // the simulated run's trace, virtual times
  std::uint64_t jobs = 0;
  std::uint64_t unpriced_jobs = 0;  // jobs the calibration had no cost for (taken as 0)
  double wall_seconds = 0;          // what the simulation took here
};

/// Runs `config` simulated. `costs` is a calibration of the same model (its layers by
/// index; rows may differ: times scale with rows). Throws config_error / user_error for a
/// config that does not run, a calibration of another model, a run that fails.
prediction simulate_run(const run_config& config, const calibration& costs,
                        const simulate_options& options);

std::string format_prediction_text(const prediction& p);
std::string format_prediction_json(const prediction& p);

}  // namespace troupe
