// simulation.cpp: streams on a virtual clock.
//
// Note [simulated streams]
// A simulated stream has no thread. One thread, the simulation's, plays every stream as
// its worker would, on a virtual clock:
// 1. It runs what is due now and takes no time: the host actors' turns (post_host), then
//    each stream's posted tasks (its actors' handlers) in the order posted, for a stream
//    that is between jobs (a CPU device runs handlers between its jobs, on its thread).
//    Only the streams marked are looked at: those given work, whose job ended, whose
//    awaited event was reached, whose handler time, hand-over or core came free. So a
//    step of hundreds of devices costs what its events cost, not events x devices.
//    A handler keeps its device for handler_ns: the stream takes nothing else until then.
// 2. When nothing more is due now, each free stream starts its next job as its worker
//    would: the main lane first, a wait only once its event is reached, the idle lane only
//    when the main lane is empty. A job started at t ends at t + cost(label).
// 3. When nothing can start, the clock moves to the earliest end (ties in the order they
//    were scheduled, so a run repeats exactly), and that job runs then: its work (the real
//    math, so that values, messages and results are those of a real run), its trace span
//    [start, end), its stream's progress, its events' callbacks.
// Steps 1 and 2 before 3 mean that every message sent at time t is handled at t, before
// any device picks its next job at t: messages take no time. An idle-lane job waits
// for main-lane work due in its first half (Note [looking ahead before an idle job] in
// stream.cpp), as the runtime's streams do, with the same estimates. Everything the
// simulation does is on its one thread, in one order, so a simulated run is
// deterministic; other threads (the session's, CAF's clock) only add work and wake it.
//
// Costs come from the cost function (the simulate command prices a job from a calibration
// of this machine: actors/tools/simulate.cpp), times settings::contention for a job that starts
// while another device of its node computes (their shared memory system: on this 2-core VM
// two devices' GEMMs run about 10% longer together than alone). Job work still runs for real here, one job at a
// time, so a simulation of N devices takes about as long as the run would on one core.
#include "runtime/core/simulation.hpp"

#include <pthread.h>

#include <algorithm>

#include "runtime/core/job_span.hpp"
#include "troupe/error.hpp"
#include "troupe/trace.hpp"

namespace troupe {

simulation::simulation(settings s) : settings_(std::move(s)) {
  TROUPE_CHECK(settings_.cost != nullptr, "a simulation needs a cost function");
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "troupe sim");
    run();
  });
}

simulation::~simulation() {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    stopping_ = true;
  }
  woken_.notify_all();
  thread_.join();
}

void simulation::mark(slot* s) {
  if (s == nullptr || s->on == nullptr)
    return;
  if (!s->marked) {
    s->marked = true;
    marked_.push_back(s);
  }
}

void simulation::wake(stream_state& s) {
  if (on_own_thread()) {
    auto found = slot_of_.find(&s);
    if (found != slot_of_.end())
      mark(found->second);
    return;
  }
  {
    std::lock_guard<std::mutex> guard{mutex_};
    woken_streams_.push_back(&s);
    pending_ = true;
  }
  woken_.notify_all();
}

// A message from the device (or host) running now to `target`'s thread: handled a
// hand-over later, and a network's latency later again between nodes.
void simulation::hand_over(slot* target) {
  if (!on_own_thread() || current_ == nullptr || target == current_)
    return;  // the session's thread, before the run; or actors of one device
  // The message's way: what its sender said (node_send_scope), else through CAF.
  const auto kind = node_send_scope::current();
  const auto& route = kind == node_send::posted ? settings_.posted : settings_.network;
  const bool crosses = current_->node != target->node && kind != node_send::within_node;
  const auto delay = settings_.handover_ns + (crosses ? route.latency_ns : 0);
  if (delay <= 0 || target->handed_at > now_ns())
    return;  // one already pending: the later messages are handled with it
  target->handed_at = now_ns() + delay;
  agenda_.push(due{target->handed_at, order_++, target, false});
}

void simulation::posted_to(stream_state& s) {
  if (!on_own_thread())
    return;
  auto found = slot_of_.find(&s);
  if (found != slot_of_.end())
    hand_over(found->second);
}

void simulation::sent_to_network(stream_state& s, std::int64_t bytes, bool posted) {
  if (!on_own_thread())
    return;
  const auto& route = posted ? settings_.posted : settings_.network;
  const auto ns = static_cast<std::int64_t>(static_cast<double>(std::max<std::int64_t>(0, bytes)) *
                                            route.ns_per_byte) +
                  route.message_ns;
  auto found = slot_of_.find(&s);
  if (ns <= 0 || found == slot_of_.end() || found->second->core < 0)
    return;
  take_core(found->second->core, ns);
}



simulation::clock_hold::clock_hold(simulation& world) : world_(world) {
  std::lock_guard<std::mutex> guard{world_.mutex_};
  ++world_.holds_;
}

simulation::clock_hold::~clock_hold() {
  {
    std::lock_guard<std::mutex> guard{world_.mutex_};
    --world_.holds_;
  }
  world_.woken_.notify_all();
}

void simulation::post_host(std::function<void()> task) {
  hand_over(&host_slot_);
  if (on_own_thread() && current_ != nullptr && current_ != &host_slot_)
    host_waker_core_ = current_->core;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    host_.push_back(std::move(task));
    pending_ = true;
  }
  woken_.notify_all();
}

// A simulated stream's backend: the simulation's thread runs its jobs and tasks.
class simulated_backend final : public stream_backend {
 public:
  explicit simulated_backend(simulation& world) : world_(world) {}
  void attach(stream& s) override { world_.attach(s.state()); }
  void detach(stream& s) override {
    s.synchronize();  // as a worker does: run everything queued before going
    s.drain_posted();
    world_.detach(s.state());
  }
  bool on_own_thread() const override { return world_.on_own_thread(); }
  void wake(stream& s, bool) override { world_.wake(s.state()); }
  void hurried(stream& s) override { world_.wake(s.state()); }  // its main lane has work now
  void posted(stream& s) override { world_.posted_to(s.state()); }
  void sent_to_network(stream& s, std::int64_t bytes, bool posted) override {
    world_.sent_to_network(s.state(), bytes, posted);
  }
  bool waits_in_queue() const override { return true; }

 private:
  simulation& world_;
};

std::unique_ptr<stream_backend> simulation::backend() {
  return std::make_unique<simulated_backend>(*this);
}

void simulation::name_tracks(const std::map<std::string, std::uint32_t>& tracks) {
  std::lock_guard<std::mutex> guard{mutex_};
  for (const auto& [name, track] : tracks)
    names_[track] = name;
}

void simulation::attach(stream_state& s) {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    joining_.push_back(&s);
    members_changed_.store(true);
    pending_ = true;
  }
  woken_.notify_all();
}

void simulation::detach(stream_state& s) {
  TROUPE_CHECK(!on_own_thread(), "a simulated stream cannot be destroyed by its simulation");
  std::unique_lock<std::mutex> lock{mutex_};
  leaving_.push_back(&s);
  members_changed_.store(true);
  pending_ = true;
  woken_.notify_all();
  left_.wait(lock, [&] {
    return std::find(leaving_.begin(), leaving_.end(), &s) == leaving_.end() || stopping_;
  });
}

void simulation::update_members() {
  std::vector<stream_state*> woken;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    woken.swap(woken_streams_);
  }
  if (members_changed_.exchange(false)) {
    std::vector<stream_state*> joining, leaving;
    {
      std::lock_guard<std::mutex> guard{mutex_};
      joining.swap(joining_);
      leaving = leaving_;
    }
    for (auto* s : joining) {
      slots_.push_back(std::make_unique<slot>());
      auto* sl = slots_.back().get();
      sl->on = s;
      sl->node = s->device.node;
      sl->free_at = now_ns();
      slot_of_[s] = sl;
      if (settings_.cores > 0) {
        sl->core = made_ % settings_.cores;
        core_job_.resize(static_cast<std::size_t>(settings_.cores), nullptr);
        core_free_at_.resize(static_cast<std::size_t>(settings_.cores), 0);
        core_waiters_.resize(static_cast<std::size_t>(settings_.cores));
      }
      ++made_;
      mark(sl);
    }
    // A slot is never freed (an agenda entry may still name it): a gone stream's is empty.
    for (auto* s : leaving) {
      auto found = slot_of_.find(s);
      if (found != slot_of_.end()) {
        found->second->on = nullptr;
        slot_of_.erase(found);
      }
    }
    if (!leaving.empty()) {
      {
        std::lock_guard<std::mutex> guard{mutex_};
        for (auto* s : leaving)
          leaving_.erase(std::find(leaving_.begin(), leaving_.end(), s));
      }
      left_.notify_all();
    }
  }
  for (auto* s : woken) {
    auto found = slot_of_.find(s);
    if (found != slot_of_.end())
      mark(found->second);
  }
}

bool simulation::run_host_tasks() {
  bool ran = false;
  if (host_slot_.handed_at > now_ns())
    return false;
  current_ = &host_slot_;
  for (;;) {
    std::function<void()> task;
    {
      std::lock_guard<std::mutex> guard{mutex_};
      if (host_.empty()) {
        current_ = nullptr;
        return ran;
      }
      task = std::move(host_.front());
      host_.pop_front();
    }
    task();
    ran = true;
    if (settings_.host_ns > 0 && !core_job_.empty()) {
      // A free core if there is one, else the waker's (Note [what shares a core]).
      const auto now = now_ns();
      int core = host_waker_core_ >= 0 ? host_waker_core_ : 0;
      for (std::size_t c = 0; c < core_job_.size(); ++c)
        if (core_job_[c] == nullptr && core_free_at_[c] <= now) {
          core = static_cast<int>(c);
          break;
        }
      take_core(core, settings_.host_ns);
    }
  }
}

// One posted task of each marked stream that can take one now; a stream with more stays
// marked. Every stream looked at is checked for a job afterwards (start_jobs).
bool simulation::run_posted_tasks() {
  bool ran = false;
  const auto now = now_ns();
  std::vector<slot*> marked;
  marked.swap(marked_);
  for (auto* sl : marked) {
    sl->marked = false;
    auto* s = sl->on;
    if (s == nullptr)
      continue;
    if (!sl->to_check) {
      sl->to_check = true;
      to_check_.push_back(sl);
    }
    if (sl->running || sl->free_at > now || sl->handed_at > now)
      continue;  // its finish or the agenda marks it again
    if (sl->core >= 0 && core_free_at_[static_cast<std::size_t>(sl->core)] > now) {
      agenda_.push(due{core_free_at_[static_cast<std::size_t>(sl->core)], order_++, sl, false});
      continue;  // another device's handler or a host turn has the core
    }
    stream::job task;
    bool more = false;
    {
      std::lock_guard<std::mutex> guard{s->mutex};
      if (s->posted.empty())
        continue;
      task = std::move(s->posted.front());
      s->posted.pop_front();
      more = !s->posted.empty();
    }
    current_ = sl;
    s->run_guarded(task);  // Note [one failure path] in stream.cpp
    current_ = nullptr;
    ran = true;
    if (settings_.handler_ns > 0) {
      sl->free_at = now + settings_.handler_ns;
      if (sl->core >= 0)
        take_core(sl->core, settings_.handler_ns);
      agenda_.push(due{sl->free_at, order_++, sl, false});
    } else if (more) {
      mark(sl);
    }
  }
  return ran;
}

// Note [what shares a core]
// With settings::cores, devices share cores as the threads of a process do (cpu:N on
// core N mod cores), and so does everything else a core runs besides jobs:
// - a job holds its core: another device's job there waits for it (core_waiters_);
// - a handler runs when its device is between jobs, and takes handler_ns of its core: a
//   job of another device running there ends that much later (the kernel preempts it for
//   the handler's thread), or, on a core without a job, another device's handler or job
//   waits until then (core_free_at_). Four devices on two cores handle twice the messages
//   a core that two devices on two cores do;
// - a host actor's turn (the trainer's report, the loader's batch) takes host_ns of a core
//   on a machine whose cores all compute: the real host thread is one more thread, and a
//   core without a job (its device between jobs) runs it first; with none, the core of
//   the device whose message woke it (the kernel wakes a thread near its waker) runs it,
//   preempting that job. host_ns is what the host thread costs a turn, its wake-up and
//   sleep included (calibrate measures it);
// - a message to another node is serialised and written by the sending process's network
//   thread (or, left in shared memory, copied there by the sender): its route's time a
//   byte (over loopback the CPU time of the copies is what limits a link) times its bytes,
//   and its time a message, of the sending device's core, as a handler takes it. The
//   receiving device already pays its copy job (actors/tools/simulate.cpp).
//   Without cores, every thread has a core and none of these costs a device anything.
void simulation::take_core(int core, std::int64_t ns) {
  const auto c = static_cast<std::size_t>(core);
  if (core_job_[c] != nullptr) {
    core_job_[c]->preempted_ns += ns;
    return;
  }
  core_free_at_[c] = std::max(core_free_at_[c], now_ns()) + ns;  // who waits, looks again then
}

bool simulation::start_jobs() {
  bool started = false;
  const auto now = now_ns();
  std::vector<slot*> checking;
  checking.swap(to_check_);
  for (auto* sl : checking) {
    sl->to_check = false;
    auto* s = sl->on;
    if (s == nullptr || sl->running || sl->free_at > now)
      continue;
    if (sl->core >= 0 && core_job_[static_cast<std::size_t>(sl->core)] != nullptr) {
      core_waiters_[static_cast<std::size_t>(sl->core)].push_back(sl);
      continue;
    }
    if (sl->core >= 0 && core_free_at_[static_cast<std::size_t>(sl->core)] > now) {
      agenda_.push(due{core_free_at_[static_cast<std::size_t>(sl->core)], order_++, sl, false});
      continue;  // a handler of another device or a host turn has the core
    }
    bool waited = false;
    event arm;  // a wait not reached yet: its event marks this slot when it is
    {
      std::lock_guard<std::mutex> guard{s->mutex};
      if (!s->posted.empty())
        continue;  // its handlers first (they mark it again)
      if (!s->queue.empty()) {
        auto& head = s->queue.front();
        if (!head.work) {  // a wait for another stream's event
          if (!head.waits_on.reached()) {
            if (!sl->wait_armed) {
              sl->wait_armed = true;
              arm = head.waits_on;
            }
            if (!arm.owner)
              continue;
          } else {
            s->queue.pop_front();
            waited = true;
          }
        } else {
          sl->current = std::move(head);
          s->queue.pop_front();
          s->note_start(sl->current.label, false, now);
        }
      } else if (!s->idle_queue.empty()) {
        // Main-lane work due before this one would end (Note [looking ahead before an
        // idle job] in stream.cpp).
        if (now >= sl->idle_from) {
          const auto hold = s->idle_hold_ns(now);
          if (hold > 0)
            sl->idle_from = now + hold;
        }
        if (now < sl->idle_from) {
          if (!sl->idle_wake) {
            sl->idle_wake = true;
            agenda_.push(due{sl->idle_from, order_++, sl, false});
          }
          continue;
        }
        sl->current = std::move(s->idle_queue.front());
        s->idle_queue.pop_front();
        s->note_start(sl->current.label, true, now);
      } else {
        continue;
      }
    }
    if (arm.owner) {
      arm.then([this, sl] {
        sl->wait_armed = false;
        mark(sl);
      });
      continue;
    }
    started = true;
    if (waited) {  // a wait counts in the stream's order, as on a worker
      current_ = sl;
      s->completed(false);
      current_ = nullptr;
      mark(sl);
      continue;
    }
    sl->running = true;
    sl->started = now;
    const bool crowded = running_on_node_[sl->node]++ > 0;
    if (sl->core >= 0)
      core_job_[static_cast<std::size_t>(sl->core)] = sl;
    std::string actor;
    {
      std::lock_guard<std::mutex> guard{mutex_};
      auto found = names_.find(sl->current.label.actor);
      if (found != names_.end())
        actor = found->second;
    }
    auto cost = std::max<std::int64_t>(0, settings_.cost(sl->current.label, s->device, actor));
    if (crowded && settings_.contention != 1)
      cost = static_cast<std::int64_t>(static_cast<double>(cost) * settings_.contention);
    agenda_.push(due{now + cost, order_++, sl, true});
  }
  return started;
}

void simulation::finish(slot& sl) {
  auto* s = sl.on;
  sl.running = false;
  --running_on_node_[sl.node];
  if (sl.core >= 0) {
    core_job_[static_cast<std::size_t>(sl.core)] = nullptr;
    auto& waiters = core_waiters_[static_cast<std::size_t>(sl.core)];
    for (auto* w : waiters)
      mark(w);
    waiters.clear();
  }
  auto next = std::move(sl.current);
  sl.current = stream_entry{};
  const auto now = now_ns();
  if (s == nullptr)
    return;
  mark(&sl);
  current_ = &sl;  // what the job and its callbacks send leaves from this device
  if (!s->failed.load(std::memory_order_acquire)) {
    s->run_guarded(next.work);
    if (s->trace_track != 0 && trace::enabled())
      record_job_span(s->trace_track, next.label, next.submitted_ns, sl.started,
                      now - sl.started);
    if (next.busy)
      s->busy_nanoseconds.fetch_add(now - sl.started, std::memory_order_relaxed);
  }
  next.work = nullptr;  // release what the job captured before reporting it done
  s->progress->note_running(0, false);
  {
    std::lock_guard<std::mutex> guard{s->mutex};
    s->learn(next.label, now - sl.started);
  }
  jobs_run_.fetch_add(1);
  s->completed(next.idle_lane);
  current_ = nullptr;
}

bool simulation::advance() {
  while (!agenda_.empty()) {
    auto next = agenda_.top();
    agenda_.pop();
    now_.store(std::max(now_ns(), next.at), std::memory_order_relaxed);
    if (next.job && next.on->preempted_ns > 0) {  // Note [what shares a core]
      agenda_.push(due{next.at + next.on->preempted_ns, order_++, next.on, true});
      next.on->preempted_ns = 0;
      continue;
    }
    if (next.job) {
      finish(*next.on);
      return true;
    }
    next.on->idle_wake = false;  // at worst a second wake-up is scheduled: harmless
    if (next.on == &host_slot_)
      return true;  // the host actors may take their turns
    if (next.on->on != nullptr) {
      mark(next.on);  // a handler's time, a hand-over or an idle job's wait ended
      return true;
    }
  }
  return false;
}

void simulation::run() {
  for (;;) {
    update_members();
    bool did = run_host_tasks();
    did = run_posted_tasks() || did;
    if (did || !marked_.empty())
      continue;  // everything due now first (Note [simulated streams], step 1)
    if (start_jobs())
      continue;
    {
      // Another thread added work since: look again before time moves. A clock_hold
      // keeps it from moving until its thread has added all it means to.
      std::unique_lock<std::mutex> lock{mutex_};
      woken_.wait(lock, [&] { return holds_ == 0 || pending_ || stopping_; });
      if (pending_) {
        pending_ = false;
        continue;
      }
    }
    if (!marked_.empty())
      continue;
    if (advance())
      continue;
    std::unique_lock<std::mutex> lock{mutex_};
    woken_.wait(lock, [&] { return pending_ || stopping_; });
    if (stopping_ && !pending_ && host_.empty())
      return;
    pending_ = false;
  }
}

}  // namespace troupe
