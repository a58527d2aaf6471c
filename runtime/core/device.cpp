// device.cpp: CPU streams (a worker thread per device) and the device set.
//
// Note [CPU streams]
// A CPU device runs its jobs on one thread bound to one core. Actors submit jobs from
// their handlers and return at once, so a handler never runs long compute and the device
// thread is never idle while work is queued. Waking a sleeping thread
// costs tens of microseconds (CAF-0.17-NOTES.md section 7), so the worker first spins
// briefly (yielding, so that on a single core it lets the submitting thread run) before
// it sleeps on a condition variable.
//
// Besides jobs, the thread runs posted tasks: short host work that is not part of the
// stream's order, taken before the next job. The actors placed on a device handle their
// messages this way (Note [actors on device threads] in actors/base/device_scheduler.cpp).
//
// Note [one failure path]
// Whatever a stream's thread runs on the stream's behalf, a job, a posted task (an actor's
// handler) or an event callback (come back when ready), may throw. Each goes through
// run_guarded()/fail(): the stream is marked failed and its error handler (the session's,
// which ends the run with exit 1 and the message) hears of the first failure. Nothing a
// stream runs can terminate the process by throwing.
//
// Note [events outlive their stream]
// An event is copied into every tensor, and tensors outlive the device_set that made them
// (a test keeps its results; a session returns parameters). So an event does not point to
// its stream but shares the stream's progress (completed count, host waiters, callbacks),
// which lives as long as any event of it. A stream drains its queue before it goes, so
// every event of a gone stream is reached: reached() is true, then() runs at once, wait()
// returns. A copy costs one reference-count increment, as a tensor's storage already does.
//
// Note [OpenBLAS threads]
// A CPU device is one core, so its GEMMs must not spread over the other cores (OpenBLAS's
// default). The right setting would be per stream thread, but this OpenBLAS (0.3.21,
// Debian 12) has only the process-wide openblas_set_num_threads (set_num_threads_local
// arrived in 0.3.27). So the setting is scoped instead: the first live device_set sets one
// thread and remembers the value it found; the last one to go restores it, unless someone
// changed it meanwhile (then theirs stands). The limitation: while a device_set lives, a
// library user's own BLAS calls on other threads run on one thread too.
#include "troupe/device.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <string_view>

#include "runtime/core/deferred.hpp"
#include "runtime/core/device_name.hpp"
#include "runtime/core/gpu.hpp"
#include "runtime/core/job_span.hpp"
#include "runtime/core/simulation.hpp"
#include "runtime/core/stream_poller.hpp"
#include "troupe/error.hpp"
#include "troupe/trace.hpp"

namespace troupe {

std::string device_id::to_string() const {
  return (node > 0 ? "node" + std::to_string(node) + "/" : std::string{}) +
         kernels::to_string(type) + ":" + std::to_string(index);
}

namespace {
std::atomic<int> the_node{0};
}  // namespace

int this_node() { return the_node.load(std::memory_order_relaxed); }
void set_this_node(int node) { the_node.store(node, std::memory_order_relaxed); }

bool device_id::parse(const std::string& text, device_id& out) {
  auto parsed = parse_device_name(text);  // the one parser (device_name.hpp)
  if (parsed.ok())
    out = parsed.id;
  return parsed.ok();
}

bool event::reached() const {
  return owner == nullptr || owner->completed() >= sequence;
}

void event::wait() const {
  if (!reached())
    owner->wait_until(sequence);
}

void event::then(std::function<void()> callback) const {
  if (owner == nullptr)
    callback();
  else
    owner->notify_when_reached(sequence, std::move(callback));
}

void stream_progress::wait_until(std::uint64_t sequence) {
  if (completed() >= sequence)
    return;
  host_waiters_.fetch_add(1);
  {
    std::unique_lock<std::mutex> lock{mutex_};
    done_.wait(lock, [&] { return completed() >= sequence; });
  }
  host_waiters_.fetch_sub(1);
}

void stream_progress::notify_when_reached(std::uint64_t sequence,
                                          std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    watchers_.emplace_back(sequence, std::move(callback));
    watcher_count_.fetch_add(1);  // before reading completed_: see fire_due
  }
  if (completed_.load() >= sequence)  // sequentially consistent, like advance()
    fire_due();
}

void stream_progress::advance() {
  completed_.fetch_add(1);
  if (host_waiters_.load() > 0) {
    std::lock_guard<std::mutex> guard{mutex_};
    done_.notify_all();
  }
}

// Either the worker (which counts a job, then reads watcher_count_) or the registering
// thread (which counts a watcher, then reads completed_) sees the other's write: both are
// sequentially consistent. Whoever takes a watcher out under the lock calls it, once.
void stream_progress::fire_due() {
  std::vector<std::function<void()>> due;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    auto done = completed();
    for (auto it = watchers_.begin(); it != watchers_.end();) {
      if (it->first <= done) {
        due.push_back(std::move(it->second));
        it = watchers_.erase(it);
        watcher_count_.fetch_sub(1);
      } else {
        ++it;
      }
    }
  }
  // Taken out, a callback is never called again: the others must run even if one throws.
  std::exception_ptr first;
  for (auto& callback : due) {
    try {
      callback();
    } catch (...) {
      if (!first)
        first = std::current_exception();
    }
  }
  if (first)
    std::rethrow_exception(first);
}

std::int64_t stream_progress::eta_ns(std::uint64_t sequence, std::int64_t now_ns) const {
  const auto done = completed();
  if (sequence <= done)
    return 0;
  const auto until = running_until_ns_.load(std::memory_order_acquire);
  const bool main_lane = until > 0 && running_main_lane_.load(std::memory_order_relaxed);
  const std::int64_t rest = until > 0 ? std::max<std::int64_t>(0, until - now_ns) : 0;
  // The jobs after the one running, each guessed to take what the next one will.
  const auto after = static_cast<std::int64_t>(sequence - done) - (main_lane ? 1 : 0);
  return rest + after * next_estimate_ns_.load(std::memory_order_relaxed);
}

int allowed_core_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return 1;
  return std::max(1, CPU_COUNT(&set));
}

namespace {

// Binds the calling thread to the `core`-th CPU of the process's affinity set.
void bind_to_core(int core) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (core < 0 || sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
    return;
  int count = CPU_COUNT(&allowed);
  if (count <= 0)
    return;
  int wanted = core % count;
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed))
      continue;
    if (seen++ == wanted) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
      return;
    }
  }
}

constexpr auto spin_before_sleep = std::chrono::microseconds(200);

// The process's stream poller (runtime/core/stream_poller.hpp), and how many threads are
// inside one of its calls (set_stream_poller waits for none).
std::atomic<stream_poller*> the_poller{nullptr};
std::atomic<int> poller_calls{0};
// Whether this thread polls: a device's stream (a CPU device's, whose jobs are short, or a
// GPU's host thread), not a stream of the session's own (the checkpoint writer's, which
// blocks on files, or the batch assembler's gathers), whose long waits would count as a
// thread awake and hold up a wake-up.
thread_local bool polls_messages = false;

/// `call(poller)` if there is one; `otherwise` if not.
template <class Call>
bool with_poller(Call call, bool otherwise) {
  if (!polls_messages)
    return otherwise;
  poller_calls.fetch_add(1);
  auto* poller = the_poller.load();
  const bool result = poller != nullptr ? call(*poller) : otherwise;
  poller_calls.fetch_sub(1);
  return result;
}

void poll_between_jobs() {
  with_poller(
      [](stream_poller& p) {
        p.poll();
        return true;
      },
      true);
}

}  // namespace

void set_stream_poller(stream_poller* poller) {
  the_poller.store(poller);
  while (poller_calls.load() != 0)
    std::this_thread::yield();
}

namespace {
// A wait shorter than this ends before a put-off wake-up would be paid for (16 us here):
// Note [deferred wake-ups].
constexpr auto idle_before_deferred = std::chrono::microseconds(20);
static_assert(idle_before_deferred < spin_before_sleep, "deferred tasks run before a sleep");

// Note [deferred wake-ups] in runtime/core/deferred.hpp: the tasks put off, one list for
// the process, which any stream's thread runs.
struct deferred_tasks {
  std::mutex mutex;
  std::vector<std::function<void()>> tasks;     // guarded by mutex
  std::chrono::steady_clock::time_point since;  // guarded by mutex: of the oldest
  std::atomic<bool> any{false};
};

deferred_tasks& deferred() {
  static deferred_tasks tasks;
  return tasks;
}

thread_local bool stream_worker = false;  // runs deferred tasks (stream::run)

void run_deferred() {
  auto& d = deferred();
  if (!d.any.load(std::memory_order_acquire))
    return;
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> guard{d.mutex};
    tasks.swap(d.tasks);
    d.any.store(false, std::memory_order_relaxed);
  }
  for (auto& task : tasks)
    task();
}

void run_deferred_if_late() {
  auto& d = deferred();
  if (!d.any.load(std::memory_order_acquire))
    return;
  {
    std::lock_guard<std::mutex> guard{d.mutex};
    if (d.tasks.empty() || std::chrono::steady_clock::now() - d.since < deferred_patience)
      return;
  }
  run_deferred();
}

}  // namespace

bool on_stream_worker() { return stream_worker; }

bool defer_until_idle(std::function<void()> task) {
  if (!stream_worker)
    return false;
  auto& d = deferred();
  std::lock_guard<std::mutex> guard{d.mutex};
  if (d.tasks.empty())
    d.since = std::chrono::steady_clock::now();
  d.tasks.push_back(std::move(task));
  d.any.store(true, std::memory_order_release);
  return true;
}

void record_job_span(std::uint32_t track, const job_label& label, std::int64_t submitted_ns,
                     std::int64_t start_ns, std::int64_t duration_ns) {
  trace::event e;
  e.type = trace::event_type::job;
  e.start_ns = start_ns;
  e.duration_ns = duration_ns;
  e.value = submitted_ns > 0 ? start_ns - submitted_ns : 0;  // queued
  e.track = track;
  e.peer = label.actor;
  e.name = label.name;
  e.step = label.step;
  e.microbatch = label.microbatch;
  e.replica = label.replica;
  e.phase = label.phase;
  e.bytes = label.bytes;
  trace::record(e);
}

stream::stream(device_id device, int core)
    : device_(device), expected_(std::make_shared<expected_events>()) {
  worker_ = std::thread([this, core] {
    polls_messages = core >= 0;  // a device's (device_set pins each to a core)
    bind_to_core(core);
    // Named for profilers and debuggers: "troupe cpu:1" (15 characters at most).
    pthread_setname_np(pthread_self(), ("troupe " + device_.to_string()).substr(0, 15).c_str());
    run();
  });
}

stream::stream(device_id device, simulation& world)
    : device_(device), expected_(std::make_shared<expected_events>()), world_(&world) {
  world.attach(*this);
}

stream::stream(device_id device, std::unique_ptr<gpu::queue> queue)
    : device_(device), expected_(std::make_shared<expected_events>()), gpu_(std::move(queue)) {
  worker_ = std::thread([this] {
    polls_messages = true;
    pthread_setname_np(pthread_self(), ("troupe " + device_.to_string()).substr(0, 15).c_str());
    run_guarded([this] { gpu_->enter_thread(); });  // its GPU is this thread's current one
    run();
  });
}

bool stream::on_own_thread() const {
  return world_ != nullptr ? world_->on_own_thread()
                           : std::this_thread::get_id() == worker_.get_id();
}

void stream::wake(bool worker_sleeping) {
  if (world_ != nullptr)
    world_->wake(*this);
  else if (worker_sleeping)
    work_ready_.notify_one();
}

stream::~stream() {
  if (world_ != nullptr) {  // as a worker does: run everything queued before going
    synchronize();
    drain_posted();
    world_->detach(*this);
    return;
  }
  {
    std::lock_guard<std::mutex> guard{mutex_};
    stopping_ = true;
  }
  work_ready_.notify_all();
  worker_.join();
  if (gpu_) {
    // Every job's callback has run after this (they refer to this stream), and so the
    // captures they retired can go.
    gpu_->synchronize();
    release_retired();
  }
}

// Note [GPU streams] in runtime/core/gpu.hpp.
void stream::finish_on_gpu(job captures, bool idle_lane) {
  // The event's callbacks (a loss report, a message) run on the backend's thread: bound to
  // this thread's recorder there, so that what they send is traced as from here.
  std::shared_ptr<trace::recorder> recorder;
  if (trace::observing()) {
    recorder = trace::bind_this_thread(nullptr);
    trace::bind_this_thread(recorder);
  }
  auto reached = [this, recorder, progress = idle_lane ? idle_progress_ : progress_] {
    progress->advance();
    if (progress->has_watchers()) {
      trace::thread_binding bound{recorder};
      run_guarded([&progress] { progress->fire_due(); });
    }
  };
  try {
    gpu_->when_done([this, reached, captures = std::move(captures)]() mutable {
      {
        std::lock_guard<std::mutex> guard{retired_.mutex};
        retired_.captures.push_back(std::move(captures));
      }
      reached();
    });
  } catch (...) {
    reached();  // nothing waits forever for a job the GPU cannot report (Note [one failure path])
    throw;
  }
}

void stream::release_retired() {
  std::vector<job> done;
  {
    std::lock_guard<std::mutex> guard{retired_.mutex};
    done.swap(retired_.captures);
  }
}

event stream::submit(job work, const job_label& label) {
  return enqueue(std::move(work), true, label);
}

event stream::enqueue(job work, bool busy, const job_label& label) {
  bool sleeping;
  std::uint64_t sequence;
  auto submitted = trace::enabled() ? trace::now_ns() : 0;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    queue_.push_back(entry{std::move(work), busy, label, submitted, false, {}});
    if (queue_.size() == 1)
      note_next_job();
    sequence = ++submitted_;
    sleeping = worker_sleeping_;
  }
  wake(sleeping);
  return event{progress_, sequence};
}

// Note [looking ahead before an idle job]
// An idle job (a zero-bubble weight gradient) is not preempted: main-lane work that
// arrives while it runs waits for its end. If that work is a pipeline's next forward or
// backward, the stage after or before waits too, and the bubble the idle lane was to fill
// grows instead. So before it starts one, the stream looks at what is on its way: the
// messages its actors put aside until a tensor of another stream is written (expect(),
// from include/troupe/inputs.hpp; a forward only while its layer has room to stash it,
// since one without room first hurries that layer's weight gradients anyway). Each
// producing stream publishes, on its progress, when the job it runs should end and what
// its next main-lane job should take: estimates learnt from the jobs of the same actor
// and name it has run (each new duration weighs a quarter). If one such message is due
// within the first half of the idle job, the idle job waits for it: at most its own
// estimated length in all, since waiting longer than the job would take cannot be better
// than running it. A job never run before has no estimate and runs. Streams keep and
// publish estimates only once some stream of the process has had an idle job.
// The same decision is made by real workers and by simulated streams (simulation.cpp),
// so `troupe simulate` predicts it.
struct expected_events {
  struct expected {
    event on;
    std::function<bool()> wanted;  // empty: always
  };
  std::mutex mutex;
  std::vector<expected> events;
};

void stream::expectation::done() {
  if (set_ == nullptr)
    return;
  std::lock_guard<std::mutex> guard{set_->mutex};
  auto& events = set_->events;
  for (auto it = events.begin(); it != events.end(); ++it)
    if (it->on.owner == on_.owner && it->on.sequence == on_.sequence) {
      events.erase(it);
      break;
    }
  set_ = nullptr;
}

stream::expectation stream::expect(const event& e, std::function<bool()> wanted) {
  expectation out;
  if (e.owner == nullptr || e.owner == progress_ || e.owner == idle_progress_)
    return out;
  out.set_ = expected_;
  out.on_ = e;
  std::lock_guard<std::mutex> guard{expected_->mutex};
  expected_->events.push_back({e, std::move(wanted)});
  return out;
}

namespace {

// Whether any stream of the process has had an idle job: until then no stream keeps
// estimates or publishes them, and runs without a zero-bubble schedule pay nothing.
std::atomic<bool> idle_lanes_used{false};

std::uint64_t estimate_key(const job_label& label) {
  return (static_cast<std::uint64_t>(label.source != 0 ? label.source : label.actor) << 32) ^
         static_cast<std::uint64_t>(std::hash<std::string_view>{}(label.name));
}

std::int64_t steady_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::int64_t stream::estimate_ns(const job_label& label) const {
  auto found = estimates_.find(estimate_key(label));
  return found == estimates_.end() ? 0 : found->second;
}

void stream::learn(const job_label& label, std::int64_t took_ns) {
  if (!idle_lanes_used.load(std::memory_order_relaxed))
    return;
  auto& e = estimates_[estimate_key(label)];
  e = e == 0 ? std::max<std::int64_t>(1, took_ns) : (3 * e + took_ns) / 4;
}

void stream::note_next_job() {
  if (!idle_lanes_used.load(std::memory_order_relaxed))
    return;
  progress_->note_next(queue_.empty() ? 0 : estimate_ns(queue_.front().label));
}

void stream::note_start(const job_label& label, bool idle_lane, std::int64_t now_ns) {
  held_since_ns_ = -1;  // whatever waited, something runs now
  if (!idle_lanes_used.load(std::memory_order_relaxed))
    return;
  const auto estimate = estimate_ns(label);
  progress_->note_running(now_ns + std::max<std::int64_t>(1, estimate), !idle_lane);
  note_next_job();
}

std::int64_t stream::idle_hold_ns(std::int64_t now_ns) {
  if (idle_queue_.empty())
    return 0;
  const auto length = estimate_ns(idle_queue_.front().label);
  if (length <= 0 || (held_since_ns_ >= 0 && now_ns - held_since_ns_ >= length))
    return 0;
  std::int64_t soonest = length;
  {
    std::lock_guard<std::mutex> guard{expected_->mutex};
    for (const auto& e : expected_->events)
      if (!e.wanted || e.wanted())
        soonest = std::min(soonest, e.on.owner->eta_ns(e.on.sequence, now_ns));
  }
  // Waiting costs the device the wait; running costs the message what is left of the job
  // when it comes. Bench/pipeline_schedules.py (and simulations of it) came out best
  // waiting only for what is due within the first half of the job.
  if (2 * soonest >= length)
    return 0;
  if (held_since_ns_ < 0)
    held_since_ns_ = now_ns;
  // Looked at again when the message comes (it wakes the stream), or when it should have.
  constexpr std::int64_t recheck_ns = 20'000;
  const auto left = std::max<std::int64_t>(recheck_ns, length - (now_ns - held_since_ns_));
  return std::clamp<std::int64_t>(soonest, recheck_ns, left);
}

// Note [idle lane]
// Some work can run whenever the device has nothing better to do, as long as it runs
// before someone needs its result: a zero-bubble pipeline's weight gradients, which fill
// the time a stage would otherwise spend waiting for its neighbours. Such jobs go to the
// idle lane: the worker takes one only when no posted task and no main-lane job is
// queued, in the order they were submitted. The lane has its own progress, so its events
// mean what events always mean (reached once that many of its jobs have run). Whoever
// needs an idle job done soon hurries it: hurry() moves it and the idle jobs before it to
// the main lane's tail (they still advance the idle lane's progress, and in order, since
// the rest of the idle lane runs only after the main lane empties). wait_for() hurries
// an idle event of its own stream instead of blocking the worker on it, which would wait
// for itself.
//
// An idle job that would delay main-lane work already on its way waits for it (Note
// [looking ahead before an idle job]). That replaced a fixed grace after each idle job
// (200 us, or a tenth of the job), which every weight gradient paid whether or not a
// forward was coming: ZB-H1's measured bubble on its worst stage went from 0.108 / 0.070 /
// 0.251 / 0.156 to 0.088 / 0.050 / 0.215 / 0.141 (P = 2, 4 at M = 4, 8; theory 0.077 /
// 0.040 / 0.200 / 0.111; bench/pipeline_schedules.py).
event stream::submit_when_idle(job work, const job_label& label) {
  bool sleeping;
  std::uint64_t sequence;
  auto submitted = trace::enabled() ? trace::now_ns() : 0;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    idle_lanes_used.store(true, std::memory_order_relaxed);
    idle_queue_.push_back(entry{std::move(work), true, label, submitted, true, {}});
    sequence = ++idle_submitted_;
    sleeping = worker_sleeping_;
  }
  wake(sleeping);
  return event{idle_progress_, sequence};
}

void stream::hurry(const event& e) {
  if (e.owner != idle_progress_)
    return;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    // The idle jobs that left idle_queue_ (run, running or hurried) are its first ones.
    while (!idle_queue_.empty() && idle_submitted_ - idle_queue_.size() < e.sequence) {
      queue_.push_back(std::move(idle_queue_.front()));
      idle_queue_.pop_front();
    }
    note_next_job();
  }
  if (world_ != nullptr)  // its main lane has work now: the simulation looks at it again
    world_->wake(*this);
}

void stream::post(job task) {
  bool sleeping;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    posted_.push_back(std::move(task));
    sleeping = worker_sleeping_;
  }
  if (world_ != nullptr)
    world_->posted_to(*this);
  wake(sleeping);
}

void stream::sent_to_network(std::int64_t bytes) {
  if (world_ != nullptr)
    world_->sent_to_network(*this, bytes);
}

void stream::drain_posted() {
  std::mutex done_mutex;
  std::condition_variable done_signal;
  bool done = false;
  post([&] {
    std::lock_guard<std::mutex> guard{done_mutex};
    done = true;
    done_signal.notify_all();
  });
  std::unique_lock<std::mutex> lock{done_mutex};
  done_signal.wait(lock, [&] { return done; });
}

void stream::wait_for(const event& e) {
  if (e.owner == nullptr || e.owner == progress_ || e.reached())
    return;
  if (e.owner == idle_progress_) {
    hurry(e);  // Note [idle lane]
    return;
  }
  if (world_ == nullptr) {
    enqueue([e] { e.wait(); }, false, job_label{job_kind_name(job_kind::wait)});
    return;
  }
  // A simulated stream's wait holds its place until the event is reached (simulation.cpp).
  bool sleeping;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    queue_.push_back(entry{nullptr, false, job_label{job_kind_name(job_kind::wait)}, 0, false, e});
    ++submitted_;
    sleeping = worker_sleeping_;
  }
  wake(sleeping);
}

event stream::last() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return event{progress_, submitted_};
}

void stream::synchronize() {
  event idle_last;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    idle_last = event{idle_progress_, idle_submitted_};
  }
  last().wait();
  idle_last.wait();
}

void stream::set_error_handler(error_handler handler) {
  std::lock_guard<std::mutex> guard{mutex_};
  on_error_ = std::move(handler);
}

void stream::fail(std::exception_ptr error) {
  // Only the first failure is reported: after it the run is ending anyway.
  if (failed_.exchange(true, std::memory_order_acq_rel))
    return;
  error_handler handler;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    handler = on_error_;
  }
  if (handler)
    handler(std::move(error));
}

template <class Work>
void stream::run_guarded(Work&& work) {
  try {
    work();
  } catch (...) {
    fail(std::current_exception());
  }
}

void stream::run_guarded_job(const job& work) { run_guarded(work); }

void stream::run() {
  stream_worker = true;  // Note [deferred wake-ups]
  struct at_exit {
    ~at_exit() {
      run_deferred();
      stream_worker = false;
    }
  } deferred_run_at_exit;
  // The idle lane's head not before (Note [looking ahead before an idle job]).
  auto idle_from = std::chrono::steady_clock::time_point{};
  // Under mutex_: nothing to run now (an idle job may wait for main-lane
  // work due before it would end: Note [looking ahead before an idle job]).
  auto idle = [this, &idle_from] {
    if (!queue_.empty() || !posted_.empty())
      return false;
    if (idle_queue_.empty())
      return true;
    const auto now = std::chrono::steady_clock::now();
    if (now < idle_from)
      return true;
    const auto hold = idle_hold_ns(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
    if (hold <= 0)
      return false;
    idle_from = now + std::chrono::nanoseconds(hold);
    return true;
  };
  job_label ran_label;  // the last job's, and how long it took: learnt under the lock
  std::int64_t ran_ns = -1;
  for (;;) {
    entry next;
    job task;
    poll_between_jobs();
    {
      std::unique_lock<std::mutex> lock{mutex_};
      if (ran_ns >= 0) {
        learn(ran_label, ran_ns);
        ran_ns = -1;
      }
      if (idle() && !stopping_) {
        lock.unlock();
        auto spin_from = std::chrono::steady_clock::now();
        bool announced = false;  // before_sleep said so
        for (;;) {
          std::this_thread::yield();
          poll_between_jobs();
          const auto now = std::chrono::steady_clock::now();
          // Nothing to run for a while: now the wake-ups any stream's thread put off
          // (Note [deferred wake-ups]); before it sleeps at the latest.
          if (now - spin_from >= idle_before_deferred)
            run_deferred();
          // About to sleep: the poller says so to other processes that leave messages
          // here (they then wake this process), unless one came meanwhile.
          if (now - spin_from >= spin_before_sleep) {
            if (!with_poller([](stream_poller& p) { return p.before_sleep(); }, false)) {
              if (polls_messages && the_poller.load() != nullptr) {
                spin_from = now;  // one came: spin on
                continue;
              }
            } else {
              announced = true;
            }
          }
          lock.lock();
          if (!idle() || stopping_ || now - spin_from >= spin_before_sleep)
            break;
          lock.unlock();
        }
        while (idle() && !stopping_) {
          worker_sleeping_ = true;
          if (idle_queue_.empty())
            work_ready_.wait(lock);
          else
            work_ready_.wait_until(lock, idle_from);
          worker_sleeping_ = false;
        }
        if (announced)
          with_poller(
              [](stream_poller& p) {
                p.after_wake();
                return true;
              },
              true);
      }
      if (!posted_.empty()) {
        task = std::move(posted_.front());
        posted_.pop_front();
      } else if (!queue_.empty()) {
        next = std::move(queue_.front());
        queue_.pop_front();
        note_start(next.label, false, steady_clock_ns());
      } else if (!idle_queue_.empty()) {
        next = std::move(idle_queue_.front());
        idle_queue_.pop_front();
        note_start(next.label, true, steady_clock_ns());
      } else {
        return;  // stopping, and everything submitted has run
      }
    }
    if (gpu_)
      release_retired();
    if (task) {
      run_guarded(task);  // Note [one failure path]
      continue;
    }
    if (!next.busy)
      run_deferred();  // a wait for another stream, which may need what was put off
    auto started = std::chrono::steady_clock::now();
    if (!failed()) {
      auto traced_start = trace_track_ != 0 && trace::enabled() ? trace::now_ns() : 0;
      run_guarded(next.work);
      if (traced_start != 0)
        record_job_span(trace_track_, next.label, next.submitted_ns, traced_start,
                        trace::now_ns() - traced_start);
      if (next.busy)
        busy_nanoseconds_.fetch_add(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                 started)
                .count(),
            std::memory_order_relaxed);
    }
    progress_->note_running(0, false);
    run_deferred_if_late();
    ran_label = next.label;
    ran_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now() - started)
                 .count();
    if (gpu_) {
      run_guarded([&] { finish_on_gpu(std::move(next.work), next.idle_lane); });
      continue;
    }
    next.work = nullptr;  // release what the job captured before reporting it done
    auto& progress = next.idle_lane ? *idle_progress_ : *progress_;
    progress.advance();
    if (progress.has_watchers())
      run_guarded([&progress] { progress.fire_due(); });
  }
}

device::device(device_id id, simulation& world) : id_(id) {
  if (id.type != device_type::cpu)
    throw user_error("device " + id.to_string() +
                     " cannot be simulated: troupe simulate models CPU devices only (its "
                     "wiring can be: --set parallel.devices=[\"cpu:0\", ...] with "
                     "--calibration FILE holding that device's costs)");
  stream_ = std::make_unique<stream>(id, world);
}

device::device(device_id id, int core, const device_options& options) : id_(id) {
  if (id.type == device_type::cuda) {
    gpu::require_device(id.index);  // a user_error naming what the machine has
    auto queue = gpu::require_backend().make_queue(id.index, options.tf32);
    context_ = queue->context();
    stream_ = std::make_unique<stream>(id, std::move(queue));
    return;
  }
  stream_ = std::make_unique<stream>(id, core);
}

device::~device() = default;

namespace {

// Note [OpenBLAS threads]: the live device_sets and the thread count they found.
struct blas_threads_scope {
  std::mutex mutex;
  int live = 0;
  int found = 1;
};

blas_threads_scope& the_blas_threads_scope() {
  static blas_threads_scope scope;
  return scope;
}

}  // namespace

namespace {

// Note [OpenBLAS threads]: the first live device_set makes CPU kernels use one thread.
void enter_blas_threads_scope() {
  auto& scope = the_blas_threads_scope();
  std::lock_guard<std::mutex> guard{scope.mutex};
  if (scope.live++ == 0) {
    scope.found = kernels::cpu_kernel_threads();
    kernels::set_cpu_kernel_threads(1);  // each CPU device is one core (Note [CPU streams])
  }
}

}  // namespace

device_set::device_set(const std::vector<device_id>& ids, simulation& world) {
  enter_blas_threads_scope();
  for (const auto& id : ids)
    devices_.push_back(std::make_unique<device>(id, world));
}

device_set::device_set(const std::vector<device_id>& ids, int first_core,
                       const device_options& options) {
  enter_blas_threads_scope();
  for (const auto& id : ids)
    devices_.push_back(std::make_unique<device>(
        id, id.type == device_type::cpu ? first_core + id.index : -1, options));
}

device_set::~device_set() {
  devices_.clear();  // the streams run what is queued first: still one thread per call
  auto& scope = the_blas_threads_scope();
  std::lock_guard<std::mutex> guard{scope.mutex};
  if (--scope.live == 0 && kernels::cpu_kernel_threads() == 1)
    kernels::set_cpu_kernel_threads(scope.found);
}

device& device_set::at(const device_id& id) {
  for (auto& d : devices_)
    if (d->id() == id)
      return *d;
  TROUPE_CHECK(false, "device " << id.to_string() << " is not part of this run");
  throw;  // unreachable
}

void device_set::synchronize() {
  for (auto& d : devices_)
    d->work().synchronize();
}

}  // namespace troupe
