// summary.hpp: where the time of a traced run went (`troupe trace summary`).
//
// summarize_trace() reduces a trace (trace_file.hpp) to a handful of tables: per actor
// (compute, message handling, waiting for the device, idle), per device (utilisation),
// per pipeline stage (the measured bubble next to the GPipe formula), per wire (messages
// and bytes) and per training step (compute, communication, waiting, the slowest actor).
// format_summary_text() prints them for people, format_summary_json() for scripts.
//
// Definitions (times in microseconds):
//   run           first event to last event.
//   compute       of an actor: its jobs' durations (args.actor); handling: its handler spans;
//                 waiting: its jobs' args.queued_us (submitted, but the device was busy);
//                 idle: run - compute - handling - waiting, floored at 0 (the three can
//                 overlap, since jobs run on streams while the actor handles messages).
//   utilisation   of a device: its stream's job time / run.
//   bubble        of a stage: 1 - utilisation of the stage's device(s) (replica 0's; the
//                 mean when a stage spans several devices); theory (P - 1) / (M + P - 1),
//                 which holds for equal stages. For stages of unequal cost: work_s is a
//                 stage's per-micro-batch jobs (forward, backward, loss) per device, and
//                 theory_s = 1 - M work_s / (sum_s work_s + (M - 1) max_s work_s): a
//                 synchronous pipeline's step takes at least sum + (M - 1) max of the
//                 stages' costs per micro-batch (the slowest stage is busy throughout, the
//                 others fill and drain once), and the formula above when all are equal.
//                 ZB-H1 (schedule "zb-h1"): theory (P - 1) / (3 M + P - 1), for equal
//                 stages whose forward, input gradient and weight gradient take as long;
//                 costed with weight_s, a stage's backward_weight jobs per device, and
//                 a = work_s - weight_s: theory_s = 1 - M work_s / (M max_s work_s +
//                 (P - 1) max(0, max_s a - max_s weight_s)), Qi et al.'s step time
//                 M (F + B + W) + (P - 1) (F + B - W) for equal stages (the weight
//                 gradients fill the drain; only F + B - W of each fill-or-drain is idle).
//                 Interleaved (virtual_stages v > 1): a row per device of the pipeline
//                 (stage s = the device's first stage, its devices those of stages s, s +
//                 P, ...), theory (P - 1) / (v M + P - 1); costed as 1F1B over P stages
//                 of work_s / v each and v M micro-batches (each micro-batch passes a
//                 device v times), which is the formula for equal stages.
//   step          train-phase jobs with args.step = N; its time from the end of the step
//                 before to the end of its last job (Note [step time] in steps.hpp), on the
//                 busiest device of that step: compute (forward, backward, loss, update),
//                 communication (copy, reduce, load), waiting (the rest). The average step
//                 is the run's step time, which `troupe simulate` predicts.
// It does not look at flows or eval-phase steps, and trusts the trace's clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/trace_tools/trace_file.hpp"

namespace troupe {

struct actor_time {
  std::string name;
  std::string kind;
  std::string device;
  double compute_us = 0;
  double handling_us = 0;
  double waiting_us = 0;
  double idle_us = 0;
  std::int64_t jobs = 0;
  std::int64_t messages = 0;  // handled
};

struct device_time {
  std::string name;
  double busy_us = 0;       // sum of its stream's job durations
  double utilisation = 0;   // busy / run
  std::int64_t jobs = 0;
};

struct stage_time {
  std::int64_t stage = 0;
  std::vector<std::string> devices;
  double utilisation = 0;
  double bubble = 0;        // measured: 1 - utilisation
  double work_us = 0;       // forward, backward, backward_weight and loss jobs, per device
  double weight_us = 0;     // of which backward_weight (split backwards, ZB-H1)
  double theory = 0;        // for these stages' measured costs (see above)
};

struct wire_traffic {
  std::string from;
  std::string to;
  std::string kind;         // the message kind (handler name)
  std::int64_t messages = 0;
  std::int64_t bytes = 0;
  bool network = false;    // its ends are on two nodes
  double transit_us = 0;   // mean of send to handling start, over messages whose send is
  std::int64_t timed = 0;  // in the trace (`timed` of them; a merged trace has both ends)
};

struct step_time {
  std::int64_t step = 0;
  double start_us = 0;
  double time_us = 0;           // the step's window (Note [step time])
  std::string device;           // the busiest device in the step
  double compute_us = 0;        // forward/backward/loss/update on that device
  double communication_us = 0;  // copy/reduce/load on that device
  double waiting_us = 0;        // time - compute - communication, floored at 0
  std::string slowest_actor;    // most job time in the step
  double slowest_actor_us = 0;
};

/// averaging = "async": one layer's server, from its "staleness" counters (one sample an
/// update: Note [asynchronous server] in actors/training/async_server.cpp).
struct server_staleness {
  std::string server;  // the optimizer's track
  std::int64_t updates = 0;
  double mean = 0;
  std::int64_t max = 0;
};

struct trace_summary {
  std::string path;
  double run_us = 0;
  std::int64_t dropped_events = 0;
  std::int64_t stages = 1;          // S = P v
  std::int64_t virtual_stages = 1;  // v: stages a device (interleaved 1F1B)
  std::int64_t microbatches = 1;    // M
  std::int64_t replicas = 1;        // R
  std::string schedule;
  std::vector<actor_time> actors;    // by device (trace order), then name
  std::vector<device_time> devices;  // trace order; only devices with a stream or jobs
  std::vector<stage_time> pipeline;  // empty unless stages > 1
  double theory_bubble = 0;          // (P - 1) / (M + P - 1); ZB-H1 (P - 1) / (3 M + P - 1);
                                     // interleaved (P - 1) / (v M + P - 1)
  std::vector<wire_traffic> wires;   // by from, to, kind
  /// Of the tensor bytes sent to other nodes, those that went through shared memory (nodes
  /// of one machine: runtime/net/shared_memory.hpp); from the "shared memory A" counters.
  std::int64_t shared_memory_bytes = 0;
  std::vector<server_staleness> staleness;  // by server; empty unless averaging = "async"
  std::vector<step_time> steps;      // by step
  step_time average;                 // the run's step time and its steady steps' mean work
                                     // (step = -1, no actor; Note [step time])
};

/// Analyses a loaded trace (see the definitions above).
trace_summary summarize_trace(const trace_file& trace);

/// Tables for people: a dropped-events warning first if any, the averages and the
/// `slowest_steps` slowest steps.
std::string format_summary_text(const trace_summary& summary, std::size_t slowest_steps = 5);

/// The whole summary as one JSON object (every step), indented.
std::string format_summary_json(const trace_summary& summary);

}  // namespace troupe
