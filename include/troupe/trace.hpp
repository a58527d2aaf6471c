// recorder.hpp: recording what every actor and device did, for Perfetto and the summaries.
//
// When tracing is on, every message (its send, and its handling as a span with sender,
// receiver, kind, step, micro-batch, replica and bytes), every job a device stream runs
// (kernel spans, cross-device copies with their duration), the credits in flight on each
// wire and the micro-batches each layer holds are recorded with timestamps from one clock
// (steady_clock, nanoseconds since the recorder was made). Each thread appends to its own
// buffer without a lock; a buffer holds at most `capacity` events and counts what it
// drops, and the trace says so. write() produces Chrome Trace Event JSON: one process per
// device, one track per actor plus one per device stream, flow arrows from each send to
// its handling, counters, and step markers (docs/reference/trace-format.md describes the format).
//
// A recorder is an object that one session owns; there is no process-wide trace. Code
// that records (actors, device streams) calls the free functions below, which act on the
// recorder bound to the calling thread (Note [recorders and threads]). A thread bound to
// no recorder records nothing: enabled() and logging() are false there and record() does
// nothing. When no recorder in the process is observing, the cost per message is one
// relaxed atomic load (enabled()).
//
// Nothing here knows about CAF or tensors: actors and streams call in with plain values.
// It does not read traces back (runtime/trace_tools/ does).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace troupe::trace {

/// What the trace knows about an actor (or a device stream), registered once.
struct track_info {
  std::string name;    // "layer_2", "cpu:0 stream"
  std::string kind;    // actor kind, or "stream"
  std::string device;  // "cpu:0", or "host" for actors outside devices (the trainer)
  std::int32_t replica = -1;
  std::int32_t stage = -1;
  std::int32_t layer = -1;
};

/// `part`: one member layer's span inside a job that runs several fused layers
/// (runtime/model/fused_layer.hpp), on the stream's track; `peer` the member's track,
/// `value` the fused actor's (whose job it is in).
enum class event_type : std::uint8_t { handle, send, job, counter, marker, part };

/// One recorded event; `name` must be a string with static storage ("forward", ...).
struct event {
  std::int64_t start_ns = 0;
  std::int64_t duration_ns = 0;  // spans (handle, job)
  std::uint64_t flow = 0;        // send <-> handle
  std::int64_t step = -1;
  std::int64_t bytes = 0;
  std::int64_t value = 0;  // counters
  std::int32_t microbatch = -1;
  std::int32_t replica = -1;
  std::uint32_t track = 0;  // the actor (or stream) the event is on
  std::uint32_t peer = 0;   // handle: the sender; send: the receiver; counter: the wire's peer
  const char* name = "";
  event_type type = event_type::handle;
  std::uint8_t phase = 0;  // 0 train, 1 eval
};

/// What a recorder observes. Both off: threads may be bound to it, but it sees nothing.
struct recorder_settings {
  bool record = false;             // keep events for collect() / write() (--trace)
  std::size_t capacity = 1 << 20;  // events kept per thread; later ones are counted as dropped
  bool log_messages = false;       // print handled messages to stderr (--log-messages)
  /// Which messages to print: terms separated by commas, each actor=NAME (a substring of
  /// the sender's or receiver's name), kind=KIND (exactly), step=N, or a plain word (a
  /// substring of either name or of the kind). Empty: every message.
  std::string log_filter;
  /// Added to every flow id: a run over several nodes gives each node its own range
  /// (rank << 48), so the arrows of messages between nodes join in the merged trace.
  std::uint64_t flow_base = 0;
  /// A simulated run's clock (runtime/core/simulation.hpp), in nanoseconds: when set, every
  /// time recorded is read from it instead of the steady clock.
  const std::atomic<std::int64_t>* virtual_clock = nullptr;
};

/// The trace of one session. Thread-safe: any thread may register tracks and take flow
/// ids; events arrive through threads bound to it (bind_this_thread, thread_binding).
///
/// Its life: made (recording), threads bound, the run records, freeze(), then collect()
/// or write() read what was recorded. After freeze() nothing more is recorded or logged,
/// whatever thread still calls in.
class recorder {
 public:
  /// Throws user_error when settings.log_filter has a term it does not know.
  explicit recorder(const recorder_settings& settings);
  ~recorder();
  recorder(const recorder&) = delete;
  recorder& operator=(const recorder&) = delete;

  /// True until freeze() when settings.record was set.
  bool recording() const { return recording_.load(std::memory_order_relaxed); }
  /// True until freeze() when settings.log_messages was set.
  bool logging() const { return logging_.load(std::memory_order_relaxed); }

  /// Nanoseconds since this recorder was made.
  std::int64_t now_ns() const;
  /// Registers an actor or stream track; returns its id (0 is reserved for "nobody").
  std::uint32_t register_track(const track_info& info);
  /// The next flow id (unique in this recorder, never 0).
  std::uint64_t next_flow() {
    return flow_base_ + flows_.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  /// The line log_message() prints for a handled message (no newline).
  std::string describe(const event& handled) const;
  /// Prints a handled message to stderr if logging and the filter matches.
  void log_message(const event& handled) const;

  /// Stops recording and logging for good, and waits for any thread that is in the middle
  /// of appending an event. Idempotent.
  void freeze();
  bool frozen() const;

  /// Everything recorded, merged and sorted by start time. Only after freeze().
  std::vector<event> collect() const;
  /// The registered tracks, index = id - 1.
  std::vector<track_info> tracks() const;
  /// Events dropped because a buffer was full. Only after freeze().
  std::uint64_t dropped() const;
  /// Writes everything recorded as Chrome Trace Event JSON to `path`; `metadata` (a JSON
  /// object as text) goes into "otherData". Only after freeze(). Throws user_error if the
  /// file can't be written.
  void write(const std::string& path, const std::string& metadata) const;
  /// The same Chrome Trace Event JSON as text (what write() writes).
  std::string json(const std::string& metadata) const;

  /// One thread's events (opaque; the recorder owns it, only that thread appends).
  struct buffer;

 private:
  struct log_filter {
    std::string actor;  // substring of the receiver's or sender's name
    std::string kind;   // message name, exactly
    std::int64_t step = -1;
    std::string any;  // substring of actor names or kind
  };
  friend void record(const event& e);

  static log_filter parse_filter(const std::string& text);
  /// A new buffer for the calling thread, or nullptr once frozen (or when not recording).
  buffer* add_buffer();
  bool matches(const event& e) const;
  std::string track_name(std::uint32_t id) const;

  const std::int64_t origin_ns_;  // steady_clock, when made
  const std::atomic<std::int64_t>* virtual_clock_;
  const std::size_t capacity_;
  const log_filter filter_;
  std::atomic<bool> recording_;
  std::atomic<bool> logging_;
  bool counted_ = false;  // in detail::observing_recorders; guarded by mutex_
  std::atomic<std::uint64_t> flows_{0};
  const std::uint64_t flow_base_;

  mutable std::mutex mutex_;
  bool frozen_ = false;                           // guarded by mutex_
  std::vector<std::unique_ptr<buffer>> buffers_;  // guarded by mutex_ (the list, not the events)
  std::vector<track_info> tracks_;                // guarded by mutex_
};

/// Binds the calling thread to `r` (nullptr: to none) and returns its previous recorder.
std::shared_ptr<recorder> bind_this_thread(std::shared_ptr<recorder> r);
/// The recorder bound to the calling thread, or nullptr.
recorder* this_thread_recorder();

/// Binds the calling thread to a recorder for a scope, then restores what was bound before.
class thread_binding {
 public:
  explicit thread_binding(std::shared_ptr<recorder> r);
  ~thread_binding();
  thread_binding(const thread_binding&) = delete;
  thread_binding& operator=(const thread_binding&) = delete;

 private:
  std::shared_ptr<recorder> previous_;
};

// ---- what actors and streams call: acts on the calling thread's recorder ----

namespace detail {
/// How many recorders in the process are recording or logging: when 0, no thread can be
/// bound to one that observes, and enabled() / logging() answer without a thread-local.
extern std::atomic<int> observing_recorders;
bool bound_recording() noexcept;
bool bound_logging() noexcept;
}  // namespace detail

#ifdef TROUPE_NO_TRACE_CALLS
// A build without tracing (cmake -DTROUPE_TRACE_CALLS=OFF), to measure what tracing
// costs when it is off: every check is a constant and the calls compile away.
constexpr bool enabled() { return false; }
constexpr bool logging() { return false; }
#else
/// True while the calling thread's recorder is recording.
inline bool enabled() {
  return detail::observing_recorders.load(std::memory_order_relaxed) > 0 &&
         detail::bound_recording();
}
/// True while the calling thread's recorder prints messages as they are handled.
inline bool logging() {
  return detail::observing_recorders.load(std::memory_order_relaxed) > 0 && detail::bound_logging();
}
#endif
/// enabled() || logging(): whether handlers need to describe themselves at all.
inline bool observing() { return enabled() || logging(); }

/// Nanoseconds on the calling thread's recorder's clock (since the process began when the
/// thread is bound to none).
std::int64_t now_ns();
/// The next flow id of the calling thread's recorder (0 when bound to none).
std::uint64_t next_flow();
/// Appends an event to the calling thread's buffer in its recorder (no lock after the
/// thread's first event); nothing when bound to none, not recording, or frozen.
void record(const event& e);
/// Prints a handled message if the calling thread's recorder logs and its filter matches.
void log_message(const event& handled);

/// Records a handler span from construction to destruction (and logs the message).
class handler_span {
 public:
  handler_span(std::uint32_t track, const char* name, std::uint32_t sender, std::uint64_t flow,
               std::int64_t step, std::int32_t microbatch, std::int32_t replica, std::uint8_t phase,
               std::int64_t bytes);
  ~handler_span();
  handler_span(const handler_span&) = delete;
  handler_span& operator=(const handler_span&) = delete;

 private:
  event event_;
  bool active_ = false;
};

}  // namespace troupe::trace
