// trace_file.hpp: reading back a trace that `troupe run --trace` wrote
// (docs/reference/trace-format.md).
//
// load_trace() parses the Chrome Trace Event JSON into plain records: device-stream jobs,
// actor handler spans, counters, step markers, and what otherData says about the run
// (tracks, wires, stages, micro-batches, dropped events). trace_summary.hpp and
// trace_timeline.hpp work on these records. This file only reads; it does not analyse,
// and it knows nothing of the recorder (include/troupe/trace.hpp) beyond the documented format.
// Events of kinds it does not know are skipped, so newer traces stay readable.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "troupe/device.hpp"

namespace troupe {

/// An actor or device stream, from otherData.tracks.
struct trace_track {
  std::string name;    // "layer_2", "cpu:0 stream"
  std::string kind;    // "layer", "loss", ..., "stream"
  std::string device;  // "cpu:0", or "host"
  std::int32_t replica = -1;
  std::int32_t stage = -1;
  std::int32_t layer = -1;
};

/// A wire of the actor graph, from otherData.wires.
struct trace_wire {
  std::string from;
  std::string to;
  std::string kind;           // "activations", "grads", ...
  std::int64_t capacity = 0;  // credits; 0 = unbounded
};

/// A span (ph "X"): a job a device stream ran, or an actor handling one message.
struct trace_span {
  std::string name;    // job: "forward", "backward", "copy", ...; handler: the message kind
  job_kind kind = job_kind::other;  // job: job_kind_of(name); other for a handler
  std::string track;   // the track the span is on (stream or receiving actor)
  std::string device;  // the process the span is in
  std::string actor;   // job: who submitted it (args.actor); handler: the receiver
  std::string from;    // handler: the sender (args.from); part: the fused actor (args.in)
  double start_us = 0;
  double duration_us = 0;
  double queued_us = 0;        // job: waited between submission and start (args.queued_us)
  std::int64_t step = -1;
  std::int32_t microbatch = -1;
  std::int32_t replica = -1;
  bool eval = false;           // args.phase == "eval"
  std::int64_t bytes = 0;
  std::uint64_t flow = 0;  // handler: the message's flow id (args.flow); 0: none

  double end_us() const { return start_us + duration_us; }
};

/// One sample of a counter (ph "C"): from `time_us` on, the counter is `value`.
struct trace_sample {
  double time_us = 0;
  double value = 0;
};

/// A global marker (ph "i"): "step N" or "epoch N".
struct trace_marker {
  std::string name;
  double time_us = 0;
  std::int64_t step = -1;
};

/// Everything a trace file holds that the tools use.
struct trace_file {
  std::string path;
  std::vector<std::string> devices;  // process names in pid order ("cpu:0", ..., "host")
  std::vector<trace_track> tracks;
  std::vector<trace_wire> wires;
  std::vector<trace_span> jobs;      // sorted by start
  std::vector<trace_span> handlers;  // sorted by start
  /// A fused layer's span inside its fused actor's job (cat "part"): `actor` the layer,
  /// `from` the fused actor; sorted by start. Not in `jobs`: the job holds their time.
  std::vector<trace_span> parts;
  /// A message's send (ph "s"), by its flow id: when, and by whom (the track's name).
  struct send {
    double time_us = 0;
    std::string from;
    std::int64_t bytes = -1;  // what the sender put on the wire; -1 when it did not say
  };
  std::map<std::uint64_t, send> sends;
  std::map<std::string, std::vector<trace_sample>> counters;  // "credits A -> B": by time
  std::vector<trace_marker> markers;
  std::int64_t replicas = 1;         // R
  std::int64_t stages = 1;           // S = P * v
  std::int64_t virtual_stages = 1;   // v: stages per device (interleaved 1F1B)
  std::int64_t microbatches = 1;     // M
  std::string schedule;              // "gpipe" | "1f1b" | "zb-h1" | ""
  std::string config;                // the config file the run used, if recorded
  std::int64_t dropped_events = 0;
  double first_us = 0;               // the earliest timestamp of any event
  double last_us = 0;                // the latest end of any event

  /// tracks by name, when their names differ (parse_trace fills it; find_track uses it
  /// while it has an entry for every track, and looks through `tracks` otherwise).
  std::unordered_map<std::string, std::size_t> track_index;

  /// The track called `name`, or nullptr.
  const trace_track* find_track(const std::string& name) const;
  /// last_us - first_us.
  double run_us() const { return last_us - first_us; }
};

/// Parses trace JSON `text`; `path` names it in errors. Throws user_error when the text is
/// not JSON (with the byte offset) or not a troupe trace (no traceEvents/otherData).
trace_file parse_trace(const std::string& text, const std::string& path);

/// Reads and parses the file at `path`. Throws user_error when it cannot be read.
trace_file load_trace(const std::string& path);

/// The node a device's process belongs to, as a trace names it: K for "nodeK/cpu:0" and
/// for "nodeK host" (a worker's host, as merge.cpp names it), 0 for the coordinator's
/// "cpu:0" and "host", and for anything else (a node number of more than 9 digits too).
int node_of_device(const std::string& device);

/// Compares names so that "layer_2" < "layer_10" (digit runs by value).
bool natural_less(const std::string& a, const std::string& b);

}  // namespace troupe
