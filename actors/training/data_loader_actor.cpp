// data_loader_actor.cpp: item sequence, shuffling, batch assembly and credits.
#include "actors/training/data_loader_actor.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "actors/base/actor_kinds.hpp"
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

std::vector<std::int64_t> step_draws(std::int64_t count, std::uint64_t seed, std::int64_t step,
                                     std::int64_t batch) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(batch));
  keyed_random random{seed, 0xd4a35ull, static_cast<std::uint64_t>(step)};
  for (auto& row : rows)
    row = static_cast<std::int64_t>(random.below(static_cast<std::uint64_t>(count)));
  return rows;
}

std::vector<std::int64_t> apportion_rows(std::int64_t total, const std::vector<double>& weights) {
  TROUPE_CHECK(!weights.empty() && total >= 0,
               "apportion_rows: " << total << " rows into " << weights.size() << " parts");
  for (auto w : weights)
    TROUPE_CHECK(w > 0 && std::isfinite(w), "apportion_rows: weight " << w);
  // Relative to the largest, so that weights near the largest double sum without overflow.
  const double top = *std::max_element(weights.begin(), weights.end());
  double sum = 0;
  for (auto w : weights)
    sum += w / top;
  // Whole rows of each share, then one more for the largest remainders (ties: lower index).
  std::vector<std::int64_t> rows(weights.size());
  std::vector<std::pair<double, std::size_t>> remainders;  // (-fraction, index): largest first
  std::int64_t given = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const double share = static_cast<double>(total) * (weights[i] / top / sum);
    rows[i] = std::min(total - given, static_cast<std::int64_t>(std::floor(share)));
    given += rows[i];
    remainders.emplace_back(-(share - std::floor(share)), i);
  }
  std::sort(remainders.begin(), remainders.end());
  for (std::size_t k = 0; given < total; ++k, ++given)
    ++rows[remainders[k % remainders.size()].second];
  return rows;
}

data_loader_actor::data_loader_actor(caf::actor_config& config, data_loader_settings settings)
    : device_actor(config, "data_loader", nullptr),
      settings_(std::move(settings)),
      next_step_(settings_.plan.first_step),
      next_eval_(settings_.plan.evaluate_only ? 0 : -1) {
  auto& plan = settings_.plan;
  if (plan.replica_rows.empty())  // a plan made by hand: the even split
    plan.replica_rows = apportion_rows(plan.batch_size, std::vector<double>(plan.replicas, 1.0));
  TROUPE_CHECK(static_cast<std::int64_t>(plan.replica_rows.size()) == plan.replicas,
               "data loader: " << plan.replica_rows.size() << " replicas' rows for "
                               << plan.replicas << " replicas");
  for (auto rows : plan.replica_rows)
    TROUPE_CHECK(rows >= plan.microbatches, "data loader: a replica of " << rows << " rows for "
                                                                         << plan.microbatches
                                                                         << " micro-batches");
}

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
  if (!settings_.plan.splits_evenly()) {
    s += "; rows a step for each replica:";
    for (auto rows : settings_.plan.replica_rows)
      s += " " + std::to_string(rows);
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
  rows_sent_.assign(replicas, 0);
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
  for (std::size_t r = 0; r < replicas; ++r)
    record_counter("rows", first_layer_tracks_[r], settings_.plan.replica_rows[r]);
}

// Note [balanced replicas]
// Data parallel waits at every all-reduce for the slowest replica, and replicas need not
// be equally fast: devices of different kinds, or devices that share a core. The loss
// scales by the global batch and the averagers sum (labels_msg in
// include/troupe/messages.hpp), so a step's gradient is the same whichever replica
// computed which rows, and the loader may split the global batch unevenly: [parallel]
// balance = [w0, w1, ...] gives replica r a share in proportion to w_r (apportion_rows),
// each micro-batch of a replica as near its rows / M as they divide. On 2 cores, DP3 on
// cpu:0-2 (cpu:0 and cpu:2 share core 0) ran 20% more samples/s with [1, 2, 1] than even.
// GEMMs run best on rows in multiples of 8: on 2 equal cores, 66 and 62 rows ran 3-4%
// below 64 and 64, either way round.
// The tags carry each micro-batch's first sample in the global batch, so dropout masks
// (keyed by sample) are the single device's whatever the split; only the order of the
// sums changes, so every split gives the single-device step within float rounding.
// A split moved by each device's measured busy time was tried and not kept: a device
// thread's busy time does not show that it shares its core or loses time slices to a
// neighbour process, so it was wrong where balancing would pay (docs/benchmarks.md).

void data_loader_actor::send_batch(const dataset& source, const std::int64_t* rows,
                                   std::int64_t count, const micro_tag& tag,
                                   std::int64_t global_batch, std::int64_t global_terms) {
  auto r = static_cast<std::size_t>(tag.replica);
  // One label a sample, or one a position of a sequence (a language model's next tokens),
  // or K float values a sample.
  const bool values = source.outputs > 0;
  const auto width = values ? source.outputs : source.positions;
  // Written here, on the host: a loader on a GPU keeps its labels in (page-locked) host
  // memory, and the loss copies them over when they arrive (runtime/core/transfer.hpp).
  const shape_t shape = values || width > 1 ? shape_t{count, width} : shape_t{count};
  const auto type = values ? dtype::f32 : dtype::i32;
  auto y = settings_.on.type == device_type::cuda ? tensor::empty_pinned(shape, type)
                                                  : tensor::empty(shape, type, settings_.on);
  if (values)
    for (std::int64_t i = 0; i < count; ++i)
      std::copy_n(source.values.begin() + rows[i] * width, width, y.f32() + i * width);
  else
    source.gather_labels(rows, static_cast<std::size_t>(count), y.i32(), gather_epoch(tag));
  labels_msg labels{tag, std::move(y), global_batch, global_terms, trace_stamp{}};
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
                         trace_stamp{},
                         rows_sent_.at(r)++};  // its outbox keeps the order (Note [rows in order])
    stamp_send(batch, first_layer_tracks_.at(r), "forward", bytes);
    relayed_[r].send(this, std::move(batch));
    record_counter("credits", first_layer_tracks_[r], relayed_[r].in_flight());
    return;
  }
  // Assembled straight into the first layer's device memory: no copy on arrival.
  auto x = gather_rows(settings_.data, source, std::move(picked),
                       settings_.devices->at(replica_devices_.at(r)), job_for(job_kind::load, tag),
                       gather_epoch(tag));
  activation_msg batch{tag, std::move(x), trace_stamp{}};
  stamp_send(batch, first_layer_tracks_.at(r), "forward", bytes_of(batch.x));
  first_layers_.at(r).send(this, std::move(batch));
  record_counter("credits", first_layer_tracks_[r], first_layers_[r].in_flight());
}

std::int64_t data_loader_actor::terms_of(const dataset& source, const std::int64_t* rows,
                                         std::int64_t count, std::int64_t epoch) const {
  if (source.outputs > 0)
    return count * source.outputs;
  const auto ignored = settings_.plan.loss.ignore_index;
  if (ignored == kernels::no_ignore_index)
    return count * source.positions;
  // torch's mean over the labels not ignored
  std::vector<std::int32_t> labels(static_cast<std::size_t>(count * source.positions));
  source.gather_labels(rows, static_cast<std::size_t>(count), labels.data(), epoch);
  return std::count_if(labels.begin(), labels.end(),
                       [ignored](std::int32_t label) { return label != ignored; });
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
    send_batch(test, rows.data(), count, tag, count, terms_of(test, rows.data(), count));
    if (++next_eval_ == plan.eval_batches)
      next_eval_ = -1;
    return true;
  }
  if (next_step_ >= plan.total_steps)
    return false;

  const auto step = next_step_++;
  const auto epoch = step / plan.steps_per_epoch;
  const auto& train = settings_.data->train;
  const std::int64_t* batch_rows;
  if (train.draws_per_epoch > 0) {
    order_ = step_draws(train.count, settings_.seed, step, plan.batch_size);
    batch_rows = order_.data();
  } else {
    if (epoch != order_epoch_) {
      order_ = epoch_order(train.count, settings_.seed, epoch, settings_.shuffle);
      order_epoch_ = epoch;
    }
    batch_rows = order_.data() + (step % plan.steps_per_epoch) * plan.batch_size;
  }
  // Replica r takes plan.replica_rows[r] of the global batch, after those of the replicas before
  // it, in M micro-batches of as equal a size as they divide into.
  const auto global_terms = terms_of(settings_.data->train, batch_rows, plan.batch_size, epoch);
  std::int64_t first = 0;
  for (std::int64_t r = 0; r < plan.replicas; ++r) {
    const auto rows = plan.replica_rows[static_cast<std::size_t>(r)];
    for (std::int64_t m = 0; m < plan.microbatches; ++m) {
      const auto count = rows / plan.microbatches + (m < rows % plan.microbatches ? 1 : 0);
      micro_tag tag;
      tag.step = step;
      tag.microbatch = static_cast<std::int32_t>(m);
      tag.replica = static_cast<std::int32_t>(r);
      tag.version = step;
      tag.epoch = epoch;
      tag.first_sample = first;
      send_batch(settings_.data->train, batch_rows + first, count, tag, plan.batch_size,
                 global_terms);
      first += count;
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
