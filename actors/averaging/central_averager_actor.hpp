// central_averager_actor.hpp: the "central" averager: one per layer, on one device.
//
// It receives the R replicas' gradients of a step (copied to its device on arrival), sums
// them in replica order 0..R-1 as far as the arrived prefix allows (so the result does not
// depend on arrival order, yet early replicas are summed while late ones still compute),
// and sends the sum to its one grads sink (the optimizer) as a weight_grads_msg of replica
// -1. Steps are independent: gradients of a later step may arrive first.
//
// It never writes a tensor it received unless it was handed over (weight_grads_msg); it
// does not scale (the loss does, DESIGN.md) and does not broadcast parameters.
#pragma once

#include <map>
#include <vector>

#include "actors/averaging/grad_averager_actor.hpp"
#include "troupe/device_actor.hpp"
#include "troupe/ops.hpp"

namespace troupe {

class central_averager_actor final : public device_actor {
 public:
  /// settings.method is averaging_method::central; settings.replica is ignored (its jobs carry -1).
  central_averager_actor(caf::actor_config& config, grad_averager_settings settings);

 protected:
  caf::message_handler handlers() override;
  void connect(const wiring_msg& wiring) override;
  void release_peers() override;
  std::string role() const override;
  std::string waiting_for() const override;

 private:
  /// One step's state.
  struct step_state {
    std::vector<std::vector<tensor>> grads;  // by replica, on our device; dropped once summed
    std::vector<bool> arrived;               // by replica
    std::int32_t summed = 0;                 // replicas 0 .. summed-1 are in `sums`
    std::vector<tensor> sums;                // (each parameter's shape), our own buffers
  };

  void receive(weight_grads_msg& message);

  grad_averager_settings settings_;
  gradient_layout layout_;
  kernels::ops::axpy::function axpy_ = nullptr;
  caf::actor sink_;                           // the optimizer
  std::map<std::int64_t, step_state> steps_;  // by step
};

}  // namespace troupe
