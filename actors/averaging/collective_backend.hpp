// collective_backend.hpp: the collectives under the all-reduce averager, behind one
// interface, as c10d's Backend is under a ProcessGroup.
//
// The averager of replica r of a layer (allreduce_averager_actor.hpp) is rank r of R in
// that layer's group. It does what every method shares: checks the gradients, flattens them
// into one buffer, hands the sums to its optimizer as views shaped like the gradients, and
// trades the sharded optimizer's buffers with it. How the buffer is summed over the ranks is
// its backend's:
//   ring  chunks travel a ring of averagers as actor messages (ring_msg), every copy and
//         sum a job on the averager's device (ring_collective.cpp);
//   gloo  gloo's ring all-reduce over TCP, on a thread per averager (gloo_collective.cpp).
// NCCL comes next (issue 52), as a third implementation; the averager never names one.
//
// A backend runs on its averager's thread (its actor's handlers) and answers through the
// host: once the sums are complete (all_reduce), once the spans this rank owns are summed
// (reduce_scatter, the sharded optimizer's first half), and once the updated spans have
// reached every rank (all_gather). A backend whose work ends on another thread (gloo's)
// sends its averager a collective_done_atom / collective_fail_atom, which comes back to
// it as completed() / a failure of the run.
//
// The central averager is not a backend: it is a reduce of R replicas into one optimizer
// (a different wiring: one averager per layer, one optimizer), not a collective of R ranks.
// Where the ranks of a backend meet (gloo's rendezvous) is the run's collective store
// (runtime/collective/store.hpp: in this process, or the coordinator's), as c10d's Store.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/averaging/grad_averager_actor.hpp"
#include "actors/averaging/ring_schedule.hpp"
#include "actors/base/collective_messages.hpp"
#include "troupe/device.hpp"
#include "troupe/messages.hpp"

namespace troupe {

/// A backend's collective of `step` ended on another thread: its averager hears it as a
/// message (started and ended: steady_clock nanoseconds, for the trace).
using collective_done_atom = caf::atom_constant<caf::atom("colldone")>;
/// ... or failed, with what went wrong.
using collective_fail_atom = caf::atom_constant<caf::atom("collfail")>;

/// What a backend uses of the averager above it; every call on the averager's thread.
class collective_host {
 public:
  virtual ~collective_host() = default;
  virtual const grad_averager_settings& settings() const = 0;
  /// The averager's device: its stream runs a backend's jobs.
  virtual device& on() const = 0;
  /// The label of a job of `step` that reads `values` floats (the simulator prices it).
  virtual job_label reduce_job(std::int64_t step, std::int64_t values) const = 0;
  /// Sends `message` to `peer` (trace track `track`) once its tensor is written.
  virtual void send_to_peer(const caf::actor& peer, std::uint32_t track, ring_msg message) = 0;
  /// The averager's own address, for a backend's thread to send it its outcome.
  virtual caf::actor_addr self_address() const = 0;

  /// `flat` holds the sums over every rank (when flat.ready() is reached); `start_ns` /
  /// `end_ns`: the collective's own span on another thread (steady_clock), 0 when its jobs
  /// were on the averager's stream (traced as jobs already).
  virtual void all_reduced(std::int64_t step, tensor flat, std::int64_t start_ns,
                           std::int64_t end_ns) = 0;
  /// `flat` holds the sums at this rank's owned spans (sharded optimizer).
  virtual void reduce_scattered(std::int64_t step, tensor flat,
                                const std::vector<flat_span>& owned) = 0;
  /// `flat` (the buffer all_gather was given) holds every rank's updated spans.
  virtual void all_gathered(std::int64_t step, tensor flat) = 0;
};

/// One rank's collectives of one layer's buffer.
class collective_backend {
 public:
  virtual ~collective_backend() = default;
  /// "ring", "gloo": for status lines and errors.
  virtual const char* name() const = 0;

  /// Sums `flat` (n floats, written once flat.ready() is reached) over the ranks, in place;
  /// every rank ends with the same bits. Answers host.all_reduced.
  virtual void all_reduce(std::int64_t step, tensor flat) = 0;
  /// Whether it can shard: reduce_scatter and all_gather below.
  virtual bool shards() const { return false; }
  /// Sums `flat` over the ranks at the spans this rank owns only. Answers
  /// host.reduce_scattered.
  virtual void reduce_scatter(std::int64_t step, tensor flat);
  /// `flat`, handed over, holds this rank's updated owned spans: fills in the others'.
  /// Answers host.all_gathered.
  virtual void all_gather(std::int64_t step, tensor flat);

  /// The wiring: a backend that talks through actors takes its peers here.
  virtual void connect(const wiring_msg&) {}
  /// The averager quits: let go of peers (a ring holds its next), stop threads.
  virtual void release() {}
  /// A peer's message (the ring's chunks): refused by a backend that has none.
  virtual void receive(ring_msg& message);
  /// A collective that ran on another thread ended (collective_done_atom).
  virtual void completed(std::int64_t step, std::int64_t start_ns, std::int64_t end_ns);
  /// For the watchdog: what it waits for ("; no step in progress" when nothing).
  virtual std::string waiting_for() const = 0;
};

/// The backend `host.settings().method` names (ring or gloo).
std::unique_ptr<collective_backend> make_collective_backend(collective_host& host);
/// The ring backend (ring_collective.cpp).
std::unique_ptr<collective_backend> make_ring_collective(collective_host& host);
/// The gloo backend (gloo_collective.cpp).
std::unique_ptr<collective_backend> make_gloo_collective(collective_host& host);

}  // namespace troupe
