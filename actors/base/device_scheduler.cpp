// device_scheduler.cpp: routing actors to their devices' threads.
//
// Note [actors on device threads]
// CAF calls the scheduler's enqueue(job) whenever an actor goes from waiting to having
// messages (and an execution unit's exec_later(job) when that happens inside a handler;
// ours forwards to enqueue). CAF guarantees that an actor is enqueued at most once at a
// time, so whichever thread we pick, one thread resumes it. We pick:
// - a placed actor's home stream: the resume is posted to the stream (stream::post) and
//   runs on the device's thread before its next job. A message between two actors on
//   the same device then costs no thread wake-up at all, and on a machine where every
//   core runs a device no other thread has to preempt one to handle it;
// - everything else (the trainer, CAF's printer and the session's own helpers): one host
//   thread. The data loader is placed on its device (Note [the loader on its device]). A
//   device thread that wakes the sleeping host thread leaves that to the first stream
//   thread with nothing to do (Note [deferred wake-ups] in runtime/core/deferred.hpp).
// A handler on a device thread only waits for the job that thread is running, which it
// would wait for anyway: the work it submits goes into the same in-order stream. The
// handler must never block on an event of its own stream (that would wait forever);
// actors never block at all (Note [no blocking waits] in include/troupe/inputs.hpp).
//
// Note [the loader on its device]
// A message to the host thread while it sleeps costs the sender a wake-up: on the
// development VM a notify_one of a sleeping thread took 16 us of the notifying thread
// (a paravirtualised IPI), whichever core the sleeper was bound to. The loader took a
// turn on the host for each credit a first layer gave back, once a micro-batch: in a GPipe
// step of the shipped MLP (4 micro-batches) the first layer's backward handler took 20 us
// instead of 2, 72 us of its device a step (probed). Its handlers are short (the labels of
// a micro-batch, a gather job submitted to the replica's device), so it is placed on its
// device like every other actor: a credit from the same device is a post on that thread,
// from another device a post to a thread that is usually awake. GPipe's samples/s went up
// 5.9% (medians of 5 alternating 1500-step runs); the host thread took 60 turns instead of
// 163 in a 20-step DP2 run of 2 micro-batches (tests/actors/session/training_test.cpp).
//
// Placement is looked up per enqueue in a small map under a mutex (uncontended: two
// devices and a host thread); an actor leaves the map when it terminates, so a later
// actor at the same address is not sent to a stale stream.
#include "actors/base/device_scheduler.hpp"

#include <pthread.h>
#include <time.h>

#include "runtime/core/deferred.hpp"

namespace troupe {

class device_scheduler::unit : public caf::execution_unit {
 public:
  unit(caf::actor_system& system, device_scheduler& owner, stream* home)
      : caf::execution_unit(&system), owner_(owner), home(home) {}

  void exec_later(caf::resumable* job) override { owner_.enqueue(job); }

 private:
  device_scheduler& owner_;

 public:
  stream* const home;  // nullptr: the host thread
};

namespace {

std::mutex host_turns_mutex;
std::vector<std::int64_t>* host_turns = nullptr;  // guarded by host_turns_mutex
std::atomic<bool> recording_host_turns{false};

std::int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

}  // namespace

void device_scheduler::record_host_turns(std::vector<std::int64_t>* into) {
  std::lock_guard<std::mutex> guard{host_turns_mutex};
  host_turns = into;
  recording_host_turns.store(into != nullptr);
}

device_scheduler::device_scheduler(caf::actor_system& system) : abstract_coordinator(system) {}

device_scheduler::~device_scheduler() = default;

bool device_scheduler::place(caf::actor_system& system, const caf::actor& actor, stream& home) {
  auto* self = dynamic_cast<device_scheduler*>(&system.scheduler());
  auto* pointer = caf::actor_cast<caf::abstract_actor*>(actor);
  auto* job = dynamic_cast<caf::resumable*>(pointer);
  if (self == nullptr || job == nullptr)
    return false;
  {
    std::lock_guard<std::mutex> guard{self->homes_mutex_};
    auto& u = self->units_[&home];
    if (u == nullptr)
      u = std::make_unique<unit>(system, *self, &home);
    self->homes_[job] = u.get();
  }
  pointer->attach_functor([self, job] {
    std::lock_guard<std::mutex> guard{self->homes_mutex_};
    self->homes_.erase(job);
  });
  return true;
}

bool device_scheduler::simulate(caf::actor_system& system, simulation& world) {
  auto* self = dynamic_cast<device_scheduler*>(&system.scheduler());
  if (self == nullptr)
    return false;
  self->world_unit_ = std::make_unique<unit>(system, *self, nullptr);
  self->world_.store(&world);
  return true;
}

void device_scheduler::enqueue(caf::resumable* job) {
  unit* home = nullptr;
  {
    std::lock_guard<std::mutex> guard{homes_mutex_};
    auto found = homes_.find(job);
    if (found != homes_.end())
      home = found->second;
  }
  if (home != nullptr) {
    home->home->post([this, job, home] { resume(job, home, max_throughput()); });
    return;
  }
  if (auto* world = world_.load()) {
    world->post_host([this, job] { resume(job, world_unit_.get(), 1); });
    return;
  }
  // From a device thread, the wake-up is put off until a device thread has nothing to do
  // (Note [deferred wake-ups]); one put off at a time wakes the host for everything queued.
  bool notify = false;
  bool put_off = false;
  {
    std::lock_guard<std::mutex> guard{host_->mutex};
    host_->queue.push_back(job);
    // Awake, it takes the job before it sleeps again; a ring on its way wakes it for this too.
    if (host_->sleeping && !host_->ring_put_off) {
      put_off = on_stream_worker();
      host_->ring_put_off = put_off;
      notify = !put_off;
    }
  }
  if (put_off)
    defer_until_idle([host = host_] { host->ring(); });
  else if (notify)
    host_->ready.notify_one();
}

void device_scheduler::host_state::ring() {
  bool wake;
  {
    std::lock_guard<std::mutex> guard{mutex};
    ring_put_off = false;
    wake = sleeping && !queue.empty();
  }
  if (wake)
    ready.notify_one();
}

// As CAF's own workers do (caf/scheduler/worker.hpp): the scheduler holds one reference
// to a job from its enqueue until the job stops being runnable.
void device_scheduler::resume(caf::resumable* job, caf::execution_unit* on,
                              std::size_t throughput) {
  switch (job->resume(on, throughput)) {
    case caf::resumable::resume_later:
      enqueue(job);
      break;
    case caf::resumable::awaiting_message:
    case caf::resumable::done:
      caf::intrusive_ptr_release(job);
      break;
    case caf::resumable::shutdown_execution_unit:
      break;  // only CAF's own shutdown helpers return this; we never enqueue them
  }
}

void device_scheduler::run_host() {
  system().thread_started();
  std::int64_t last_turn_cpu = -1;  // record_host_turns: the CPU time at the last turn's end
  for (;;) {
    caf::resumable* job;
    {
      std::unique_lock<std::mutex> lock{host_->mutex};
      host_->sleeping = true;
      host_->ready.wait(lock, [this] { return host_->stopping || !host_->queue.empty(); });
      host_->sleeping = false;
      if (host_->queue.empty())
        break;
      job = host_->queue.front();
      host_->queue.pop_front();
    }
    // One message per turn on the host: an actor that was placed while it still ran here
    // (CAF schedules an actor once when it is spawned, before the session can place it)
    // goes to its device after its next message instead of keeping the host thread for as
    // long as its mailbox has messages.
    resume(job, host_unit_.get(), 1);
    if (recording_host_turns.load(std::memory_order_relaxed)) {
      const auto cpu = thread_cpu_ns();
      std::lock_guard<std::mutex> guard{host_turns_mutex};
      if (host_turns != nullptr && last_turn_cpu >= 0)
        host_turns->push_back(cpu - last_turn_cpu);
      last_turn_cpu = cpu;
    }
  }
  system().thread_terminates();
}

void device_scheduler::start() {
  host_unit_ = std::make_unique<unit>(system(), *this, nullptr);
  host_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "troupe host");
    run_host();
  });
  clock_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "troupe clock");
    system().thread_started();
    clock_.run_dispatch_loop();
    system().thread_terminates();
  });
  abstract_coordinator::start();  // spawns CAF's utility actors
}

void device_scheduler::stop() {
  stop_actors();  // CAF's utility actors, while the host thread still runs
  {
    std::lock_guard<std::mutex> guard{host_->mutex};
    host_->stopping = true;
  }
  host_->ready.notify_all();
  host_thread_.join();
  // Every actor has terminated by now; run what is still posted to the streams (they
  // outlive the system), then release whatever is left.
  std::vector<stream*> streams;
  {
    std::lock_guard<std::mutex> guard{homes_mutex_};
    for (auto& [home, u] : units_)
      streams.push_back(home);
  }
  for (auto* home : streams)
    home->drain_posted();
  for (auto* job : host_->queue)
    cleanup_and_release(job);
  host_->queue.clear();
  clock_.cancel_dispatch_loop();
  clock_thread_.join();
}

}  // namespace troupe
