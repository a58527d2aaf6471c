// grad_averager_actor.cpp: the "averager" kind's factory and the check both averagers make
// of the gradients they receive (see the header). The actors themselves are in
// central_averager_actor.cpp and allreduce_averager_actor.cpp (over a collective backend:
// ring_collective.cpp, gloo_collective.cpp).
#include "actors/averaging/grad_averager_actor.hpp"

#include <algorithm>
#include <stdexcept>

#include "actors/averaging/allreduce_averager_actor.hpp"
#include "actors/averaging/central_averager_actor.hpp"
#include "actors/base/actor_kinds.hpp"
#include "actors/base/collective_messages.hpp"
#include "troupe/check.hpp"
#include "troupe/error.hpp"

namespace troupe {

// Note [sharded optimizer]
// ZeRO-1 over the ring ([parallel] shard_optimizer). After reduce-scatter, replica r
// holds the full sum of chunk (r + 1) mod R of every bucket, and only that. Instead of
// all-gathering gradients so that every replica's optimizer can update everything, the
// averager hands its optimizer the flat gradients with the spans it owns (shard_msg
// reduced); the optimizer updates only those spans, into a new flat parameter buffer
// (updated); the ring then all-gathers that buffer exactly as it would gradients, and the
// averager hands it back (gathered), complete, as the next version. The update is
// elementwise, so each parameter is computed once, by one replica, from the same sum as
// without sharding: every replica ends with bit-identical parameters, equal to the
// unsharded run's. Each replica runs 1/R of the optimizer; the messages between an
// averager and its optimizer stay on one device. Optimizer state outside a replica's
// spans stays allocated but unused (compute is sharded, memory is not). The ring's side
// is ring_collective.cpp (reduce_scatter, all_gather), the averager's
// allreduce_averager_actor.cpp (reduce_scattered, all_gathered), the spans come from
// ring_schedule::owned_spans, the optimizer's side is optimizer_actor::update_shard.

caf::actor spawn_grad_averager(caf::actor_system& system, grad_averager_settings settings) {
  switch (settings.method) {
    case averaging_method::ring:
    case averaging_method::gloo:
      return system.spawn<allreduce_averager_actor>(std::move(settings));
    case averaging_method::central:
      return system.spawn<central_averager_actor>(std::move(settings));
  }
  TROUPE_CHECK(false, settings.name << ": averaging method " << static_cast<int>(settings.method));
  return {};
}

void check_averager_settings(const grad_averager_settings& settings, averaging_method method) {
  TROUPE_CHECK(settings.on != nullptr, settings.name << " has no device");
  TROUPE_CHECK(settings.method == method, settings.name << ": a " << to_string(method)
                                                        << " averager with method '"
                                                        << to_string(settings.method) << "'");
  TROUPE_CHECK(settings.replicas >= 1, settings.name << ": " << settings.replicas << " replicas");
}

std::string gradient_layout::describe(const weight_grads_msg& message) const {
  return averager_ + ": gradients of step " + std::to_string(message.step) + ", layer " +
         std::to_string(message.layer) + ", replica " + std::to_string(message.replica);
}

void gradient_layout::check(const weight_grads_msg& message, std::int32_t first_replica,
                            std::int32_t last_replica) {
  if (message.layer != layer_)
    throw std::logic_error(describe(message) + " reached the averager of layer " +
                           std::to_string(layer_));
  if (message.replica < first_replica || message.replica > last_replica)
    throw std::logic_error(describe(message) + ": expected replica " +
                           (first_replica == last_replica ? std::to_string(first_replica)
                                                          : std::to_string(first_replica) + " .. " +
                                                                std::to_string(last_replica)));
  if (message.grads.empty())
    throw std::logic_error(describe(message) + ": no gradient tensors");
  std::vector<shape_t> shapes;
  for (const auto& g : message.grads) {
    if (!g.defined() || g.type() != dtype::f32)
      throw std::logic_error(describe(message) + ": every gradient must be a defined f32 tensor");
    shapes.push_back(g.shape());
  }
  // The layer's parameters never change shape, so the first message fixes the layout.
  if (shapes_.empty()) {
    shapes_ = std::move(shapes);
    return;
  }
  if (shapes.size() != shapes_.size())
    throw std::logic_error(describe(message) + ": " + std::to_string(shapes.size()) +
                           " tensors, expected " + std::to_string(shapes_.size()) +
                           " (one per parameter)");
  for (std::size_t i = 0; i < shapes.size(); ++i)
    if (shapes[i] != shapes_[i])
      throw std::logic_error(describe(message) + ": gradient " + std::to_string(i) + " has shape " +
                             shape_to_string(shapes[i]) + ", expected " +
                             shape_to_string(shapes_[i]));
}

}  // namespace troupe

namespace troupe {

TROUPE_REGISTER_BUILTIN_ACTOR_KIND(
    "averager", "sums one layer's gradients over the replicas (method: central | ring | gloo)",
    [](const actor_plan& plan, spawn_context& context) {
      grad_averager_settings s;
      s.name = plan.name;
      s.method = plan.method;
      s.layer_index = plan.layer;
      s.replica = s.method == averaging_method::central ? -1 : plan.replica;
      s.replicas = static_cast<std::int32_t>(context.graph.replicas);
      s.bucket_elements = context.config.parallel.bucket_kib * 1024 / 4;
      s.shard_optimizer =
          s.method == averaging_method::ring && context.config.parallel.shard_optimizer;
      s.reduce_bf16 = context.config.parallel.reduce_bf16;
      s.rule = context.config.parallel.rule;
      if (s.rule == averaging_rule::async)
        throw user_error(plan.name + ": [parallel] averaging = \"async\" has no averagers: " +
                         "each replica's layer sends its gradients to the layer's server (its " +
                         "optimizer), which applies them one replica at a time");
      if (s.rule != averaging_rule::synchronous && s.method == averaging_method::central)
        throw user_error(plan.name + ": [parallel] averaging = \"" + to_string(s.rule) +
                         "\" averages each replica's own optimizer's parameters through a ring " +
                         "or gloo, and this averager's method is central (one optimizer for " +
                         "every replica)");
      if (s.reduce_bf16 && s.method != averaging_method::ring)
        throw user_error(plan.name + ": [parallel] reduce_dtype = \"bf16\" is the ring's, and " +
                         "this averager's method is " + to_string(s.method) +
                         ", which sums in fp32 only");
      s.gloo = context.gloo;
      s.gloo_timeout = std::chrono::milliseconds{std::max<std::int64_t>(
          1, static_cast<std::int64_t>(context.config.parallel.gloo_timeout * 1000.0 + 0.5))};
      s.on = &context.devices.at(plan.device);
      return spawn_grad_averager(context.system, std::move(s));
    });

}  // namespace troupe
