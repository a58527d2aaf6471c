// gloo_collective.cpp: the gloo backend (collective_backend.hpp): rank r of R in the run's
// gloo context of one layer (Note [one gloo context per layer]). all_reduce submits the
// buffer to the context's worker thread (runtime/collective/gloo_allreduce.hpp), which waits
// for it to be written, sums it in place with gloo's ring all-reduce and tells the averager
// by a message; the averager never blocks, and its device's stream keeps running other
// actors' work while gloo waits for peers, so late layers average while early layers still
// run backward. Every rank ends with bit-identical sums.
//
// A gloo error (a peer gone, a timeout: [parallel] gloo_timeout) reaches the trainer as a
// failure naming the averager, which ends the run. Not here: the sharded optimizer (refused
// by the config loader: it needs the ring's chunks), GPU buffers (validation keeps gloo
// averagers on CPU devices), the rendezvous store (injected: gloo_rendezvous).
#include <map>
#include <memory>
#include <stdexcept>

#include "actors/averaging/collective_backend.hpp"
#include "runtime/collective/gloo_allreduce.hpp"
#include "troupe/check.hpp"

namespace troupe {

// Note [one gloo context per layer]
// Each layer has its own gloo context over the R replicas, with its own worker thread on
// every rank (one per averager actor), rather than one context per replica shared by all
// of that replica's layers:
//  - order: gloo needs every rank to issue a context's collectives in the same order
//    (Note [gloo order] in runtime/collective/gloo_allreduce.cpp). One averager per
//    context gives that for free: its steps come in order over one wire. A shared context
//    would need the layers' averagers, which run on different devices' threads under a
//    pipeline, to agree on one global order of (step, layer) first.
//  - overlap: a shared context runs one collective at a time, so layer 3's all-reduce
//    would wait behind layer 4's; with one context per layer they run side by side, as
//    the ring's averagers do, and the averaging of late layers overlaps the backward of
//    early layers.
// The price is L x R threads (each mostly asleep in a wait) and L x R x (R - 1) loopback
// TCP connections per run, both small for the models troupe runs.

namespace {

/// The tag of a step's all-reduce of n floats (Note [gloo order]): the step and the size
/// mixed, so that ranks at different steps, or with different sizes, never match.
std::uint32_t gloo_tag(std::int64_t step, std::int64_t n) {
  auto mixed = static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ull ^
               static_cast<std::uint64_t>(n) * 0xC2B2AE3D27D4EB4Full;
  return static_cast<std::uint32_t>(mixed ^ (mixed >> 32));
}

class gloo_collective final : public collective_backend {
 public:
  explicit gloo_collective(collective_host& host) : host_(host) {
    const auto& s = host.settings();
    TROUPE_CHECK(host.on().id().type == device_type::cpu,
                 s.name << ": gloo averages host memory, but its device is "
                        << host.on().id().to_string());
    // Connecting starts now, on the worker's thread, while the first forward runs.
    worker_ = std::make_unique<gloo_allreduce_worker>(
        s.gloo, "layer_" + std::to_string(s.layer_index), s.replica, s.replicas, s.gloo_timeout);
  }

  const char* name() const override { return "gloo"; }
  void all_reduce(std::int64_t step, tensor flat) override;
  void completed(std::int64_t step, std::int64_t start_ns, std::int64_t end_ns) override;

  // Stops the worker without waiting for it: its thread may be inside an all-reduce whose
  // peers quit at about the same time (their contexts closing end it), and this runs on a
  // device thread that other actors need. The destructor joins, unless it runs on that
  // thread (a job's callback held the last reference to the averager).
  void release() override {
    if (worker_)
      worker_->stop();
  }

  std::string waiting_for() const override {
    std::string out;
    const auto& s = host_.settings();
    for (const auto& [step, flat] : steps_)
      out += (out.empty() ? "" : ", ") + std::string{"step "} + std::to_string(step) +
             " (all-reduce of " + std::to_string(flat.numel()) + " floats as gloo rank " +
             std::to_string(s.replica) + " of " + std::to_string(s.replicas) + ")";
    return out.empty() ? "; no step in progress" : "; all-reduces in progress: " + out;
  }

 private:
  collective_host& host_;
  std::unique_ptr<gloo_allreduce_worker> worker_;
  std::map<std::int64_t, tensor> steps_;  // the buffers whose all-reduce is under way
};

void gloo_collective::all_reduce(std::int64_t step, tensor flat) {
  gloo_allreduce_job job;
  job.data = flat.f32();
  job.elements = static_cast<std::size_t>(flat.numel());
  job.tag = gloo_tag(step, flat.numel());
  // The worker waits until the buffer is written (its jobs may still be queued on the
  // averager's stream); gloo then sums in place.
  job.prepare = [flat] { flat.wait_ready(); };
  // A weak address: a worker holding the actor would keep it alive after it quits.
  job.done = [me = host_.self_address(), step, flat](const gloo_allreduce_outcome& how) {
    auto actor = caf::actor_cast<caf::actor>(me);
    if (!actor)
      return;
    if (how.ok)
      caf::anon_send(actor, collective_done_atom::value, step, how.start_ns, how.end_ns);
    else
      caf::anon_send(actor, collective_fail_atom::value, step, how.error);
  };
  steps_.emplace(step, std::move(flat));
  worker_->submit(std::move(job));
}

void gloo_collective::completed(std::int64_t step, std::int64_t start_ns, std::int64_t end_ns) {
  auto it = steps_.find(step);
  if (it == steps_.end())
    throw std::logic_error(host_.settings().name + ": gloo finished step " +
                           std::to_string(step) + ", which is not in progress");
  auto flat = std::move(it->second);
  steps_.erase(it);
  // The worker wrote the sums before its message was sent, so they are ready now.
  flat.set_ready(event{});
  host_.all_reduced(step, std::move(flat), start_ns, end_ns);
}

}  // namespace

std::unique_ptr<collective_backend> make_gloo_collective(collective_host& host) {
  return std::make_unique<gloo_collective>(host);
}

}  // namespace troupe
