// stream_state.hpp: the inside of a stream (include/troupe/device.hpp), and the backends
// that run its jobs.
//
// A stream is one in-order queue of jobs (and a list of posted tasks) whatever runs it. Who
// runs it is a backend (Note [stream backends]):
//   thread     a worker thread bound to one core: a CPU device (stream_worker.cpp);
//   gpu        the same thread issuing each job's kernels to a GPU queue, whose events are
//              reached when the GPU has run them (stream_worker.cpp, Note [GPU streams] in
//              gpu.hpp);
//   simulated  no thread: a simulation's one thread plays every stream on a virtual clock
//              (simulation.cpp, Note [simulated streams]).
// The queue, the lanes, the progress counts, the estimates of the idle lane's look-ahead and
// the failure path are the stream's, in stream_state, shared by the three (stream.cpp), so a
// simulated stream decides what a real one would.
//
// Not for plugins: the public stream is opaque (include/troupe/device.hpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "troupe/device.hpp"

namespace troupe {

/// How far one stream has got: how many of its jobs have completed, the host threads
/// waiting for a count, and the callbacks due at a count. The stream and every event of it
/// share it, so an event stays answerable after its stream (and device_set) is gone
/// (Note [events outlive their stream] in stream.cpp). Only the stream advances it.
class stream_progress {
 public:
  std::uint64_t completed() const { return completed_.load(std::memory_order_acquire); }

  /// Blocks the calling thread until `sequence` jobs have completed.
  void wait_until(std::uint64_t sequence);

  /// Calls `callback` once `sequence` jobs have completed: at once, on the calling thread,
  /// if they have; else on the stream's thread right after the job that completes them.
  void notify_when_reached(std::uint64_t sequence, std::function<void()> callback);

  /// The stream's side: one more job completed (wakes host waiters).
  void advance();
  /// True when some callback is registered (the stream then calls fire_due()).
  bool has_watchers() const { return watcher_count_.load() > 0; }
  /// Calls, on this thread, every callback that is due, each once. If some throw, the
  /// others still run and the first exception is rethrown after them.
  void fire_due();

  /// About how long until `sequence` jobs have completed, at `now_ns` of the stream's
  /// clock: 0 if they have (Note [looking ahead before an idle job] in stream.cpp).
  std::int64_t eta_ns(std::uint64_t sequence, std::int64_t now_ns) const;
  /// The stream's side: a job expected to end at `until_ns` started (0: none runs now);
  /// `main_lane`: it is the next of this progress's count.
  void note_running(std::int64_t until_ns, bool main_lane) {
    running_main_lane_.store(main_lane, std::memory_order_relaxed);
    running_until_ns_.store(until_ns, std::memory_order_release);
  }
  /// The stream's side: how long its next main-lane job will take, as far as it knows.
  void note_next(std::int64_t estimate_ns) {
    next_estimate_ns_.store(estimate_ns, std::memory_order_relaxed);
  }

 private:
  std::atomic<std::int64_t> running_until_ns_{0};
  std::atomic<bool> running_main_lane_{false};
  std::atomic<std::int64_t> next_estimate_ns_{0};
  mutable std::mutex mutex_;
  std::condition_variable done_;
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<int> host_waiters_{0};
  std::vector<std::pair<std::uint64_t, std::function<void()>>> watchers_;  // guarded by mutex_
  std::atomic<std::size_t> watcher_count_{0};
};

/// A stream's messages on their way: events of other streams that its actors put aside
/// messages for (stream::expect; Note [looking ahead before an idle job] in stream.cpp).
struct expected_events {
  struct expected {
    event on;
    std::function<bool()> wanted;  // empty: always
  };
  std::mutex mutex;
  std::vector<expected> events;
};

/// One job of a stream's queue.
struct stream_entry {
  stream::job work;
  bool busy = true;  // false: a wait for another stream, which is idle time
  job_label label;
  std::int64_t submitted_ns = 0;  // when tracing
  bool idle_lane = false;         // advances the idle lane's progress, not the main one's
  event waits_on;                 // simulated streams: a wait's event (work is empty)
};

namespace gpu {
class queue;  // gpu.hpp
}  // namespace gpu

// Note [stream backends]
// What differs between a CPU stream, a GPU stream and a simulated one is who takes the jobs
// off the queue and when a job counts as done; everything else (the lanes, posting, the
// events, the failure path) is the stream's. So the stream calls its backend at the few
// points where they differ: when work arrives (a sleeping worker is woken; the simulation
// looks at the stream again), when a task is posted or bytes leave for another node (the
// simulation charges the core), for a wait on another stream (a worker blocks in a job; a
// simulated stream holds the wait's place in its queue until the event is reached), and at
// the start and the end of the stream's life. Before the split these were a dozen branches
// on "simulated?" and "GPU?" inside the stream.
class stream_backend {
 public:
  virtual ~stream_backend() = default;
  /// Starts running `s` (a worker thread starts; the simulation takes it in).
  virtual void attach(stream& s) = 0;
  /// Runs what `s` has queued and lets it go (the worker joins; the simulation lets go).
  virtual void detach(stream& s) = 0;
  /// True on the thread that runs this stream's jobs and tasks.
  virtual bool on_own_thread() const = 0;
  /// `s` has new work (a job, a task); `sleeping`: its worker said it sleeps.
  virtual void wake(stream& s, bool sleeping) = 0;
  /// An idle job moved to the main lane (stream::hurry).
  virtual void hurried(stream&) {}
  /// A task was posted to `s`: an actor on it has a message.
  virtual void posted(stream&) {}
  /// An actor on `s` sends `bytes` of tensors to another node, left in shared memory's
  /// queue (`posted`) or through CAF (stream::sent_to_network).
  virtual void sent_to_network(stream&, std::int64_t /*bytes*/, bool /*posted*/) {}
  /// True: a wait for another stream holds its place in the queue until the event is
  /// reached (the simulation); false: it is a job that blocks until then.
  virtual bool waits_in_queue() const { return false; }
  /// A GPU stream's queue; nullptr for the others.
  virtual gpu::queue* gpu_queue() const { return nullptr; }
};

/// A CPU stream: one worker thread, bound to `core` of the process's allowed CPUs (-1: not
/// bound; stream_worker.cpp).
std::unique_ptr<stream_backend> make_thread_backend(int core);
/// A GPU stream: a worker thread that issues each job's kernels to `queue`.
std::unique_ptr<stream_backend> make_gpu_backend(std::unique_ptr<gpu::queue> queue);

/// The state of one stream, which its backend runs. Everything but `device`, `backend`
/// and the atomics is guarded by `mutex`.
struct stream_state {
  device_id device;
  std::unique_ptr<stream_backend> backend;
  std::mutex mutex;
  std::deque<stream_entry> queue;
  std::deque<stream_entry> idle_queue;  // runs when `queue` is empty (Note [idle lane])
  std::deque<stream::job> posted;
  std::uint64_t submitted = 0;
  std::shared_ptr<stream_progress> progress = std::make_shared<stream_progress>();
  std::uint64_t idle_submitted = 0;
  std::shared_ptr<stream_progress> idle_progress = std::make_shared<stream_progress>();
  std::atomic<std::int64_t> busy_nanoseconds{0};
  std::atomic<bool> failed{false};
  bool stopping = false;
  bool worker_sleeping = false;
  stream::error_handler on_error;
  std::uint32_t trace_track = 0;
  std::unordered_map<std::uint64_t, std::int64_t> estimates;
  std::int64_t held_since_ns = -1;  // the idle head waits since then
  std::shared_ptr<expected_events> expected = std::make_shared<expected_events>();

  /// Runs `work` (a job, a posted task, event callbacks); an exception fails the stream
  /// (Note [one failure path]).
  void run_guarded(const std::function<void()>& work);
  void fail(std::exception_ptr error);
  /// A job of `lane` has run (its captures released): its progress advances, its due
  /// callbacks run here.
  void completed(bool idle_lane);

  // Note [looking ahead before an idle job]; all under `mutex`.
  /// How long the idle lane's head should wait, at `now_ns`, for main-lane work due before
  /// it would end; 0: run it now.
  std::int64_t idle_hold_ns(std::int64_t now_ns);
  /// A job with `label` took `took_ns`.
  void learn(const job_label& label, std::int64_t took_ns);
  /// Tells `progress` what the main lane's head will take.
  void note_next_job();
  /// A job with `label` starts at `now_ns` (the worker's or the simulation's side).
  void note_start(const job_label& label, bool idle_lane, std::int64_t now_ns);

 private:
  /// About how long a job with `label` takes here (0: none like it has run yet).
  std::int64_t estimate_ns(const job_label& label) const;
};

/// A GPU stream's queue (copies and kernels are issued to it); nullptr on other streams.
gpu::queue* gpu_queue_of(const stream& s);

/// Nanoseconds of the steady clock: the time a real stream's estimates are in.
std::int64_t steady_clock_ns();

}  // namespace troupe
