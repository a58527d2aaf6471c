// data_loader_actor.cpp: item sequence, shuffling, batch assembly and credits.
#include "actors/data_loader_actor.hpp"

#include <numeric>

#include "actors/actor_kinds.hpp"
#include "runtime/base/random.hpp"

namespace troupe {

std::vector<std::int64_t> epoch_order(std::int64_t count, std::uint64_t seed, std::int64_t epoch,
                                      bool shuffle) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle)
    return order;
  keyed_random random{seed, 0x5eedull, static_cast<std::uint64_t>(epoch)};
  for (std::int64_t i = count - 1; i > 0; --i) {
    auto j = static_cast<std::int64_t>(random.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

data_loader_actor::data_loader_actor(caf::actor_config& config, data_loader_settings settings)
    : device_actor(config, "data_loader", nullptr),
      settings_(std::move(settings)),
      next_step_(settings_.plan.first_step) {}

caf::message_handler data_loader_actor::handlers() {
  return {
      [this](const release_msg& release) {
        auto span = handling_span("release", release.trace, release.tag, 0);
        auto r = static_cast<std::size_t>(release.tag.replica);
        record_counter("credits", first_layer_tracks_.at(r), release_credit(r));
      },
      [this](start_atom) {
        for (std::int64_t i = 0; i < settings_.prefetch; ++i)
          if (!send_next())
            break;
      },
      [this](credit_atom) { send_next(); },
      [this](stop_atom) {
        stopped_ = true;
        return next_step_;
      },
  };
}

std::string data_loader_actor::status() const {
  std::string s = "loader: next step " + std::to_string(next_step_) + " of " +
                  std::to_string(settings_.plan.total_steps);
  auto waiting = [&](std::size_t r, const auto& outbox) {
    if (outbox.waiting() > 0)
      s += "; " + std::to_string(outbox.waiting()) +
           " micro-batch(es) waiting for a credit on the wire to " + first_layer_names_[r] +
           " (capacity " + std::to_string(outbox.capacity()) + ", " +
           std::to_string(outbox.in_flight()) + " in flight)";
  };
  for (std::size_t r = 0; r < first_layers_.size(); ++r) {
    if (relayed_[r].connected())
      waiting(r, relayed_[r]);
    else
      waiting(r, first_layers_[r]);
  }
  return s;
}

void data_loader_actor::release_peers() {
  losses_.clear();
  first_layers_.clear();
  relayed_.clear();
}

std::int64_t data_loader_actor::release_credit(std::size_t replica) {
  if (relayed_.at(replica).connected()) {
    relayed_[replica].release(this);
    return relayed_[replica].in_flight();
  }
  first_layers_.at(replica).release(this);
  return first_layers_[replica].in_flight();
}

void data_loader_actor::connect(const wiring_msg& wiring) {
  const auto replicas = static_cast<std::size_t>(settings_.plan.replicas);
  first_layers_.resize(replicas);
  relayed_.resize(replicas);
  first_layer_tracks_.assign(replicas, 0);
  first_layer_names_.assign(replicas, "");
  loss_tracks_.assign(replicas, 0);
  losses_.resize(replicas);
  replica_devices_.assign(replicas, settings_.on);
  first_layer_devices_.assign(replicas, "");
  for (const auto& end : wiring.out("activations")) {
    TROUPE_CHECK(end.peer_replica >= 0 && static_cast<std::size_t>(end.peer_replica) < replicas,
                 "data loader: activations wire to " << end.peer_name << " of replica "
                                                     << end.peer_replica);
    const auto r = static_cast<std::size_t>(end.peer_replica);
    first_layers_[r].connect(end);
    if (end.relay) {
      auto through = end;
      through.peer = end.relay;
      relayed_[r].connect(through);
    }
    first_layer_tracks_[r] = end.peer_track;
    first_layer_names_[r] = end.peer_name;
    first_layer_devices_[r] = end.peer_device;
    // Assembled straight into the first layer's device memory: no copy on arrival. A
    // first layer on another node without an assembler gets the batch over the network
    // from the loader's own device (tensor_inspect.hpp).
    device_id peer;
    if (device_id::parse(end.peer_device, peer) && peer.node == settings_.on.node)
      replica_devices_[r] = peer;
  }
  for (const auto& end : wiring.out("labels")) {
    losses_.at(static_cast<std::size_t>(end.peer_replica)) = end.peer;
    loss_tracks_.at(static_cast<std::size_t>(end.peer_replica)) = end.peer_track;
  }
  for (std::size_t r = 0; r < replicas; ++r)
    TROUPE_CHECK(first_layers_[r].connected() && losses_[r],
                 "data loader: replica " << r << " lacks a first layer or a loss");
}

void data_loader_actor::send_batch(const dataset& source, const std::int64_t* rows,
                                   std::int64_t count, const micro_tag& tag,
                                   std::int64_t global_batch) {
  auto r = static_cast<std::size_t>(tag.replica);
  // One label a sample, or one a position of a sequence (a language model's next tokens).
  const auto positions = source.positions;
  // Written here, on the host: a loader on a GPU keeps its labels in (page-locked) host
  // memory, and the loss copies them over when they arrive (runtime/core/transfer.hpp).
  const shape_t shape = positions > 1 ? shape_t{count, positions} : shape_t{count};
  auto y = settings_.on.type == device_type::cuda ? tensor::empty_pinned(shape, dtype::i32)
                                                  : tensor::empty(shape, dtype::i32, settings_.on);
  std::int32_t* ys = y.i32();
  for (std::int64_t i = 0; i < count; ++i)
    std::copy_n(source.labels.begin() + rows[i] * positions, positions, ys + i * positions);
  labels_msg labels{tag, std::move(y), global_batch, trace_stamp{}};
  stamp_send(labels, loss_tracks_.at(r), "labels", bytes_of(labels.labels));
  send_written(losses_.at(r), std::move(labels));  // Note [nothing unwritten to the network]
  std::vector<std::int64_t> picked(rows, rows + count);
  if (relayed_.at(r).connected()) {
    // Only the row numbers cross to the first layer's node (batch_assembler_actor.hpp).
    const auto bytes = count * static_cast<std::int64_t>(sizeof(std::int64_t));
    batch_rows_msg batch{tag,
                         std::move(picked),
                         &source == &settings_.data->test,
                         first_layers_[r].peer(),
                         first_layer_devices_[r],
                         trace_stamp{}};
    stamp_send(batch, first_layer_tracks_.at(r), "forward", bytes);
    relayed_[r].send(this, std::move(batch));
    record_counter("credits", first_layer_tracks_[r], relayed_[r].in_flight());
    return;
  }
  // Assembled straight into the first layer's device memory: no copy on arrival.
  auto x = gather_rows(settings_.data, source, std::move(picked),
                       settings_.devices->at(replica_devices_.at(r)), job_for("load", tag));
  activation_msg batch{tag, std::move(x), trace_stamp{}};
  stamp_send(batch, first_layer_tracks_.at(r), "forward", bytes_of(batch.x));
  first_layers_.at(r).send(this, std::move(batch));
  record_counter("credits", first_layer_tracks_[r], first_layers_[r].in_flight());
}

bool data_loader_actor::send_next() {
  const auto& plan = settings_.plan;
  if (stopped_)
    return false;
  if (next_eval_ >= 0) {
    // The next batch of an evaluation in progress.
    const auto& test = settings_.data->test;
    auto first = next_eval_ * plan.eval_batch_size;
    auto count = std::min(plan.eval_batch_size, test.count - first);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(count));
    std::iota(rows.begin(), rows.end(), first);
    micro_tag tag;
    tag.stage = phase::eval;
    tag.step = eval_counter_++;
    tag.version = next_step_;  // after all steps sent so far
    tag.epoch = (next_step_ - 1) / plan.steps_per_epoch;
    send_batch(test, rows.data(), count, tag, count);
    if (++next_eval_ == plan.eval_batches)
      next_eval_ = -1;
    return true;
  }
  if (next_step_ >= plan.total_steps)
    return false;

  const auto step = next_step_++;
  const auto epoch = step / plan.steps_per_epoch;
  if (epoch != order_epoch_) {
    order_ = epoch_order(settings_.data->train.count, settings_.seed, epoch, settings_.shuffle);
    order_epoch_ = epoch;
  }
  const auto* batch_rows = order_.data() + (step % plan.steps_per_epoch) * plan.batch_size;
  const auto chunk = plan.batch_size / (plan.replicas * plan.microbatches);
  for (std::int64_t r = 0; r < plan.replicas; ++r) {
    for (std::int64_t m = 0; m < plan.microbatches; ++m) {
      micro_tag tag;
      tag.step = step;
      tag.microbatch = static_cast<std::int32_t>(m);
      tag.replica = static_cast<std::int32_t>(r);
      tag.version = step;
      tag.epoch = epoch;
      send_batch(settings_.data->train, batch_rows + (r * plan.microbatches + m) * chunk, chunk,
                 tag, plan.batch_size);
    }
  }
  if (plan.evaluates_after(step))
    next_eval_ = 0;
  return true;
}

}  // namespace troupe

namespace troupe {

TROUPE_REGISTER_BUILTIN_ACTOR_KIND("data_loader",
                                   "turns the data set into tagged micro-batches ([data])",
                                   [](const actor_plan& plan, spawn_context& context) {
                                     data_loader_settings s;
                                     s.data = context.data;
                                     s.plan = context.plan;
                                     s.shuffle = context.config.data.shuffle;
                                     s.seed = context.config.run.seed;
                                     s.prefetch = context.config.data.prefetch;
                                     s.on = plan.device;
                                     s.devices = &context.devices;
                                     return context.system.spawn<data_loader_actor>(std::move(s));
                                   });

}  // namespace troupe
