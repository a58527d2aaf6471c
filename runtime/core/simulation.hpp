// simulation.hpp: a run's device streams on a virtual clock (`troupe simulate`, issue 16).
//
// A simulated run is a real run, the same actors, messages, credits, turns and stream
// lanes, whose devices are simulated streams: one thread (the simulation's) runs every
// stream's jobs and posted tasks, and each job takes the time a cost function says on a
// virtual clock instead of the time it takes here. Traces recorded in the run carry the
// virtual times, so `trace summary` and `trace explain` read a prediction as they read a
// measurement. See Note [simulated streams] in the .cpp.
//
//   simulation world{{cost, handler_ns}};
//   device_set devices{ids, world};        // streams without threads
//   ... spawn actors, device_scheduler::simulate(system, world), run ...
//   world.now_ns();                        // the virtual time reached
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/core/stream_state.hpp"
#include "troupe/device.hpp"

namespace troupe {

class simulation {
 public:
  /// What a job costs in virtual nanoseconds: its label as submitted, its device, and the
  /// name of the actor that submitted it (empty when unknown).
  using cost_function =
      std::function<std::int64_t(const job_label& label, const device_id& device,
                                 const std::string& actor)>;
  struct settings {
    cost_function cost;
    /// Each message an actor on a device handles keeps that device this long (a CPU
    /// device runs its actors' handlers between its jobs, on its one thread).
    std::int64_t handler_ns = 0;
    /// A message from one thread to another (between devices, or between a device and the
    /// host actors) is handled this much later: a thread's wake-up on real streams.
    std::int64_t handover_ns = 0;
    /// The cores the devices share, in the order they are made (device k on core k mod
    /// cores, as cpu:N of a process is on core N mod its cores): a core runs one device's
    /// job at a time. 0: every device has a core of its own.
    int cores = 0;
    /// A job that starts while a device of another core of its node runs one takes this
    /// many times its cost: devices share a machine's memory system (calibrate measures it).
    double contention = 1;
    /// Each turn of a host actor (the trainer, the loader) takes this long of a core, with
    /// `cores` set: a free one, else the core of the device whose message woke it, whose job
    /// then ends that much later (Note [what shares a core] in simulation.cpp).
    std::int64_t host_ns = 0;
    /// How a message between devices of two nodes goes: it is handled `latency_ns` later
    /// than the hand-over, and sending it takes, with `cores` set, `ns_per_byte` of its
    /// tensors' bytes and `message_ns` of the sender's core (the process's network thread
    /// serialising and writing it, or the copy into shared memory; Note [what shares a
    /// core]). The receiver's copy of its tensors is a job (the cost function's).
    struct route {
      std::int64_t latency_ns = 0;
      double ns_per_byte = 0;
      std::int64_t message_ns = 0;
    };
    /// Through CAF's link: every message between nodes but those below.
    route network;
    /// Left in the receiver's shared-memory queue (stream::sent_to_network's `posted`;
    /// Note [messages through shared memory] in runtime/net/shared_memory.cpp).
    route posted;
  };

  /// Starts the simulation's thread; streams attach as they are made.
  explicit simulation(settings s);
  /// Stops the thread. Every stream made on it must be gone.
  ~simulation();
  simulation(const simulation&) = delete;
  simulation& operator=(const simulation&) = delete;

  /// The virtual time, in nanoseconds since the simulation began.
  std::int64_t now_ns() const { return now_.load(std::memory_order_relaxed); }
  const std::atomic<std::int64_t>& clock() const { return now_; }

  /// Runs `task` on the simulation's thread at the current virtual time, taking none of
  /// it: the host actors (trainer, loader) of a simulated run (device_scheduler).
  void post_host(std::function<void()> task);

  /// While one lives, the virtual clock stays where it is (what is due now still runs and
  /// starts), so that work another thread adds in the meantime is all added at one
  /// instant: a test submitting several streams' first jobs from its own thread holds the
  /// clock, else the simulation may run the first stream's job before the second's is in.
  /// Release it before waiting for the work.
  class clock_hold {
   public:
    explicit clock_hold(simulation& world);
    ~clock_hold();
    clock_hold(const clock_hold&) = delete;
    clock_hold& operator=(const clock_hold&) = delete;

   private:
    simulation& world_;
  };

  /// Which actor each trace track is, for the cost function.
  void name_tracks(const std::map<std::string, std::uint32_t>& tracks);

  bool on_own_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

  /// The backend of a stream this simulation runs (Note [stream backends] in
  /// stream_state.hpp): stream(id, world.backend()).
  std::unique_ptr<stream_backend> backend();

  /// Jobs run so far, over all streams.
  std::uint64_t jobs_run() const { return jobs_run_.load(); }

 private:
  friend class simulated_backend;
  struct slot;
  /// stream::post's note: a task for `s` was posted (a message for one of its actors).
  void posted_to(stream_state& s);
  /// An actor on `s` sends `bytes` to another node, `posted` or not (stream::sent_to_network).
  void sent_to_network(stream_state& s, std::int64_t bytes, bool posted);
  void hand_over(slot* target);
  void attach(stream_state& s);
  void detach(stream_state& s);
  /// `s` has new work (a job, a task): from another thread, or on this one.
  void wake(stream_state& s);
  void run();
  bool run_host_tasks();
  /// Runs the posted tasks of the streams marked since; true if any ran.
  bool run_posted_tasks();
  /// Lets the streams checked since start their next jobs; true if any did.
  bool start_jobs();
  /// Advances the clock to the next job's end (or handler's), finishing that job; false
  /// when nothing is running.
  bool advance();
  /// Takes in the streams made and lets go of those going (on the simulation's thread).
  void update_members();

  struct slot {
    stream_state* on = nullptr;
    bool running = false;      // a job is under way
    std::int64_t started = 0;  // its virtual start
    std::int64_t free_at = 0;  // the end of the handler time it is in
    std::int64_t idle_from = 0;  // the next idle-lane job not before (it waits for work)
    std::int64_t handed_at = 0;  // its posted tasks not before (a hand-over from elsewhere)
    int core = -1;               // settings::cores
    std::int64_t preempted_ns = 0;  // its job ends this much later (Note [what shares a core])
    int node = 0;                // its device's (the host actors': node 0)
    bool idle_wake = false;      // an agenda entry at idle_from is pending
    bool marked = false;         // in marked_
    bool to_check = false;       // in to_check_
    bool wait_armed = false;     // its head wait's event calls back when reached
    stream_entry current;      // the job under way
  };
  void finish(slot& s);
  /// `s` may have something to do now: its tasks, then (once no task anywhere can run) its
  /// next job. Only the slots marked are looked at (Note [simulated streams]).
  void mark(slot* s);

  struct due {
    std::int64_t at;
    std::uint64_t order;  // ties in the order they were scheduled: a run repeats exactly
    slot* on;
    bool job;  // false: the end of a handler's time
    friend bool operator>(const due& a, const due& b) {
      return a.at != b.at ? a.at > b.at : a.order > b.order;
    }
  };

  settings settings_;
  std::atomic<std::int64_t> now_{0};
  std::atomic<std::uint64_t> jobs_run_{0};

  mutable std::mutex mutex_;
  std::condition_variable woken_;
  bool pending_ = false;                      // guarded by mutex_
  bool stopping_ = false;                     // guarded by mutex_
  int holds_ = 0;                             // guarded by mutex_: clock_holds alive
  std::vector<stream_state*> joining_;              // guarded by mutex_
  std::vector<stream_state*> leaving_;              // guarded by mutex_
  std::atomic<bool> members_changed_{false};
  std::deque<std::function<void()>> host_;    // guarded by mutex_
  std::map<std::uint32_t, std::string> names_;  // guarded by mutex_

  // The simulation thread's own.
  std::priority_queue<due, std::vector<due>, std::greater<>> agenda_;
  std::uint64_t order_ = 0;
  std::vector<std::unique_ptr<slot>> slots_;
  std::vector<slot*> marked_;     // may run a task
  std::vector<slot*> to_check_;   // may start a job
  std::vector<std::vector<slot*>> core_waiters_;  // by core: slots waiting for it
  std::vector<stream_state*> woken_streams_;  // guarded by mutex_: from other threads
  std::unordered_map<const stream_state*, slot*> slot_of_;
  slot host_slot_;              // the host actors' (on == nullptr): its handed_at
  slot* current_ = nullptr;     // whose task or job runs now (&host_slot_: a host actor's)
  std::vector<slot*> core_job_;             // by core: whose job runs on it
  std::vector<std::int64_t> core_free_at_;  // by core: the end of a handler's or host turn's time
  int host_waker_core_ = -1;                // the core of the device that woke the host actors
  /// `ns` of `core` taken by a handler or a host turn (Note [what shares a core]).
  void take_core(int core, std::int64_t ns);
  std::map<int, int> running_on_node_;  // jobs under way, by node (settings::contention)
  int made_ = 0;                // streams attached so far
  std::condition_variable left_;  // a leaving stream's slot is gone
  std::thread thread_;
};

}  // namespace troupe
