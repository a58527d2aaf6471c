// stream_worker.cpp: the backends with a thread of their own: a CPU device's worker, and a
// GPU's, which issues each job's kernels to the GPU (Note [stream backends] in
// stream_state.hpp). Also what every worker does between its jobs: poll other processes'
// messages, and run the wake-ups put off (Note [deferred wake-ups] in deferred.hpp).
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
#include <pthread.h>
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/core/deferred.hpp"
#include "runtime/core/gpu.hpp"
#include "runtime/core/job_span.hpp"
#include "runtime/core/stream_poller.hpp"
#include "runtime/core/stream_state.hpp"
#include "troupe/trace.hpp"

namespace troupe {

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

namespace {

// Note [denormals flushed]
// A CPU device's thread computes with denormal floats flushed to zero, as TensorFlow's
// compute threads do (x86's MXCSR: FTZ writes a result below 2^-126 as zero, DAZ reads such
// an input as zero). Without it one denormal in a GEMM's operands sends the core into
// microcode assists: a 784-(1024 x 6)-10 GELU MLP at batch 512 on random data, whose
// backward makes denormal gradients, ran 4.7x slower (1139 against 5319 samples/s, oneDNN's
// GEMM; OpenBLAS's slower still, 604), 0.45x PyTorch. Values below 1.2e-38 are far below
// every tolerance a run has, and every device of a run flushes alike, so the equivalence of
// wirings and bit-for-bit resumption hold as before. Kernels called on other threads (tests,
// check-layer) keep IEEE denormals.
void flush_denormals() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ (bit 15) | DAZ (bit 6)
#endif
}

/// "troupe cpu:1", for profilers and debuggers (15 characters at most).
void name_this_thread(const device_id& device) {
  pthread_setname_np(pthread_self(), ("troupe " + device.to_string()).substr(0, 15).c_str());
}

// A CPU stream's backend: one worker thread that runs the jobs in order (Note [CPU streams]).
class thread_backend : public stream_backend {
 public:
  explicit thread_backend(int core) : core_(core) {}

  void attach(stream& s) override {
    state_ = &s.state();
    worker_ = std::thread([this] {
      polls_messages = core_ >= 0;  // a device's (device_set pins each to a core)
      bind_to_core(core_);
      name_this_thread(state_->device);
      flush_denormals();  // Note [denormals flushed]
      started();
      run();
    });
  }

  void detach(stream&) override {
    {
      std::lock_guard<std::mutex> guard{state_->mutex};
      state_->stopping = true;
    }
    work_ready_.notify_all();
    worker_.join();
  }

  bool on_own_thread() const override { return std::this_thread::get_id() == worker_.get_id(); }

  void wake(stream&, bool sleeping) override {
    if (sleeping)
      work_ready_.notify_one();
  }

 protected:
  /// On the worker, before its first job.
  virtual void started() {}
  /// On the worker, after it took its next job or task off the queue.
  virtual void took_next() {}
  /// `job` has run: its captures go, then its lane's progress advances.
  virtual void finish(stream_entry& job) {
    job.work = nullptr;  // release what the job captured before reporting it done
    state_->completed(job.idle_lane);
  }

  stream_state* state_ = nullptr;

 private:
  /// The next job or task, under `lock`; waits (spinning, then sleeping) while there is
  /// none. False: stopping, and everything submitted has run.
  bool take_next(std::unique_lock<std::mutex>& lock, stream_entry& next, stream::job& task);
  /// Under the lock: nothing to run now (an idle job may wait for main-lane work due
  /// before it would end: Note [looking ahead before an idle job] in stream.cpp).
  bool idle();
  /// Waits, under `lock`, until there is something to run or the stream stops.
  void wait_for_work(std::unique_lock<std::mutex>& lock);
  void run_job(stream_entry& next);
  void run();

  int core_;
  std::condition_variable work_ready_;
  std::thread worker_;
  // The idle lane's head not before (Note [looking ahead before an idle job]).
  std::chrono::steady_clock::time_point idle_from_{};
  job_label ran_label_;  // the last job's, and how long it took: learnt under the lock
  std::int64_t ran_ns_ = -1;
};

bool thread_backend::idle() {
  auto& s = *state_;
  if (!s.queue.empty() || !s.posted.empty())
    return false;
  if (s.idle_queue.empty())
    return true;
  const auto now = std::chrono::steady_clock::now();
  if (now < idle_from_)
    return true;
  const auto hold = s.idle_hold_ns(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
  if (hold <= 0)
    return false;
  idle_from_ = now + std::chrono::nanoseconds(hold);
  return true;
}

void thread_backend::wait_for_work(std::unique_lock<std::mutex>& lock) {
  auto& s = *state_;
  lock.unlock();
  auto spin_from = std::chrono::steady_clock::now();
  bool announced = false;  // before_sleep said so
  for (;;) {
    std::this_thread::yield();
    poll_between_jobs();
    const auto now = std::chrono::steady_clock::now();
    // Nothing to run for a while: now the wake-ups any stream's thread put off (Note
    // [deferred wake-ups]); before it sleeps at the latest.
    if (now - spin_from >= idle_before_deferred)
      run_deferred();
    // About to sleep: the poller says so to other processes that leave messages here
    // (they then wake this process), unless one came meanwhile.
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
    if (!idle() || s.stopping || now - spin_from >= spin_before_sleep)
      break;
    lock.unlock();
  }
  while (idle() && !s.stopping) {
    s.worker_sleeping = true;
    if (s.idle_queue.empty())
      work_ready_.wait(lock);
    else
      work_ready_.wait_until(lock, idle_from_);
    s.worker_sleeping = false;
  }
  if (announced)
    with_poller(
        [](stream_poller& p) {
          p.after_wake();
          return true;
        },
        true);
}

bool thread_backend::take_next(std::unique_lock<std::mutex>& lock, stream_entry& next,
                               stream::job& task) {
  auto& s = *state_;
  if (ran_ns_ >= 0) {
    s.learn(ran_label_, ran_ns_);
    ran_ns_ = -1;
  }
  if (idle() && !s.stopping)
    wait_for_work(lock);
  if (!s.posted.empty()) {
    task = std::move(s.posted.front());
    s.posted.pop_front();
  } else if (!s.queue.empty()) {
    next = std::move(s.queue.front());
    s.queue.pop_front();
    s.note_start(next.label, false, steady_clock_ns());
  } else if (!s.idle_queue.empty()) {
    next = std::move(s.idle_queue.front());
    s.idle_queue.pop_front();
    s.note_start(next.label, true, steady_clock_ns());
  } else {
    return false;  // stopping, and everything submitted has run
  }
  return true;
}

void thread_backend::run_job(stream_entry& next) {
  auto& s = *state_;
  if (!next.busy)
    run_deferred();  // a wait for another stream, which may need what was put off
  auto started = std::chrono::steady_clock::now();
  if (!s.failed.load(std::memory_order_acquire)) {
    auto traced_start = s.trace_track != 0 && trace::enabled() ? trace::now_ns() : 0;
    s.run_guarded(next.work);
    if (traced_start != 0)
      record_job_span(s.trace_track, next.label, next.submitted_ns, traced_start,
                      trace::now_ns() - traced_start);
    if (next.busy)
      s.busy_nanoseconds.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                               started)
              .count(),
          std::memory_order_relaxed);
  }
  s.progress->note_running(0, false);
  run_deferred_if_late();
  ran_label_ = next.label;
  ran_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::steady_clock::now() - started)
                .count();
}

void thread_backend::run() {
  stream_worker = true;  // Note [deferred wake-ups]
  struct at_exit {
    ~at_exit() {
      run_deferred();
      stream_worker = false;
    }
  } deferred_run_at_exit;
  for (;;) {
    stream_entry next;
    stream::job task;
    poll_between_jobs();
    {
      std::unique_lock<std::mutex> lock{state_->mutex};
      if (!take_next(lock, next, task))
        return;
    }
    took_next();
    if (task) {
      state_->run_guarded(task);  // Note [one failure path]
      continue;
    }
    run_job(next);
    finish(next);
  }
}

// A GPU's stream: the worker issues each job's kernels to the GPU's queue, and a job's
// event is reached when the GPU has run them (Note [GPU streams] in gpu.hpp).
class gpu_backend final : public thread_backend {
 public:
  explicit gpu_backend(std::unique_ptr<gpu::queue> queue)
      : thread_backend(-1), queue_(std::move(queue)) {}

  void detach(stream& s) override {
    thread_backend::detach(s);
    // Every job's callback has run after this (they refer to this stream), and so the
    // captures they retired can go.
    queue_->synchronize();
    release_retired();
  }

  gpu::queue* gpu_queue() const override { return queue_.get(); }

 protected:
  void started() override {
    polls_messages = true;
    state_->run_guarded([this] { queue_->enter_thread(); });  // its GPU is this thread's
  }
  void took_next() override { release_retired(); }
  void finish(stream_entry& job) override {
    state_->run_guarded([&] { finish_on_gpu(std::move(job.work), job.idle_lane); });
  }

 private:
  void finish_on_gpu(stream::job captures, bool idle_lane);
  /// Releases (on this thread) the captures of jobs the GPU has run.
  void release_retired() {
    std::vector<stream::job> done;
    std::lock_guard<std::mutex> guard{retired_mutex_};
    done.swap(retired_);
  }

  std::unique_ptr<gpu::queue> queue_;
  std::mutex retired_mutex_;
  std::vector<stream::job> retired_;  // guarded: captures of jobs the GPU has run
};

// Note [GPU streams] in runtime/core/gpu.hpp.
void gpu_backend::finish_on_gpu(stream::job captures, bool idle_lane) {
  // The event's callbacks (a loss report, a message) run on the backend's thread: bound to
  // this thread's recorder there, so that what they send is traced as from here.
  std::shared_ptr<trace::recorder> recorder;
  if (trace::observing()) {
    recorder = trace::bind_this_thread(nullptr);
    trace::bind_this_thread(recorder);
  }
  auto* s = state_;
  auto reached = [s, recorder, progress = idle_lane ? s->idle_progress : s->progress] {
    progress->advance();
    if (progress->has_watchers()) {
      trace::thread_binding bound{recorder};
      s->run_guarded([&progress] { progress->fire_due(); });
    }
  };
  try {
    queue_->when_done([this, reached, captures = std::move(captures)]() mutable {
      {
        std::lock_guard<std::mutex> guard{retired_mutex_};
        retired_.push_back(std::move(captures));
      }
      reached();
    });
  } catch (...) {
    reached();  // nothing waits forever for a job the GPU cannot report (Note [one failure path])
    throw;
  }
}

}  // namespace

std::unique_ptr<stream_backend> make_thread_backend(int core) {
  return std::make_unique<thread_backend>(core);
}

std::unique_ptr<stream_backend> make_gpu_backend(std::unique_ptr<gpu::queue> queue) {
  return std::make_unique<gpu_backend>(std::move(queue));
}

}  // namespace troupe
