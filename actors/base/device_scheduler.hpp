// device_scheduler.hpp: a CAF scheduler that runs each actor on its device's thread.
//
// CAF's own schedulers run every actor on a pool of worker threads. On a machine whose
// cores are all taken by device streams (two cpu:N devices on two cores), those workers
// can only run by preempting a device, and every message between actors costs a thread
// wake-up. This scheduler instead runs the message handling of an actor *placed* on a
// device on that device's stream thread, between jobs (stream::post), as OneFlow binds
// its actors to stream threads. Actors not placed (the trainer, CAF's own) run on one
// host thread. See Note [actors on device threads] in the .cpp.
//
//   caf::actor_system_config config;
//   config.load<troupe::device_scheduler>();
//   caf::actor_system system{config};
//   auto a = system.spawn<my_actor>(...);
//   troupe::device_scheduler::place(system, a, device.work());
//
// The streams must outlive the actor system. A placed actor's handlers must be short and
// never block (they already must not: Note [no blocking waits] in include/troupe/inputs.hpp).
#pragma once

#include <caf/all.hpp>
#include <caf/detail/thread_safe_actor_clock.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/core/simulation.hpp"
#include "troupe/device.hpp"

namespace troupe {

class device_scheduler : public caf::scheduler::abstract_coordinator {
 public:
  explicit device_scheduler(caf::actor_system& system);
  ~device_scheduler() override;

  /// For actor_system_config::load<device_scheduler>().
  static caf::actor_system::module* make(caf::actor_system& system, caf::detail::type_list<>) {
    return new device_scheduler(system);
  }

  /// From now on, `actor` handles its messages on `home`'s thread (the next time it is
  /// scheduled: if it already is, that turn still runs where it was queued; spawn it with
  /// caf::lazy_init to place it before it runs at all). Returns false (and does nothing)
  /// when `system` does not run this scheduler.
  static bool place(caf::actor_system& system, const caf::actor& actor, stream& home);

  /// From now on, the actors not placed on a device (the trainer, the data loader) take
  /// their turns on `world`'s thread at its virtual time, as a simulated run's devices do
  /// (runtime/core/simulation.hpp). `world` must outlive the actor system.
  static bool simulate(caf::actor_system& system, simulation& world);

  void enqueue(caf::resumable* job) override;
  caf::detail::thread_safe_actor_clock& clock() noexcept override { return clock_; }

  /// While `into` is set (nullptr: no longer), every host thread of this process appends
  /// the CPU time of each of its turns to it: from the end of its previous turn, so its
  /// sleep and wake-up count. calibrate measures a host turn with it (Note [what a host
  /// turn costs] in actors/tools/calibrate.cpp). One recorder at a time (a second call replaces
  /// the first's, and two sessions at once record into the same); read `into` only once it
  /// is unset.
  static void record_host_turns(std::vector<std::int64_t>* into);

 protected:
  void start() override;
  void stop() override;

 private:
  class unit;  // a caf::execution_unit for one thread

  void resume(caf::resumable* job, caf::execution_unit* on, std::size_t throughput);
  void run_host();

  caf::detail::thread_safe_actor_clock clock_;
  std::thread clock_thread_;

  std::mutex homes_mutex_;
  std::unordered_map<caf::resumable*, unit*> homes_;          // placed actors
  std::unordered_map<stream*, std::unique_ptr<unit>> units_;  // one per stream used

  std::unique_ptr<unit> host_unit_;
  std::unique_ptr<unit> world_unit_;           // made before world_ is set
  std::atomic<simulation*> world_{nullptr};
  /// The host thread's queue and sleep; shared with the wake-ups device threads put off
  /// (Note [deferred wake-ups] in runtime/core/deferred.hpp), which may run after this
  /// scheduler is gone.
  struct host_state {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<caf::resumable*> queue;  // guarded by mutex
    bool stopping = false;              // guarded by mutex
    bool sleeping = false;              // guarded by mutex: waiting on `ready`
    bool ring_put_off = false;          // guarded by mutex: a ring() is on its way
    /// Wakes the host thread if it sleeps with work queued.
    void ring();
  };
  std::shared_ptr<host_state> host_ = std::make_shared<host_state>();
  std::thread host_thread_;
};

}  // namespace troupe
