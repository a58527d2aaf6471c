// recorder.hpp: recording what every actor and device did, for Perfetto and the summaries.
//
// When tracing is on, every message (its send, and its handling as a span with sender,
// receiver, kind, step, micro-batch, replica and bytes), every job a device stream runs
// (kernel spans, cross-device copies with their duration), the credits in flight on each
// wire and the micro-batches each layer holds are recorded with timestamps from one clock
// (steady_clock, nanoseconds since the trace began). Each thread appends to its own buffer
// without a lock; a buffer holds at most `capacity` events and counts what it drops, and
// the trace says so. finish() writes Chrome Trace Event JSON: one process per device, one
// track per actor plus one per device stream, flow arrows from each send to its handling,
// counters, and step markers (docs/tracing.md describes the format).
//
// When tracing is off the cost is one relaxed atomic load per message (enabled()).
// Nothing here knows about CAF or tensors: actors and streams call in with plain values.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace troupe::trace {

/// What the trace knows about an actor (or a device stream), registered once.
struct track_info {
  std::string name;     // "layer_2", "cpu:0 stream"
  std::string kind;     // actor kind, or "stream"
  std::string device;   // "cpu:0", or "host" for actors outside devices (the trainer)
  std::int32_t replica = -1;
  std::int32_t stage = -1;
  std::int32_t layer = -1;
};

enum class event_type : std::uint8_t { handle, send, job, counter, marker };

/// One recorded event; `name` must be a string with static storage ("forward", ...).
struct event {
  std::int64_t start_ns = 0;
  std::int64_t duration_ns = 0;  // spans (handle, job)
  std::uint64_t flow = 0;        // send <-> handle
  std::int64_t step = -1;
  std::int64_t bytes = 0;
  std::int64_t value = 0;        // counters
  std::int32_t microbatch = -1;
  std::int32_t replica = -1;
  std::uint32_t track = 0;       // the actor (or stream) the event is on
  std::uint32_t peer = 0;        // handle: the sender; send: the receiver; counter: the wire's peer
  const char* name = "";
  event_type type = event_type::handle;
  std::uint8_t phase = 0;        // 0 train, 1 eval
};

namespace detail {
extern std::atomic<bool> enabled_flag;
extern std::atomic<bool> logging_flag;
}  // namespace detail

#ifdef TROUPE_NO_TRACE_CALLS
// A build without tracing (cmake -DTROUPE_TRACE_CALLS=OFF), to measure what tracing
// costs when it is off: every check is a constant and the calls compile away.
constexpr bool enabled() { return false; }
constexpr bool logging() { return false; }
#else
/// True while a trace is being recorded.
inline bool enabled() { return detail::enabled_flag.load(std::memory_order_relaxed); }
/// True while messages are printed as they are handled (--log-messages).
inline bool logging() { return detail::logging_flag.load(std::memory_order_relaxed); }
#endif
/// enabled() || logging(): whether handlers need to describe themselves at all.
inline bool observing() { return enabled() || logging(); }

/// Nanoseconds since the trace (or the process) began, on the one clock.
std::int64_t now_ns();

/// Starts recording; events beyond `capacity` per thread are dropped and counted.
void start(std::size_t capacity = 1 << 20);
/// Prints messages as they are handled, for those matching `filter` (see log_filter).
void start_logging(const std::string& filter);
/// Stops recording and logging and forgets everything recorded.
void reset();

/// Registers an actor or stream track; returns its id (0 is reserved for "nobody").
std::uint32_t register_track(const track_info& info);
/// The next flow id (unique in the process).
std::uint64_t next_flow();

/// Appends an event to this thread's buffer (no lock after the thread's first event).
void record(const event& e);

/// Prints a handled message if logging and the filter matches.
void log_message(const event& handled);

/// Events dropped so far because a buffer was full.
std::uint64_t dropped();

/// Writes everything recorded as Chrome Trace Event JSON to `path`; `metadata` (a JSON
/// object as text) goes into "otherData". Throws user_error if the file can't be written.
void write(const std::string& path, const std::string& metadata);

/// All events recorded so far, merged and sorted by start time (tests, summaries).
std::vector<event> collect();
/// The registered tracks, index = id - 1.
std::vector<track_info> tracks();

/// Records a handler span from construction to destruction (and logs the message).
class handler_span {
 public:
  handler_span(std::uint32_t track, const char* name, std::uint32_t sender, std::uint64_t flow,
               std::int64_t step, std::int32_t microbatch, std::int32_t replica,
               std::uint8_t phase, std::int64_t bytes);
  ~handler_span();
  handler_span(const handler_span&) = delete;
  handler_span& operator=(const handler_span&) = delete;

 private:
  event event_;
  bool active_ = false;
};

}  // namespace troupe::trace
