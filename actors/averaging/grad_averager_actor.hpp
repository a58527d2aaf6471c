// grad_averager_actor.hpp: the "averager" actor kind: sums one layer's weight gradients over
// the R data-parallel replicas, as soon as that layer's backward of a step is done on each
// replica (so the averaging of late layers overlaps the backward of early layers).
//
// Two actors implement it, chosen by the method ([parallel] averaging, or an [[actor]]'s
// `method`):
//   central  one averager per layer sums the R replicas' gradients in replica order
//            (actors/averaging/central_averager_actor.hpp);
//   ring, gloo  one averager per replica per layer, rank r of the layer's group, all-reduces
//            them through a collective backend, every replica ending with bit-identical sums
//            (actors/averaging/allreduce_averager_actor.hpp over collective_backend.hpp):
//            the ring's chunks travel the averagers as messages (ring_collective.cpp, with
//            its schedule in ring_schedule.hpp), gloo's all-reduce runs over TCP on a thread
//            per averager (gloo_collective.cpp).
// This file holds what they share: their settings, the check of the gradients they
// receive, and the kind's factory (grad_averager_actor.cpp, which also holds Note
// [sharded optimizer]).
//
// The sum is a sum, not a mean: the loss already scales each micro-batch's gradient by
// 1 / global batch (DESIGN.md), so the sum over replicas is the full-batch mean gradient.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/collective/gloo_allreduce.hpp"
#include "runtime/config/choices.hpp"
#include "troupe/device.hpp"
#include "troupe/messages.hpp"

namespace troupe {

struct grad_averager_settings {
  std::string name;                // e.g. "avg.layer_2" or "r1.avg.layer_2"
  averaging_method method = averaging_method::central;
  std::int32_t layer_index = 0;
  std::int32_t replica = -1;               // ring, gloo: this averager's replica; central: -1
  std::int32_t replicas = 1;               // R
  std::int64_t bucket_elements = 1 << 18;  // ring: floats per bucket
  bool shard_optimizer = false;            // ring: Note [sharded optimizer] (the .cpp)
  bool reduce_bf16 = false;                // ring: chunks in bf16 (Note [a ring in bf16])
  /// ring, gloo: local_sgd and diloco pass each step's gradients on and average what their
  /// optimizer sends (Note [local SGD] in allreduce_averager_actor.cpp).
  averaging_rule rule = averaging_rule::synchronous;
  gloo_rendezvous gloo;                    // gloo: where the run's contexts meet
  std::chrono::milliseconds gloo_timeout{30000};  // gloo: the longest wait for a peer
  device* on = nullptr;
  // Its neighbours (the sink, the next averager of a ring) and the trainer come with the
  // wiring message (wiring_msg), once every actor is spawned.
};

/// Spawns the averager `settings.method` names (TROUPE_CHECKs the settings).
caf::actor spawn_grad_averager(caf::actor_system& system, grad_averager_settings settings);

/// TROUPE_CHECKs what every averager needs of its settings: a device, `method` (the kind
/// of averager being built) and at least one replica.
void check_averager_settings(const grad_averager_settings& settings, averaging_method method);

/// The shapes of one layer's gradients, fixed by the first message an averager receives;
/// every message is checked against them, so a replica that disagrees is named.
class gradient_layout {
 public:
  gradient_layout(std::string averager, std::int32_t layer)
      : averager_(std::move(averager)), layer_(layer) {}

  /// "avg.layer_2: gradients of step 3, layer 2, replica 1": for errors.
  std::string describe(const weight_grads_msg& message) const;

  /// Throws std::logic_error (naming the averager and the message) unless `message` holds
  /// this layer's gradients, from a replica in first_replica .. last_replica, as defined
  /// f32 tensors shaped like the first message's.
  void check(const weight_grads_msg& message, std::int32_t first_replica,
             std::int32_t last_replica);

 private:
  std::string averager_;
  std::int32_t layer_;
  std::vector<shape_t> shapes_;  // empty until the first message
};

}  // namespace troupe
