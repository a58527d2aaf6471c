// gloo_allreduce.hpp: one rank of one gloo context, with the thread that runs its
// all-reduces, for the "gloo" gradient averager (actors/averaging/gloo_collective.cpp).
//
// A gloo_allreduce_worker is rank r of R in a context named by a key: on its own thread it
// creates a TCP device on the rendezvous' hostname, connects the context's full mesh
// through the rendezvous store (every rank of the context writes its address under
// PREFIX/KEY/ and waits for the others'), then runs the jobs it is given one at a time, in
// the order they were submitted: wait until the input is written, sum it in place over the
// R ranks with gloo::allreduce, and call the job's callback with how it went. gloo blocks
// while it waits for peers, which is why it runs here and never on an actor's or a device
// stream's thread. Every wait (rendezvous, all-reduce) ends after the timeout: a peer that
// is gone or never came becomes an error in the callback, never a hang.
//
// The store is an injected dependency (gloo_rendezvous::store, runtime/collective/store.hpp):
// one process with every replica passes an in-process store (the session makes one);
// several processes pass a store they all reach (one served by the coordinator).
//
// Not here: anything about actors, tensors or layers (the averager books those), reductions
// other than a float sum, and GPU buffers (gloo's TCP transport reads host memory).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "runtime/collective/store.hpp"


namespace troupe {

/// Where the gloo contexts of one run meet: what a session's gloo averagers share.
struct gloo_rendezvous {
  /// The store every rank of every context of the run reaches. The session makes an
  /// in-process one (make_in_process_store) when this is empty.
  std::shared_ptr<collective_store> store;
  /// Prepended to every key, so that runs sharing a store never meet each other's ranks;
  /// the same on every process of a run. run_session takes unique_gloo_prefix() when empty.
  std::string prefix;
  /// The address the TCP transport binds to and tells its peers.
  std::string hostname = "127.0.0.1";
};

/// "troupe.<pid>.<n>/": a prefix no other run of this process (and no other process on
/// this machine) uses.
std::string unique_gloo_prefix();


/// How one job went; times are steady_clock nanoseconds (since its epoch).
struct gloo_allreduce_outcome {
  bool ok = false;
  std::string error;          // when !ok: what failed, gloo's message included
  std::int64_t start_ns = 0;  // the all-reduce itself, after the input was ready
  std::int64_t end_ns = 0;
};

/// One all-reduce: sum `elements` floats at `data` over the ranks, in place.
struct gloo_allreduce_job {
  float* data = nullptr;
  std::size_t elements = 0;
  /// Matches the job with the same job on the other ranks (Note [gloo order] in the .cpp).
  std::uint32_t tag = 0;
  /// Runs first, on the worker's thread; may block (waits until `data` is written).
  std::function<void()> prepare;
  /// Runs last, on the worker's thread, with how it went; keep it short (send a message).
  /// Its captures keep `data` alive until then.
  std::function<void(const gloo_allreduce_outcome&)> done;
};

namespace detail {
struct gloo_worker_state;  // what a worker's thread uses (the .cpp)
}

class gloo_allreduce_worker {
 public:
  /// Starts the thread, which connects at once. `key` names the context within the run
  /// ("layer_2"); rank in 0 .. size - 1; timeout > 0 bounds every wait for a peer.
  gloo_allreduce_worker(const gloo_rendezvous& rendezvous, std::string key, int rank, int size,
                        std::chrono::milliseconds timeout);
  /// stop(), then waits for the thread: for the job under way (and for the connection, if
  /// it still is), at most the timeout; at once when the peers have stopped too (their
  /// contexts closing end it). On the worker's own thread (a job's callback let go of the
  /// last reference to the object's owner) it lets the thread end by itself instead.
  ~gloo_allreduce_worker();
  gloo_allreduce_worker(const gloo_allreduce_worker&) = delete;
  gloo_allreduce_worker& operator=(const gloo_allreduce_worker&) = delete;

  /// Queues `job` after those submitted before it.
  void submit(gloo_allreduce_job job);
  /// Drops the jobs that have not started and lets the thread end after the one that has,
  /// without waiting for it; later jobs are dropped too.
  void stop();

  int rank() const;
  int size() const;

 private:
  // Shared with the thread, so that the thread may outlive this object (the destructor).
  std::shared_ptr<detail::gloo_worker_state> state_;
  std::thread thread_;
};

}  // namespace troupe
