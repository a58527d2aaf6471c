// grad_averager_actor.hpp: sums one layer's weight gradients over the R data-parallel
// replicas, as soon as that layer's backward of a step is done on each replica (so the
// averaging of late layers overlaps the backward of early layers).
//
// method "central": one averager per layer. It receives the R replicas' gradients of a
// step (copied to its device on arrival), sums them in replica order 0..R-1 (so the
// result does not depend on arrival order) and sends the sum to its sink (the optimizer).
//
// method "ring": one averager per replica per layer, each on its replica's device, in a
// ring (replica r sends to replica (r + 1) mod R). The layer's gradients are flattened
// into one vector of n floats, cut into buckets of at most bucket_elements, and each
// bucket is all-reduced independently: cut into R chunks (sizes differ by at most one),
// R - 1 rounds of reduce-scatter (send a chunk to the next averager, which adds it to its
// own copy of that chunk), then R - 1 rounds of all-gather (forward the fully reduced
// chunks). Every replica ends with bit-identical sums, which it sends to its own sink (its
// replica's optimizer), so the replicas' optimizers stay identical without broadcasting
// parameters. Messages of a later step or from a faster neighbour are kept until needed.
//
// The sum is a sum, not a mean: the loss already scales each micro-batch's gradient by
// 1 / global batch (DESIGN.md), so the sum over replicas is the full-batch mean gradient.
#pragma once

#include <caf/all.hpp>

#include <map>
#include <memory>
#include <vector>

#include "runtime/core/device.hpp"
#include "actors/messages.hpp"

namespace troupe {

struct grad_averager_settings {
  std::string name;                   // e.g. "avg.layer_2" or "r1.avg.layer_2"
  std::string method = "central";     // "central" | "ring"
  std::int32_t layer_index = 0;
  std::int32_t replica = -1;          // ring: this averager's replica; central: -1
  std::int32_t replicas = 1;          // R
  std::int64_t bucket_elements = 1 << 18;  // ring: floats per bucket
  bool shard_optimizer = false;       // ring: Note [sharded optimizer] (the .cpp)
  device* on = nullptr;
  // From the wiring message (wiring_msg), not set at spawn:
  caf::actor next;                    // ring: the averager of replica (replica + 1) % R
  caf::actor sink;                    // receives weight_grads_msg with the sums
  caf::actor trainer;                 // receives failure_msg
};

class grad_averager_actor : public caf::event_based_actor {
 public:
  grad_averager_actor(caf::actor_config& config, grad_averager_settings settings);
  caf::behavior make_behavior() override;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
  std::uint32_t track_ = 0;  // trace track
  grad_averager_settings settings_;
};

}  // namespace troupe
