// critical_path.hpp: why a step took as long as it did (`troupe trace explain`).
//
// Note [critical path]
// A step ends with the last job of the step (train-phase jobs with args.step = N, as in
// summary.hpp) and starts where the step before ended (or at its own first job, if that
// is later): the steps tile the run, so their times add up to it, and a step's time is
// what the run took for it, however far ahead the loader prepared its batches. Walking
// back from its last job, every span started when the last of the things it
// needed was there, and the trace says what those were:
//   a job        ran when it was submitted (start - args.queued_us) and its stream was
//                free: if the stream's previous job ended after the submission, that job
//                held the device ("queued", or "dispatch" for the time the device then
//                idled before the job started: an idle-lane job waiting for work on its
//                way, a wake-up);
//                otherwise the handler of the submitting
//                actor that was running at the submission (or, when none was, the
//                actor's last span before it: a job queued behind its previous one,
//                Note [one job at a time]) made it;
//   a handler    ran when its message had been sent (the flow's `s`), its tensor was
//                written (a message whose tensor comes from another device is handled
//                once the sender's job for that micro-batch has run, Note [no blocking
//                waits]), its actor was done with the message before, and, on a CPU
//                device, whose actors handle messages on the stream's thread between
//                jobs (actors/base/device_scheduler.hpp), the job running there had ended;
//                the latest of these is the cause. A sent message leads to what its sender was
//                doing at the send: usually a handler, and when an activation was sent
//                by a handler of another kind (a gradient or release that returned the
//                wire's credit), the message waited for that credit.
// The chain of causes, clipped at the step's first job, covers the step's whole time:
// spans (jobs, handlers) and the gaps between them (a job waiting for its device, a
// message waiting for its actor, in flight or waiting for its tensor, dispatch latency,
// the hand-over from a span's end to what it set off). Each piece belongs to
// an actor, a device and for messages a wire; their sums over all steps are the blame
// tables. The walk trusts the trace's clock (one steady clock per process; a merged
// multi-node trace is aligned by merge.hpp) and matches "running at" within a few
// microseconds. Where the trace has no cause (an untraced message), the rest of the step
// is one "untraced" piece.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/trace_tools/trace_file.hpp"

namespace troupe {

enum class path_kind {
  job,       // a device ran a job: actor = who submitted it
  handler,   // an actor handled a message (up to what it did next on the path)
  queued,    // a job (or a handler on a CPU device's thread) waited for its device, busy
             // with `peer`'s job
  busy,      // a message waited while its actor handled the one before (from `peer`)
  dispatch,  // from a job's submission (or its device's last job) to its start on an
             // idle device
  handover,  // from the end of a span to what it set off (a callback, a resumed actor)
  transit,   // a message from its send to its handling; `credit`: it waited for a credit
  written,   // a message waited for its tensor, written by `peer`'s job on another device
  untraced,  // the rest of the step, for which the trace names no cause
};

/// "job", "handler", ...
const char* path_kind_name(path_kind kind);

struct path_segment {
  path_kind kind = path_kind::job;
  std::string name;    // the job's or message's kind ("forward", "grads", ...)
  std::string actor;   // the actor the time belongs to (a message's: its receiver)
  std::string device;  // where it ran (a message's: the receiver's device)
  std::string wire;    // messages: "sender -> receiver"
  std::string peer;    // queued: the job holding the device ("layer_1 forward"); busy: the
                       // sender of the message before; written: the writer; credit: who
                       // returned it
  bool credit = false;  // transit of an activation sent when a credit came back
  double start_us = 0;
  double duration_us = 0;
  std::int64_t step = -1;
  std::int32_t microbatch = -1;
  std::int64_t job = -1;  // job: its index in trace_file::jobs
};

/// A name's share of the critical paths it was asked about.
struct blame {
  std::string name;
  double us = 0;
  double share = 0;  // us / the steps' total time
};

struct step_explanation {
  std::int64_t step = 0;
  double start_us = 0;
  double time_us = 0;
  std::vector<path_segment> path;  // in time order; durations sum to time_us
  std::vector<blame> actors;       // largest first
  std::vector<blame> devices;
  std::vector<blame> wires;
};

struct trace_explanation {
  std::string path;
  std::vector<step_explanation> steps;  // by step number
  double total_us = 0;                  // sum of the steps' times
  std::vector<blame> actors;            // over all steps, largest first
  std::vector<blame> devices;
  std::vector<blame> wires;
};

/// Critical paths of every training step (or only `only_step` when >= 0), and the blame.
/// Throws user_error when the trace has no training steps, or not `only_step` (naming the
/// steps it has).
trace_explanation explain_trace(const trace_file& trace, std::int64_t only_step = -1);

/// For people: the blame tables, then the `slowest_steps` slowest steps (every step when
/// the explanation holds one) with their paths, latest first.
std::string format_explanation_text(const trace_explanation& explanation,
                                    std::size_t slowest_steps = 3);

/// Everything as one JSON object, indented.
std::string format_explanation_json(const trace_explanation& explanation);

}  // namespace troupe
