// stream.cpp: a stream's queue, its two lanes, its events and its failure path, whatever
// backend runs it (Note [stream backends] in stream_state.hpp); the CPU and GPU workers are
// in stream_worker.cpp, the simulated streams in simulation.cpp.
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
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string_view>

#include "runtime/core/job_span.hpp"
#include "runtime/core/stream_state.hpp"
#include "troupe/error.hpp"
#include "troupe/trace.hpp"

namespace troupe {

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

stream::stream(device_id device, int core) : stream(device, make_thread_backend(core)) {}

stream::stream(device_id device, std::unique_ptr<stream_backend> backend)
    : state_(std::make_unique<stream_state>()) {
  state_->device = device;
  state_->backend = std::move(backend);
  state_->backend->attach(*this);
}

stream::~stream() { state_->backend->detach(*this); }

bool stream::on_own_thread() const { return state_->backend->on_own_thread(); }

const device_id& stream::device() const { return state_->device; }
void stream::set_trace_track(std::uint32_t track) { state_->trace_track = track; }
std::uint32_t stream::trace_track() const { return state_->trace_track; }
bool stream::failed() const { return state_->failed.load(std::memory_order_acquire); }
std::uint64_t stream::completed() const { return state_->progress->completed(); }

double stream::busy_seconds() const {
  return static_cast<double>(state_->busy_nanoseconds.load(std::memory_order_relaxed)) * 1e-9;
}

void stream::notify_when_reached(std::uint64_t sequence, std::function<void()> callback) {
  state_->progress->notify_when_reached(sequence, std::move(callback));
}

gpu::queue* gpu_queue_of(const stream& s) { return s.state().backend->gpu_queue(); }

event stream::submit(job work, const job_label& label) {
  return enqueue(std::move(work), true, label);
}

event stream::enqueue(job work, bool busy, const job_label& label) {
  auto& s = *state_;
  bool sleeping;
  std::uint64_t sequence;
  auto submitted = trace::enabled() ? trace::now_ns() : 0;
  {
    std::lock_guard<std::mutex> guard{s.mutex};
    s.queue.push_back(stream_entry{std::move(work), busy, label, submitted, false, {}});
    if (s.queue.size() == 1)
      s.note_next_job();
    sequence = ++s.submitted;
    sleeping = s.worker_sleeping;
  }
  s.backend->wake(*this, sleeping);
  return event{s.progress, sequence};
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
  if (e.owner == nullptr || e.owner == state_->progress || e.owner == state_->idle_progress)
    return out;
  out.set_ = state_->expected;
  out.on_ = e;
  std::lock_guard<std::mutex> guard{out.set_->mutex};
  out.set_->events.push_back({e, std::move(wanted)});
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

}  // namespace

std::int64_t steady_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t stream_state::estimate_ns(const job_label& label) const {
  auto found = estimates.find(estimate_key(label));
  return found == estimates.end() ? 0 : found->second;
}

void stream_state::learn(const job_label& label, std::int64_t took_ns) {
  if (!idle_lanes_used.load(std::memory_order_relaxed))
    return;
  auto& e = estimates[estimate_key(label)];
  e = e == 0 ? std::max<std::int64_t>(1, took_ns) : (3 * e + took_ns) / 4;
}

void stream_state::note_next_job() {
  if (!idle_lanes_used.load(std::memory_order_relaxed))
    return;
  progress->note_next(queue.empty() ? 0 : estimate_ns(queue.front().label));
}

void stream_state::note_start(const job_label& label, bool idle_lane, std::int64_t now_ns) {
  held_since_ns = -1;  // whatever waited, something runs now
  if (!idle_lanes_used.load(std::memory_order_relaxed))
    return;
  const auto estimate = estimate_ns(label);
  progress->note_running(now_ns + std::max<std::int64_t>(1, estimate), !idle_lane);
  note_next_job();
}

std::int64_t stream_state::idle_hold_ns(std::int64_t now_ns) {
  if (idle_queue.empty())
    return 0;
  const auto length = estimate_ns(idle_queue.front().label);
  if (length <= 0 || (held_since_ns >= 0 && now_ns - held_since_ns >= length))
    return 0;
  std::int64_t soonest = length;
  {
    std::lock_guard<std::mutex> guard{expected->mutex};
    for (const auto& e : expected->events)
      if (!e.wanted || e.wanted())
        soonest = std::min(soonest, e.on.owner->eta_ns(e.on.sequence, now_ns));
  }
  // Waiting costs the device the wait; running costs the message what is left of the job
  // when it comes. Bench/pipeline_schedules.py (and simulations of it) came out best
  // waiting only for what is due within the first half of the job.
  if (2 * soonest >= length)
    return 0;
  if (held_since_ns < 0)
    held_since_ns = now_ns;
  // Looked at again when the message comes (it wakes the stream), or when it should have.
  constexpr std::int64_t recheck_ns = 20'000;
  const auto left = std::max<std::int64_t>(recheck_ns, length - (now_ns - held_since_ns));
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
  auto& s = *state_;
  bool sleeping;
  std::uint64_t sequence;
  auto submitted = trace::enabled() ? trace::now_ns() : 0;
  {
    std::lock_guard<std::mutex> guard{s.mutex};
    idle_lanes_used.store(true, std::memory_order_relaxed);
    s.idle_queue.push_back(stream_entry{std::move(work), true, label, submitted, true, {}});
    sequence = ++s.idle_submitted;
    sleeping = s.worker_sleeping;
  }
  s.backend->wake(*this, sleeping);
  return event{s.idle_progress, sequence};
}

void stream::hurry(const event& e) {
  auto& s = *state_;
  if (e.owner != s.idle_progress)
    return;
  {
    std::lock_guard<std::mutex> guard{s.mutex};
    // The idle jobs that left the idle queue (run, running or hurried) are its first ones.
    while (!s.idle_queue.empty() && s.idle_submitted - s.idle_queue.size() < e.sequence) {
      s.queue.push_back(std::move(s.idle_queue.front()));
      s.idle_queue.pop_front();
    }
    s.note_next_job();
  }
  s.backend->hurried(*this);
}

void stream::post(job task) {
  auto& s = *state_;
  bool sleeping;
  {
    std::lock_guard<std::mutex> guard{s.mutex};
    s.posted.push_back(std::move(task));
    sleeping = s.worker_sleeping;
  }
  s.backend->posted(*this);
  s.backend->wake(*this, sleeping);
}

void stream::sent_to_network(std::int64_t bytes) { sent_to_network(bytes, false); }

namespace {
std::atomic<std::int64_t> bytes_to_nodes{0};  // stream::sent_to_nodes()
}  // namespace

std::int64_t stream::sent_to_nodes() { return bytes_to_nodes.load(std::memory_order_relaxed); }

void stream::sent_to_network(std::int64_t bytes, bool posted) {
  bytes_to_nodes.fetch_add(bytes, std::memory_order_relaxed);
  state_->backend->sent_to_network(*this, bytes, posted);
}

namespace {
thread_local node_send node_send_now = node_send::unsaid;  // node_send_scope::current()
}  // namespace

node_send_scope::node_send_scope(node_send kind) : before_(node_send_now) {
  node_send_now = kind;
}

node_send_scope::~node_send_scope() { node_send_now = before_; }

node_send node_send_scope::current() { return node_send_now; }

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
  auto& s = *state_;
  if (e.owner == nullptr || e.owner == s.progress || e.reached())
    return;
  if (e.owner == s.idle_progress) {
    hurry(e);  // Note [idle lane]
    return;
  }
  const job_label label{job_kind_name(job_kind::wait)};
  if (!s.backend->waits_in_queue()) {
    enqueue([e] { e.wait(); }, false, label);
    return;
  }
  // A simulated stream's wait holds its place until the event is reached (simulation.cpp).
  bool sleeping;
  {
    std::lock_guard<std::mutex> guard{s.mutex};
    s.queue.push_back(stream_entry{nullptr, false, label, 0, false, e});
    ++s.submitted;
    sleeping = s.worker_sleeping;
  }
  s.backend->wake(*this, sleeping);
}

event stream::last() const {
  std::lock_guard<std::mutex> guard{state_->mutex};
  return event{state_->progress, state_->submitted};
}

void stream::synchronize() {
  event idle_last;
  {
    std::lock_guard<std::mutex> guard{state_->mutex};
    idle_last = event{state_->idle_progress, state_->idle_submitted};
  }
  last().wait();
  idle_last.wait();
}

void stream::set_error_handler(error_handler handler) {
  std::lock_guard<std::mutex> guard{state_->mutex};
  state_->on_error = std::move(handler);
}

void stream_state::fail(std::exception_ptr error) {
  // Only the first failure is reported: after it the run is ending anyway.
  if (failed.exchange(true, std::memory_order_acq_rel))
    return;
  stream::error_handler handler;
  {
    std::lock_guard<std::mutex> guard{mutex};
    handler = on_error;
  }
  if (handler)
    handler(std::move(error));
}

void stream_state::run_guarded(const std::function<void()>& work) {
  try {
    work();
  } catch (...) {
    fail(std::current_exception());
  }
}

void stream_state::completed(bool idle_lane) {
  auto& lane = idle_lane ? *idle_progress : *progress;
  lane.advance();
  if (lane.has_watchers())
    run_guarded([&lane] { lane.fire_due(); });
}

}  // namespace troupe
