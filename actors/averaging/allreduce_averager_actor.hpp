// allreduce_averager_actor.hpp: the averager of methods "ring" and "gloo": one per replica
// per layer, each on its replica's device, the rank of its replica in the layer's group.
//
// When the layer's gradients of a step arrive it flattens them into one buffer (the layer
// already hands them over as views of one buffer; anything else is copied by a job on its
// device) and has its collective backend (collective_backend.hpp: ring or gloo) sum it over
// the ranks in place. Every rank ends with bit-identical sums, which it hands its sink (its
// replica's optimizer) as views shaped like the gradients, so the replicas' optimizers stay
// identical without broadcasting parameters. With shard_optimizer the backend only
// reduce-scatters, the optimizer updates the spans this rank owns, and the backend
// all-gathers the parameters instead (Note [sharded optimizer] in grad_averager_actor.cpp).
//
// With averaging = "local_sgd" or "diloco" the gradients pass straight to the optimizer,
// and the backend averages what the optimizer sends every H steps instead, its parameters
// or their deltas (Note [local SGD] in the .cpp).
//
// Not here: averaging (the loss already scales, DESIGN.md), how the sum travels (the
// backend's), the central averager (a reduce into one optimizer: central_averager_actor.hpp).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <vector>

#include "actors/averaging/collective_backend.hpp"
#include "actors/averaging/grad_averager_actor.hpp"
#include "troupe/device_actor.hpp"
#include "troupe/ops.hpp"

namespace troupe {

class allreduce_averager_actor final : public device_actor, private collective_host {
 public:
  /// settings.method is ring or gloo, 0 <= settings.replica < settings.replicas.
  allreduce_averager_actor(caf::actor_config& config, grad_averager_settings settings);
  ~allreduce_averager_actor() override;

 protected:
  caf::message_handler handlers() override;
  void connect(const wiring_msg& wiring) override;
  void release_peers() override;
  std::string role() const override;
  std::string waiting_for() const override;

 private:
  // collective_host: what the backend uses.
  const grad_averager_settings& settings() const override { return settings_; }
  device& on() const override { return device_actor::on(); }
  job_label reduce_job(std::int64_t step, std::int64_t values) const override;
  void send_to_peer(const caf::actor& peer, std::uint32_t track, ring_msg message) override;
  caf::actor_addr self_address() const override { return address(); }
  void all_reduced(std::int64_t step, tensor flat, std::int64_t start_ns,
                   std::int64_t end_ns) override;
  void reduce_scattered(std::int64_t step, tensor flat,
                        const std::vector<flat_span>& owned) override;
  void all_gathered(std::int64_t step, tensor flat) override;

  void receive_local(weight_grads_msg& message);
  /// One buffer of the gradients' n floats, ready when they are written.
  tensor flatten(std::int64_t step, std::vector<tensor> grads, std::int64_t n);
  bool sharded() const { return settings_.shard_optimizer && settings_.replicas > 1; }
  /// Local SGD or DiLoCo: gradients pass on, parameters (or their deltas) are averaged.
  bool local() const { return settings_.rule != averaging_rule::synchronous; }
  /// Local SGD: this replica's own gradients, scaled by R, on to its optimizer.
  void pass_on(weight_grads_msg& message);
  /// Submits ts *= alpha as one job of `step`; each of `ts` is ready after it.
  void scale(std::int64_t step, std::vector<tensor>& ts, float alpha);

  grad_averager_settings settings_;
  gradient_layout layout_;
  kernels::ops::copy::function copy_ = nullptr;
  std::unique_ptr<collective_backend> backend_;
  caf::actor sink_;  // this replica's optimizer
  std::uint32_t sink_track_ = 0;
  std::map<std::int64_t, std::vector<shape_t>> shapes_;  // by step: the local gradients'
  std::set<std::int64_t> parameter_averages_;  // local SGD: steps whose parameters it sums
  kernels::ops::scale::function scale_ = nullptr;
};

}  // namespace troupe
