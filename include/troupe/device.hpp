// device.hpp: devices as in-order streams of work with their own memory.
//
// A device is `cpu:N` or `cuda:N`. Every device owns one stream: work submitted to it
// runs in submission order, never on the caller's thread. Actors only submit (from their
// handlers, which for actors placed on a device run on its stream thread between jobs:
// actors/base/device_scheduler.hpp); the stream's own thread (CPU) or the GPU (CUDA) computes. A
// CPU stream is one worker thread bound to one core of the process's affinity set, so
// two CPU devices never fight over a core (Note [CPU streams]).
//
// An event marks a point in one stream; another stream can wait for it (the CPU analogue
// of cudaStreamWaitEvent), and the host can block on it. This file does not allocate
// tensors (tensor.hpp) and knows no actors.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/kernel.hpp"

namespace troupe {

using kernels::device_type;

/// The name of a device: the node (process) it belongs to, a type and an index, written
/// "cpu:0" on node 0 and "node1/cpu:0" on another node ("node0/cpu:0" is read as "cpu:0").
struct device_id {
  device_type type = device_type::cpu;
  int index = 0;
  int node = 0;  // the rank of the process that owns it; 0 in a one-process run

  std::string to_string() const;
  /// Parses "cpu:N" / "cuda:N", optionally after "nodeK/"; returns false on anything else.
  static bool parse(const std::string& text, device_id& out);

  friend bool operator==(const device_id& a, const device_id& b) {
    return a.node == b.node && a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const device_id& a, const device_id& b) { return !(a == b); }
  friend bool operator<(const device_id& a, const device_id& b) {
    if (a.node != b.node)
      return a.node < b.node;
    return a.type != b.type ? a.type < b.type : a.index < b.index;
  }
};

/// The node this process is in a multi-process run (0 otherwise). Tensors that arrive
/// from another node are host tensors of this node (include/troupe/detail/tensor_inspect.hpp).
/// One process is one node: the run sets it once, before its actors exist.
int this_node();
void set_this_node(int node);

class stream;
class stream_progress;  // runtime/core/stream_state.hpp: a stream's completed count
struct stream_state;    // runtime/core/stream_state.hpp: the inside of a stream
class stream_backend;   // runtime/core/stream_state.hpp: what runs a stream's jobs
class simulation;       // runtime/core/simulation.hpp: streams on a virtual clock

/// What a job does, as troupe's own actors say it. Traces name a job by job_kind_name();
/// the trace tools, `troupe calibrate` and the simulator read it back with job_kind_of(),
/// so the kinds are spelled in one place. A plugin's jobs have names of their own and read
/// back as `other`.
enum class job_kind : std::uint8_t {
  other,            // not one of troupe's: a plugin's job, or an unlabelled one ("job")
  forward,          // a layer's forward pass of one micro-batch
  backward,         // a layer's backward (with a split backward, its input-gradient part)
  backward_weight,  // the weight-gradient part of a split backward (ZB-H1)
  loss,             // the loss of a micro-batch and its gradient
  update,           // an optimizer's step
  checkpoint,       // an optimizer's copy of its state for a checkpoint
  reduce,           // an averager's sums of gradient chunks
  copy,             // a tensor moved to another device or node
  load,             // a batch gathered onto the device that reads it
  wait,             // a stream waiting for another stream's event
  convert,          // parameters put in their layer's precision (rounded to bf16, or widened)
};

/// Every kind, in the enum's order (the trace tools' tables and their tests read it).
constexpr job_kind all_job_kinds[] = {
    job_kind::other, job_kind::forward, job_kind::backward,   job_kind::backward_weight,
    job_kind::loss,  job_kind::update,  job_kind::checkpoint, job_kind::reduce,
    job_kind::copy,  job_kind::load,    job_kind::wait,       job_kind::convert};

/// The name of a kind in traces: "forward", "backward_weight", ...; "job" for `other`.
constexpr const char* job_kind_name(job_kind kind) {
  switch (kind) {
    case job_kind::forward: return "forward";
    case job_kind::backward: return "backward";
    case job_kind::backward_weight: return "backward_weight";
    case job_kind::loss: return "loss";
    case job_kind::update: return "update";
    case job_kind::checkpoint: return "checkpoint";
    case job_kind::reduce: return "reduce";
    case job_kind::copy: return "copy";
    case job_kind::load: return "load";
    case job_kind::wait: return "wait";
    case job_kind::convert:
      return "convert";
    case job_kind::other: break;
  }
  return "job";
}

/// The kind a job's name in a trace stands for; `other` for a name that is not troupe's.
inline job_kind job_kind_of(std::string_view name) {
  for (auto kind : all_job_kinds)
    if (kind != job_kind::other && name == job_kind_name(kind))
      return kind;
  return job_kind::other;
}

/// What a job is, for traces: which actor submitted it, doing what, for which micro-batch.
/// `name` must have static storage: job_kind_name(kind) for troupe's own jobs.
struct job_label {
  const char* name = "job";
  std::uint32_t actor = 0;  // the submitting actor's trace track
  std::int64_t step = -1;
  std::int32_t microbatch = -1;
  std::int32_t replica = -1;
  std::uint8_t phase = 0;  // 0 train, 1 eval
  std::int64_t bytes = 0;  // copies: bytes moved
  std::int32_t from_node = -1;  // copies: the node of the tensor copied from
  std::uint32_t source = 0;  // who submitted it, traced or not (0: unknown): its device's
                             // estimates of a job's length are by source and name
};

/// A point in a stream: reached once the stream has completed `sequence` jobs.
/// A default event (no stream) is always reached. Copying one bumps one reference count;
/// it keeps the stream's progress (not the stream) alive, so it never dangles.
struct event {
  std::shared_ptr<stream_progress> owner;
  std::uint64_t sequence = 0;

  event() = default;
  event(std::shared_ptr<stream_progress> progress, std::uint64_t at)
      : owner(std::move(progress)), sequence(at) {}
  event(const event&) = default;
  event& operator=(const event&) = default;
  event(event&&) noexcept = default;  // a moved-from event is a default one (always reached)
  event& operator=(event&&) noexcept = default;

  bool reached() const;
  /// Blocks the calling thread until reached. Not for actor handlers (they may run on
  /// this stream's thread, which would then wait for itself).
  void wait() const;
  /// Calls `callback` once reached: at once on this thread if it already is, else on the
  /// stream's thread right after the job that reaches it (keep it short: send a message).
  /// A callback that throws there fails the stream like a job that throws.
  void then(std::function<void()> callback) const;
};

struct expected_events;  // a stream's messages on their way (runtime/core/stream_state.hpp)

/// An in-order queue of jobs, run by one worker thread (a CPU device's), a GPU (its
/// thread issues each job's kernels) or a simulation's virtual clock.
class stream {
 public:
  using job = std::function<void()>;
  using error_handler = std::function<void(std::exception_ptr)>;

  /// A CPU stream: one worker thread. core: an index into the process's allowed CPUs
  /// (taken modulo their count), or -1 to leave the thread unbound.
  stream(device_id device, int core);
  /// A stream that `backend` runs: a GPU's, a simulated one (the runtime makes these:
  /// Note [stream backends] in runtime/core/stream_state.hpp).
  stream(device_id device, std::unique_ptr<stream_backend> backend);
  ~stream();
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  /// Appends a job; returns the event that is reached when it has run. When tracing, the
  /// job is recorded as a span on this stream's track with `label`.
  event submit(job work, const job_label& label = {});

  /// Appends a job to the stream's idle lane (Note [idle lane] in runtime/core/stream.cpp):
  /// it runs only when no main-lane job is queued, after the idle jobs submitted before it. The
  /// event it returns is of the idle lane; this stream's wait_for() hurries it.
  event submit_when_idle(job work, const job_label& label = {});

  /// Moves the idle jobs submitted up to `e` (an event of this stream's idle lane) to the
  /// main lane's tail, so that they run before any job submitted after this call. A
  /// reached event, or one of another stream or lane, is left alone.
  void hurry(const event& e);

  /// The trace track of this stream (0: not traced).
  void set_trace_track(std::uint32_t track);
  std::uint32_t trace_track() const;

  /// Main-lane work for this stream follows once `e`, another stream's event, is reached:
  /// an actor placed here put a message aside until a tensor is written (include/troupe/
  /// inputs.hpp). An idle job that would still run when it is due waits for it (Note
  /// [looking ahead before an idle job] in runtime/core/stream.cpp). Call done() on what it returns
  /// once the message is back in the actor's mailbox; it may outlive the stream. While
  /// `wanted` (if given; called on this stream's thread) says false, it is not waited for.
  class expectation {
   public:
    expectation() = default;
    void done();

   private:
    friend class stream;
    std::shared_ptr<expected_events> set_;
    event on_;
  };
  expectation expect(const event& e, std::function<bool()> wanted = {});

  /// Makes later jobs of this stream wait until `e` is reached (no-op for this stream's
  /// own events, which stream order already guarantees). This blocks the stream, so work
  /// submitted after it waits too, even if it could run: actors avoid it by submitting
  /// only once their inputs are ready (Note [no blocking waits] in include/troupe/inputs.hpp).
  void wait_for(const event& e);

  /// Calls `callback` on this stream's thread once `sequence` jobs have completed (at
  /// once, on the calling thread, if they already have). A callback that throws on the
  /// stream's thread fails the stream like a job that throws.
  void notify_when_reached(std::uint64_t sequence, std::function<void()> callback);

  /// Runs `task` on this stream's thread soon, between jobs: not part of the stream's
  /// order (no event, no busy time). Tasks run in the order posted, before queued jobs.
  /// This is how actors placed on a device handle their messages on its thread
  /// (actors/base/device_scheduler.hpp); a task must be short and must never block. A task
  /// that throws fails the stream like a job that throws (the error handler is told);
  /// later tasks still run, so actors can still be told to finish.
  void post(job task);

  /// Blocks the calling thread (not this stream's) until every task posted so far has run.
  void drain_posted();

  /// An actor placed here sends `bytes` of tensors to another node, in a message left in
  /// the receiver's shared-memory queue (`posted`) or through CAF (the first form). A real
  /// stream does nothing (the process's network thread serialises them); a simulated one
  /// tells its simulation, whose core model charges that work to this device's core (Note
  /// [what shares a core] in runtime/core/simulation.cpp).
  void sent_to_network(std::int64_t bytes);
  void sent_to_network(std::int64_t bytes, bool posted);
  /// The bytes every stream of this process has been told of so far (a run's metrics take
  /// differences: the process's sessions share the count). Thread-safe.
  static std::int64_t sent_to_nodes();

  /// True on this stream's own thread.
  bool on_own_thread() const;

  /// The event of the last main-lane job submitted so far.
  event last() const;

  /// Blocks the calling thread until every job submitted so far (both lanes) has run.
  void synchronize();

  /// Called (on the stream's thread) with the first exception a job, a posted task or an
  /// event callback throws. After that the stream is failed: later jobs are skipped (their
  /// events are still reached, so nothing waits forever).
  void set_error_handler(error_handler handler);
  bool failed() const;

  const device_id& device() const;
  /// How many main-lane jobs have completed.
  std::uint64_t completed() const;

  /// Seconds this stream has spent running jobs (not waiting for other streams' events,
  /// not idle) since it started: a device's utilisation is busy / elapsed.
  double busy_seconds() const;

  /// The runtime's side of the stream (runtime/core/stream_state.hpp); opaque to plugins.
  stream_state& state() const { return *state_; }

 private:
  event enqueue(job work, bool busy, const job_label& label);

  std::unique_ptr<stream_state> state_;
};

/// How a run's devices compute: the GPUs' [run] tf32, the CPUs' [run] cpu_gemm.
struct device_options {
  bool tf32 = false;  // GEMMs on TF32 tensor cores
  kernels::cpu_gemm cpu_gemm = kernels::cpu_gemm::automatic;
};

/// A device: its id, its stream and the kernel context its kernels run with.
/// How a message an actor of this thread sends goes: to another node, left in the
/// receiver's shared-memory queue or through CAF; or within its node, from a host actor of
/// that node (which a simulation runs with node0's host actors).
enum class node_send { unsaid, posted, through_caf, within_node };

/// What this thread is sending, while one lives (device_actor::send_written). A simulation
/// reads it to price the message's way (Note [nodes of one machine] in
/// actors/tools/simulate.cpp); nothing else does.
class node_send_scope {
 public:
  explicit node_send_scope(node_send kind);
  ~node_send_scope();
  node_send_scope(const node_send_scope&) = delete;
  node_send_scope& operator=(const node_send_scope&) = delete;
  static node_send current();

 private:
  node_send before_;
};

class device {
 public:
  device(device_id id, int core, const device_options& options = {});
  device(device_id id, simulation& world);  // a simulated device
  ~device();
  const device_id& id() const { return id_; }
  stream& work() { return *stream_; }
  const kernels::context& context() const { return context_; }

 private:
  device_id id_;
  std::unique_ptr<stream> stream_;
  kernels::context context_;
};

/// The devices of one run, created from their names. CPU device cpu:N is bound to the
/// N-th allowed core (modulo the core count). While any device_set lives, CPU kernels use
/// one thread per call, process-wide: OpenBLAS 0.3.21 has no per-thread setting; the
/// value from before is restored when the last one goes (Note [OpenBLAS threads]).
class device_set {
 public:
  /// `first_core`: the core of cpu:0, for several processes on one machine (cpu:N runs on
  /// core first_core + N, modulo the cores this process may use).
  explicit device_set(const std::vector<device_id>& ids, int first_core = 0,
                      const device_options& options = {});
  /// Simulated devices: their streams run on `world`'s virtual clock, one thread for all.
  device_set(const std::vector<device_id>& ids, simulation& world);
  ~device_set();
  device_set(const device_set&) = delete;
  device_set& operator=(const device_set&) = delete;
  /// The device named `id`; TROUPE_CHECK fails if it is not in the set.
  device& at(const device_id& id);
  const std::vector<std::unique_ptr<device>>& all() const { return devices_; }
  /// Waits until every device has run all its submitted work.
  void synchronize();

 private:
  std::vector<std::unique_ptr<device>> devices_;
};

/// The number of CPUs this process may run on.
int allowed_core_count();

}  // namespace troupe
