// ring_averager_actor.hpp: the "ring" averager: one per replica per layer, each on its
// replica's device, in a ring (replica r sends to replica (r + 1) mod R).
//
// The layer's gradients are flattened into one vector of n floats, cut into buckets, and
// each bucket is all-reduced independently: R - 1 rounds of reduce-scatter, then R - 1
// rounds of all-gather, as actors/averaging/ring_schedule.hpp lays out. Every replica ends with
// bit-identical sums (Note [ring order] in the .cpp), which it sends to its own sink (its
// replica's optimizer), so the replicas' optimizers stay identical without broadcasting
// parameters. With shard_optimizer the optimizer updates only the spans this replica owns
// after reduce-scatter, and the ring all-gathers parameters instead of gradients (Note
// [sharded optimizer] in actors/averaging/grad_averager_actor.cpp). Ring messages of a later step or
// from a faster neighbour are kept until needed; those sent before the ring is wired wait
// in an outbox.
//
// Not here: averaging (the loss already scales, DESIGN.md), compression, hierarchical or
// tree reductions.
#pragma once

#include <map>
#include <tuple>
#include <vector>

#include "actors/averaging/grad_averager_actor.hpp"
#include "actors/averaging/ring_schedule.hpp"
#include "actors/base/collective_messages.hpp"
#include "troupe/device_actor.hpp"
#include "troupe/ops.hpp"

namespace troupe {

class ring_averager_actor final : public device_actor {
 public:
  /// settings.method is averaging_method::ring, 0 <= settings.replica < settings.replicas.
  ring_averager_actor(caf::actor_config& config, grad_averager_settings settings);

 protected:
  caf::message_handler handlers() override;
  void connect(const wiring_msg& wiring) override;
  void release_peers() override;
  std::string role() const override;
  std::string waiting_for() const override;

 private:
  /// One step's state, created when the local gradients arrive.
  struct step_state {
    explicit step_state(ring_schedule layout) : schedule(layout) {}
    std::vector<shape_t> shapes;          // of the local gradients, for unflattening
    tensor flat;                          // (n) this replica's copy, reduced in place
    ring_schedule schedule;               // of n floats over R replicas
    std::vector<std::int32_t> processed;  // per bucket: ring messages taken, 0 .. 2(R-1)
    std::int32_t buckets_left = 0;
    // Sharded optimizer only:
    std::int32_t reduced_left = 0;  // buckets whose reduce-scatter is not done
    bool gathering = false;         // `flat` is now the parameters to all-gather
  };
  using ring_key = std::tuple<std::int64_t, std::int32_t, std::int32_t, std::int32_t>;
  // (step, bucket, phase, round)

  void receive_local(weight_grads_msg& message);
  void receive_ring(ring_msg& message);
  void take_pending(std::int64_t step_index, std::int32_t bucket);
  /// The chunk `message` carries, for our device's next job to read (where it lies, if it
  /// can: runtime/core/transfer.hpp's read_in_place), after checking it is the one this replica
  /// receives in `phase` and round message.round; `where` is set to its span of the flat vector.
  tensor receive_chunk(step_state& step, const ring_msg& message, ring_phase phase,
                       flat_span& where);
  void reduce_scatter(step_state& step, const ring_msg& message);
  void all_gather(step_state& step, const ring_msg& message);
  /// A view of `chunk` of `bucket` in step.flat, ready when step.flat is (Note [chunks in
  /// place] in the .cpp: no copy is taken of what we send).
  tensor chunk_view(const step_state& step, std::int32_t bucket, std::int32_t chunk) const;
  void send_ring(std::int64_t step, std::int32_t bucket, ring_phase phase, std::int32_t round,
                 std::int32_t chunk, tensor data);
  void finish_if_done(std::int64_t step_index);
  bool sharded() const { return settings_.shard_optimizer && settings_.replicas > 1; }
  void hand_reduced(std::int64_t step_index);
  void start_gather(shard_msg& updated);
  /// `values`: how many floats the job reads (the simulator prices it by them).
  job_label reduce_job(std::int64_t step, std::int64_t values) const {
    auto label = job_for_step("reduce", step, settings_.replica);
    label.bytes = values * static_cast<std::int64_t>(sizeof(float));
    return label;
  }

  grad_averager_settings settings_;
  gradient_layout layout_;
  kernels::ops::copy::function copy_ = nullptr;
  kernels::ops::axpy::function axpy_ = nullptr;
  caf::actor next_;  // the averager of replica (replica + 1) % R
  std::uint32_t next_track_ = 0;
  caf::actor sink_;  // this replica's optimizer
  std::uint32_t sink_track_ = 0;
  std::map<std::int64_t, step_state> steps_;  // by step
  std::map<ring_key, ring_msg> pending_;      // ring messages not taken yet
  std::vector<ring_msg> outbox_;              // ring messages waiting for `next_`
};

}  // namespace troupe
