// gloo_averager_actor.hpp: the "gloo" averager: one per replica per layer, like the ring
// averager, but the all-reduce is gloo's (libgloo, TCP) instead of actor messages.
//
// The averager of replica r of layer L is rank r of R in the run's gloo context of layer L
// (Note [one gloo context per layer] in the .cpp). When the layer's gradients of a step
// arrive it flattens them (the layer already hands them over as views of one buffer) and
// submits the all-reduce to its context's worker thread
// (runtime/collective/gloo_allreduce.hpp), which waits for the gradients to be written,
// sums them in place with gloo's ring all-reduce, and sends the actor a message; the actor
// then hands the sums to its sink (its replica's optimizer) as views shaped like the
// gradients, exactly as the ring averager does. Every replica ends with bit-identical sums,
// so the replicas' optimizers stay identical without broadcasting parameters. The actor
// never blocks: its device's stream and thread keep running other actors' work while gloo
// waits for peers, so late layers average while early layers still run backward.
//
// A gloo error (a peer gone, a timeout: [parallel] gloo_timeout) reaches the trainer as a
// failure naming this averager, which ends the run.
//
// Not here: averaging (the loss already scales, DESIGN.md), the sharded optimizer (refused
// by the config loader: it needs the ring's chunks), GPU buffers (validation keeps gloo
// averagers on CPU devices), the rendezvous store (injected: gloo_rendezvous).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "actors/averaging/grad_averager_actor.hpp"
#include "runtime/collective/gloo_allreduce.hpp"
#include "troupe/device_actor.hpp"

namespace troupe {

class gloo_averager_actor final : public device_actor {
 public:
  /// settings.method is averaging_method::gloo, 0 <= settings.replica < settings.replicas,
  /// settings.gloo.store is set, settings.on is a CPU device.
  gloo_averager_actor(caf::actor_config& config, grad_averager_settings settings);
  ~gloo_averager_actor() override;

 protected:
  caf::message_handler handlers() override;
  void connect(const wiring_msg& wiring) override;
  void release_peers() override;
  std::string role() const override;
  std::string waiting_for() const override;

 private:
  /// One step whose all-reduce is under way.
  struct step_state {
    std::vector<shape_t> shapes;  // of the local gradients, for unflattening
    tensor flat;                  // (n) this replica's gradients, summed in place by gloo
  };

  void receive_local(weight_grads_msg& message);
  void finish(std::int64_t step_index, std::int64_t start_ns, std::int64_t end_ns);

  grad_averager_settings settings_;
  gradient_layout layout_;
  std::unique_ptr<gloo_allreduce_worker> worker_;
  caf::actor sink_;  // this replica's optimizer
  std::uint32_t sink_track_ = 0;
  std::map<std::int64_t, step_state> steps_;  // by step
};

}  // namespace troupe
