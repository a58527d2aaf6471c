// grad_averager_actor.cpp: the central sum and the ring all-reduce of one layer's
// weight gradients (see the header for the protocol).
//
// The actor only does bookkeeping: every copy and sum is a job on its device's stream,
// and every tensor it sends carries the event of the job that writes it. It never writes
// a tensor it received (they are shared with the sender), so all sums go into buffers of
// its own. Not here: averaging (the loss already scales, DESIGN.md), compression,
// hierarchical or tree reductions.
#include "actors/grad_averager_actor.hpp"

#include "actors/actor_kinds.hpp"
#include "actors/failures.hpp"
#include "actors/inputs.hpp"
#include "actors/traced.hpp"

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "kernels/ops.hpp"
#include "runtime/base/error.hpp"
#include "runtime/core/transfer.hpp"

namespace troupe {

namespace {

constexpr std::int64_t float_bytes = sizeof(float);

/// Where a part of the flattened gradients lies: [offset, offset + size) in floats.
struct span {
  std::int64_t offset = 0;
  std::int64_t size = 0;
};

/// Chunk `c` of a bucket of `elements` floats cut into `parts` chunks whose sizes differ
/// by at most one (the first `elements % parts` chunks are one longer).
span chunk_of(std::int64_t elements, std::int32_t parts, std::int32_t c) {
  const std::int64_t base = elements / parts;
  const std::int64_t longer = elements % parts;
  return {c * base + std::min<std::int64_t>(c, longer), base + (c < longer ? 1 : 0)};
}

std::int32_t modulo(std::int64_t a, std::int32_t m) {
  return static_cast<std::int32_t>(((a % m) + m) % m);
}

/// True if the tensors lie back to back, in order, in one storage.
bool contiguous(const std::vector<tensor>& ts) {
  if (ts.empty())
    return false;
  const char* expected = static_cast<const char*>(ts.front().raw());
  for (const auto& t : ts) {
    if (!t.shares_storage_with(ts.front()) || static_cast<const char*>(t.raw()) != expected)
      return false;
    expected += t.bytes();
  }
  return true;
}

/// A central averager's state of one step.
struct central_step {
  std::vector<std::vector<tensor>> grads;  // by replica, on our device; dropped once summed
  std::vector<bool> arrived;               // by replica
  std::int32_t summed = 0;                 // replicas 0 .. summed-1 are in `sums`
  std::vector<tensor> sums;                // (each parameter's shape), our own buffers
};

/// A ring averager's state of one step, created when the local gradients arrive.
struct ring_step {
  std::vector<shape_t> shapes;          // of the local gradients, for unflattening
  tensor flat;                          // (n) this replica's copy, reduced in place
  std::vector<std::int32_t> processed;  // per bucket: ring messages taken, 0 .. 2(R-1)
  std::int32_t buckets_left = 0;
  // Sharded optimizer only:
  std::int32_t reduced_left = 0;        // buckets whose reduce-scatter is not done
  bool gathering = false;               // `flat` is now the parameters to all-gather
};

using ring_key = std::tuple<std::int64_t, std::int32_t, std::int32_t, std::int32_t>;
// (step, bucket, phase, round)

}  // namespace

// Note [ring order]
// A chunk travels the ring once during reduce-scatter: it starts at one replica, and
// each later replica adds its own copy, so its full sum is computed once, in one order,
// by one replica. All-gather then copies those bits to everyone. That is why every
// replica's result is bit-identical without any broadcast. Each replica processes a
// bucket's ring messages strictly in (phase, round) order, whatever order they arrive
// in: a message that comes early (before the step's local gradients, or before an
// earlier round) waits in `pending` until its turn.

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
// spans stays allocated but unused (compute is sharded, memory is not).

/// The averager's state and steps. It lives as long as the actor; jobs never capture it.
struct grad_averager_actor::impl {
  impl(grad_averager_actor* owner, grad_averager_settings& settings)
      : self_(owner), settings_(settings) {}

  std::string describe(const weight_grads_msg& message) const;
  void check_layout(const weight_grads_msg& message);
  // What the averaging jobs are, in traces (the summary counts "reduce" as communication).
  job_label reduce_label(std::int64_t step) const {
    return job_label{"reduce", self_->track_, step, -1, settings_.replica, 0, 0};
  }
  // For the watchdog: which steps are unfinished, and what they wait for.
  std::string steps_in_progress() const {
    std::string out;
    for (const auto& [step, state] : central_) {
      std::int32_t arrived = 0;
      for (bool a : state.arrived)
        arrived += a ? 1 : 0;
      out += (out.empty() ? "" : ", ") + std::string{"step "} + std::to_string(step) + " has " +
             std::to_string(arrived) + " of " + std::to_string(settings_.replicas) +
             " replicas' gradients";
    }
    for (const auto& [step, state] : ring_)
      out += (out.empty() ? "" : ", ") + std::string{"step "} + std::to_string(step) + " has " +
             std::to_string(state.buckets_left) + " bucket(s) waiting for ring messages";
    if (!pending_.empty())
      out += (out.empty() ? "" : ", ") + std::to_string(pending_.size()) + " early ring message(s)";
    return out;
  }
  // central
  void receive_central(weight_grads_msg& message);
  // ring
  void receive_local(weight_grads_msg& message);
  void receive_ring(ring_msg& message);
  void take_pending(std::int64_t step_index, std::int32_t bucket);
  tensor receive_chunk(ring_step& step, const ring_msg& message, std::int32_t expected_chunk,
                       span& where);
  void reduce_scatter(ring_step& step, const ring_msg& message);
  void all_gather(ring_step& step, const ring_msg& message);
  std::int32_t bucket_count(std::int64_t n) const;
  span chunk_span(const ring_step& step, std::int32_t bucket, std::int32_t chunk) const;
  tensor copy_out(const ring_step& step, std::int32_t bucket, std::int32_t chunk);
  void send_ring(std::int64_t step, std::int32_t bucket, std::int32_t phase, std::int32_t round,
                 std::int32_t chunk, tensor data);
  void connect(caf::actor next);
  void finish_if_done(std::int64_t step_index);
  // sharded optimizer
  bool sharded() const { return settings_.shard_optimizer && settings_.replicas > 1; }
  std::int32_t owned_chunk() const { return modulo(settings_.replica + 1, settings_.replicas); }
  void hand_reduced(std::int64_t step_index);
  void start_gather(shard_msg& updated);

  grad_averager_actor* self_;
  grad_averager_settings& settings_;  // the actor's: `next` may be set after spawning
  kernels::ops::copy::function copy_ = nullptr;
  kernels::ops::axpy::function axpy_ = nullptr;
  std::vector<shape_t> layout_;                   // the layer's gradient shapes (first message)
  std::map<std::int64_t, central_step> central_;  // by step
  std::map<std::int64_t, ring_step> ring_;        // by step
  std::map<ring_key, ring_msg> pending_;          // ring messages not taken yet
  std::vector<ring_msg> outbox_;                  // ring messages waiting for `next`
  std::uint32_t sink_track_ = 0;
};

grad_averager_actor::grad_averager_actor(caf::actor_config& config, grad_averager_settings settings)
    : caf::event_based_actor(config), settings_(std::move(settings)) {
  impl_ = std::make_shared<impl>(this, settings_);
  TROUPE_CHECK(settings_.on != nullptr, settings_.name << " has no device");
  TROUPE_CHECK(settings_.method == "central" || settings_.method == "ring",
               settings_.name << ": unknown averaging method '" << settings_.method << "'");
  TROUPE_CHECK(settings_.replicas >= 1,
               settings_.name << ": " << settings_.replicas << " replicas");
  if (settings_.method == "ring") {
    TROUPE_CHECK(
        settings_.replica >= 0 && settings_.replica < settings_.replicas,
        settings_.name << ": replica " << settings_.replica << " of " << settings_.replicas);
    TROUPE_CHECK(settings_.bucket_elements > 0,
                 settings_.name << ": bucket_elements = " << settings_.bucket_elements);
  }
  const auto type = settings_.on->id().type;
  impl_->copy_ = kernels::lookup<kernels::ops::copy>(type);
  impl_->axpy_ = kernels::lookup<kernels::ops::axpy>(type);
}

caf::behavior grad_averager_actor::make_behavior() {
  report_failures_to(this, settings_.name, &settings_.trainer);
  // The averagers of a ring hold each other (next), a cycle of strong references that
  // would keep them all in memory after they quit: let go of every handle on exit.
  attach_functor([this] {
    settings_.next = nullptr;
    settings_.sink = nullptr;
    settings_.trainer = nullptr;
    impl_->outbox_.clear();
    impl_->pending_.clear();
  });
  return {
      [this](weight_grads_msg& message) {
        if (come_back_when_ready(this, pending_input(settings_.on->id(), message.grads), message))
          return;
        auto span = handling(track_, message);
        impl_->check_layout(message);
        if (settings_.method == "central")
          impl_->receive_central(message);
        else
          impl_->receive_local(message);
      },
      [this](ring_msg& message) {
        if (come_back_when_ready(this, pending_input(settings_.on->id(), {&message.data}), message))
          return;
        micro_tag tag;
        tag.step = message.step;
        tag.microbatch = message.chunk;
        auto span = handling(track_, "ring", message.trace, tag, bytes_of(message.data));
        impl_->receive_ring(message);
      },
      [this](shard_msg& message) {
        if (come_back_when_ready(this, pending_input(settings_.on->id(), {&message.flat}), message))
          return;
        micro_tag tag;
        tag.step = message.step;
        auto span = handling(track_, "updated", message.trace, tag, bytes_of(message.flat));
        impl_->start_gather(message);
      },
      [this](status_atom) {
        std::string s = settings_.name + " (" + settings_.method + " on " +
                        settings_.on->id().to_string() + ")";
        auto steps = impl_->steps_in_progress();
        s += steps.empty() ? "; no step in progress" : "; steps in progress: " + steps;
        return s;
      },
      // The ring is circular, so `next`, the sink and the trainer come with the wiring,
      // once every actor is spawned.
      [this](const wiring_msg& wiring) {
        settings_.trainer = wiring.trainer;
        track_ = wiring.track;
        auto sinks = wiring.out("grads");
        TROUPE_CHECK(sinks.size() == 1, settings_.name << " needs one grads wire out");
        settings_.sink = sinks[0].peer;
        impl_->sink_track_ = sinks[0].peer_track;
        if (settings_.method == "ring") {
          auto ring = wiring.out("ring");
          TROUPE_CHECK(ring.size() == 1, settings_.name << " needs one ring wire out");
          impl_->connect(ring[0].peer);
        }
      },
      [this](finish_atom) { quit(); },
  };
}

std::string grad_averager_actor::impl::describe(const weight_grads_msg& message) const {
  return settings_.name + ": gradients of step " + std::to_string(message.step) + ", layer " +
         std::to_string(message.layer) + ", replica " + std::to_string(message.replica);
}

void grad_averager_actor::impl::check_layout(const weight_grads_msg& message) {
  if (message.layer != settings_.layer_index)
    throw std::logic_error(describe(message) + " reached the averager of layer " +
                           std::to_string(settings_.layer_index));
  if (settings_.method == "ring" ? message.replica != settings_.replica
                                 : message.replica < 0 || message.replica >= settings_.replicas)
    throw std::logic_error(describe(message) + ": expected replica " +
                           (settings_.method == "ring"
                                ? std::to_string(settings_.replica)
                                : "0 .. " + std::to_string(settings_.replicas - 1)));
  if (message.grads.empty()) throw std::logic_error(describe(message) + ": no gradient tensors");
  std::vector<shape_t> shapes;
  for (const auto& g : message.grads) {
    if (!g.defined() || g.type() != dtype::f32)
      throw std::logic_error(describe(message) + ": every gradient must be a defined f32 tensor");
    shapes.push_back(g.shape());
  }
  // The layer's parameters never change shape, so the first message fixes the layout.
  if (layout_.empty()) {
    layout_ = std::move(shapes);
    return;
  }
  if (shapes.size() != layout_.size())
    throw std::logic_error(describe(message) + ": " + std::to_string(shapes.size()) +
                           " tensors, expected " + std::to_string(layout_.size()) +
                           " (one per parameter)");
  for (std::size_t i = 0; i < shapes.size(); ++i)
    if (shapes[i] != layout_[i])
      throw std::logic_error(describe(message) + ": gradient " + std::to_string(i) + " has shape " +
                             shape_to_string(shapes[i]) + ", expected " +
                             shape_to_string(layout_[i]));
}

// ---- central -------------------------------------------------------------------------

void grad_averager_actor::impl::receive_central(weight_grads_msg& message) {
  const auto R = static_cast<std::size_t>(settings_.replicas);
  auto& step = central_[message.step];
  if (step.grads.empty()) {
    step.grads.resize(R);
    step.arrived.assign(R, false);
  }
  const auto replica = static_cast<std::size_t>(message.replica);
  if (step.arrived[replica]) throw std::logic_error(describe(message) + " arrived twice");
  step.arrived[replica] = true;
  // Start the copy to our device now; the sum waits for it on our stream.
  step.grads[replica] = arrive(message.grads, *settings_.on);

  // Fold replicas in, in replica order, as far as the arrived prefix allows (so the
  // bits do not depend on arrival order, yet early replicas are summed while late ones
  // are still computing).
  auto& work = settings_.on->work();
  const auto& id = settings_.on->id();
  event done;
  bool submitted = false;
  while (step.summed < settings_.replicas && step.arrived[static_cast<std::size_t>(step.summed)]) {
    auto& add = step.grads[static_cast<std::size_t>(step.summed)];
    for (const auto& g : add) work.wait_for(g.ready());
    (void)id;
    if (step.summed == 0) {
      // Handed over (see weight_grads_msg) or copied here on arrival: ours to sum into.
      step.sums = std::move(add);
      ++step.summed;
      continue;
    }
    done = work.submit([axpy = axpy_, context = settings_.on->context(), sums = step.sums,
                        add = std::move(add)] {
      for (std::size_t i = 0; i < sums.size(); ++i)
        axpy(context, add[i].numel(), 1.0f, add[i].f32(), sums[i].f32());
    }, reduce_label(message.step));
    submitted = true;
    ++step.summed;
  }
  if (step.summed < settings_.replicas) return;
  auto sums = std::move(step.sums);
  if (submitted)
    for (auto& s : sums) s.set_ready(done);
  const auto step_index = message.step;
  central_.erase(step_index);
  self_->send(settings_.sink,
              weight_grads_msg{step_index, settings_.layer_index, -1, std::move(sums)});
}

// ---- ring ----------------------------------------------------------------------------

std::int32_t grad_averager_actor::impl::bucket_count(std::int64_t n) const {
  return static_cast<std::int32_t>((n + settings_.bucket_elements - 1) / settings_.bucket_elements);
}

void grad_averager_actor::impl::receive_local(weight_grads_msg& message) {
  if (ring_.count(message.step) != 0) throw std::logic_error(describe(message) + " arrived twice");
  auto grads = arrive(message.grads, *settings_.on);
  auto& step = ring_[message.step];
  std::int64_t n = 0;
  for (const auto& g : grads) {
    step.shapes.push_back(g.shape());
    n += g.numel();
  }
  const auto buckets = bucket_count(n);
  step.processed.assign(static_cast<std::size_t>(buckets), 0);
  // With one replica there is nothing to exchange: every bucket is complete at once.
  step.buckets_left = settings_.replicas > 1 ? buckets : 0;
  step.reduced_left = sharded() ? buckets : 0;

  // Flatten: the layer hands its gradients over as views of one buffer (see
  // weight_grads_msg), which we then reduce in place; anything else is copied into a
  // buffer of our own first.
  auto& work = settings_.on->work();
  for (const auto& g : grads) work.wait_for(g.ready());
  if (contiguous(grads)) {
    step.flat = grads.front().view(0, {n});
  } else {
    step.flat = tensor::empty({n}, dtype::f32, settings_.on->id());
    work.submit([copy = copy_, context = settings_.on->context(), flat = step.flat,
                 grads = std::move(grads)] {
      std::int64_t offset = 0;
      for (const auto& g : grads) {
        copy(context, static_cast<std::int64_t>(g.bytes()), g.raw(), flat.f32() + offset);
        offset += g.numel();
      }
    }, reduce_label(message.step));
  }

  const auto step_index = message.step;
  if (settings_.replicas > 1) {
    // Reduce-scatter round 0: replica r starts chunk r of every bucket on its way.
    for (std::int32_t b = 0; b < buckets; ++b)
      send_ring(step_index, b, 0, 0, settings_.replica, copy_out(step, b, settings_.replica));
  }
  for (std::int32_t b = 0; b < buckets; ++b) take_pending(step_index, b);
  finish_if_done(step_index);
}

void grad_averager_actor::impl::receive_ring(ring_msg& message) {
  if (message.layer != settings_.layer_index)
    throw std::logic_error(settings_.name + ": ring message of layer " +
                           std::to_string(message.layer) + ", expected layer " +
                           std::to_string(settings_.layer_index));
  if (settings_.method != "ring" || settings_.replicas < 2 || message.phase < 0 ||
      message.phase > 1 || message.round < 0 || message.round > settings_.replicas - 2)
    throw std::logic_error(settings_.name + ": unexpected ring message (step " +
                           std::to_string(message.step) + ", phase " +
                           std::to_string(message.phase) + ", round " +
                           std::to_string(message.round) + ")");
  const auto step_index = message.step;
  const auto bucket = message.bucket;
  ring_key key{step_index, bucket, message.phase, message.round};
  if (!pending_.emplace(key, std::move(message)).second)
    throw std::logic_error(settings_.name + ": ring message of step " + std::to_string(step_index) +
                           ", bucket " + std::to_string(bucket) + " arrived twice");
  if (ring_.count(step_index) == 0) return;  // the local gradients of that step are not here yet
  take_pending(step_index, bucket);
  finish_if_done(step_index);
}

void grad_averager_actor::impl::take_pending(std::int64_t step_index, std::int32_t bucket) {
  auto& step = ring_.at(step_index);
  if (bucket < 0 || bucket >= static_cast<std::int32_t>(step.processed.size()))
    throw std::logic_error(settings_.name + ": ring message for bucket " + std::to_string(bucket) +
                           " of step " + std::to_string(step_index) + ", which has " +
                           std::to_string(step.processed.size()) +
                           " buckets (do the replicas' gradients have the same size?)");
  const std::int32_t rounds = settings_.replicas - 1;
  auto& processed = step.processed[static_cast<std::size_t>(bucket)];
  while (processed < 2 * rounds) {
    if (processed == rounds && sharded() && !step.gathering)
      return;  // the all-gather waits for our optimizer's updated parameters
    auto it = pending_.find(ring_key{step_index, bucket, processed / rounds, processed % rounds});
    if (it == pending_.end()) return;
    auto message = std::move(it->second);
    pending_.erase(it);
    if (message.phase == 0)
      reduce_scatter(step, message);
    else
      all_gather(step, message);
    if (++processed == 2 * rounds) --step.buckets_left;
  }
}

tensor grad_averager_actor::impl::receive_chunk(ring_step& step, const ring_msg& message,
                                                std::int32_t expected_chunk, span& where) {
  const auto r = settings_.replica;
  if (message.chunk != expected_chunk)
    throw std::logic_error(settings_.name + " (replica " + std::to_string(r) +
                           "): ring message of phase " + std::to_string(message.phase) +
                           ", round " + std::to_string(message.round) + " carries chunk " +
                           std::to_string(message.chunk) + ", expected " +
                           std::to_string(expected_chunk));
  where = chunk_span(step, message.bucket, message.chunk);
  if (!message.data.defined() || message.data.type() != dtype::f32 ||
      message.data.numel() != where.size)
    throw std::logic_error(settings_.name + ": ring chunk " + std::to_string(message.chunk) +
                           " of bucket " + std::to_string(message.bucket) + " of step " +
                           std::to_string(message.step) + " has " +
                           (message.data.defined() ? std::to_string(message.data.numel()) : "no") +
                           " elements, expected " + std::to_string(where.size) +
                           " (do the replicas' gradients have the same size?)");
  auto data = arrive(message.data, *settings_.on);
  settings_.on->work().wait_for(data.ready());
  return data;
}

void grad_averager_actor::impl::reduce_scatter(ring_step& step, const ring_msg& message) {
  // Round t: we receive chunk (r - 1 - t) mod R, add our own copy of it, and pass the
  // partial sum on. After the last round it is the full sum of chunk (r + 1) mod R.
  const auto r = settings_.replica;
  const auto R = settings_.replicas;
  span where;
  auto received = receive_chunk(step, message, modulo(r - 1 - message.round, R), where);
  auto sum = tensor::empty({where.size}, dtype::f32, settings_.on->id());
  const bool last = message.round == R - 2;
  sum.set_ready(
      settings_.on->work().submit([copy = copy_, axpy = axpy_, context = settings_.on->context(),
                                   flat = step.flat, received, sum, where, last] {
        float* own = flat.f32() + where.offset;
        copy(context, where.size * float_bytes, own, sum.raw());
        axpy(context, where.size, 1.0f, received.f32(), sum.f32());
        if (last)  // the full sum is ours to keep, and the first to be gathered
          copy(context, where.size * float_bytes, sum.raw(), own);
      }, reduce_label(message.step)));
  if (last && sharded()) {
    if (--step.reduced_left == 0)
      hand_reduced(message.step);
  } else if (last)
    send_ring(message.step, message.bucket, 1, 0, message.chunk, std::move(sum));
  else
    send_ring(message.step, message.bucket, 0, message.round + 1, message.chunk, std::move(sum));
}

void grad_averager_actor::impl::all_gather(ring_step& step, const ring_msg& message) {
  // Round t: we receive the full sum of chunk (r - t) mod R, take it exactly, and pass
  // it on unless the next replica is the one that computed it.
  const auto r = settings_.replica;
  const auto R = settings_.replicas;
  span where;
  auto received = receive_chunk(step, message, modulo(r - message.round, R), where);
  settings_.on->work().submit(
      [copy = copy_, context = settings_.on->context(), flat = step.flat, received, where] {
        copy(context, where.size * float_bytes, received.raw(), flat.f32() + where.offset);
      }, reduce_label(message.step));
  if (message.round < R - 2)  // a received tensor is never written, so it can go on as is
    send_ring(message.step, message.bucket, 1, message.round + 1, message.chunk, received);
}

span grad_averager_actor::impl::chunk_span(const ring_step& step, std::int32_t bucket,
                                           std::int32_t chunk) const {
  const std::int64_t n = step.flat.numel();
  const std::int64_t start = bucket * settings_.bucket_elements;
  const std::int64_t size = std::min(settings_.bucket_elements, n - start);
  auto inside = chunk_of(size, settings_.replicas, chunk);
  return {start + inside.offset, inside.size};
}

tensor grad_averager_actor::impl::copy_out(const ring_step& step, std::int32_t bucket,
                                           std::int32_t chunk) {
  // A chunk we send must not change afterwards, and our flat buffer will: copy it out.
  auto where = chunk_span(step, bucket, chunk);
  auto out = tensor::empty({where.size}, dtype::f32, settings_.on->id());
  out.set_ready(settings_.on->work().submit(
      [copy = copy_, context = settings_.on->context(), flat = step.flat, out, where] {
        copy(context, where.size * float_bytes, flat.f32() + where.offset, out.raw());
      }, reduce_label(-1)));
  return out;
}

void grad_averager_actor::impl::send_ring(std::int64_t step, std::int32_t bucket,
                                          std::int32_t phase, std::int32_t round,
                                          std::int32_t chunk, tensor data) {
  ring_msg message{step, settings_.layer_index, bucket, phase, round, chunk, std::move(data)};
  if (settings_.next)
    self_->send(settings_.next, std::move(message));
  else
    outbox_.push_back(std::move(message));
}

void grad_averager_actor::impl::connect(caf::actor next) {
  settings_.next = std::move(next);
  for (auto& message : outbox_) self_->send(settings_.next, std::move(message));
  outbox_.clear();
}

void grad_averager_actor::impl::finish_if_done(std::int64_t step_index) {
  auto it = ring_.find(step_index);
  if (it == ring_.end() || it->second.buckets_left > 0) return;
  auto step = std::move(it->second);
  ring_.erase(it);
  if (sharded()) {
    step.flat.set_ready(settings_.on->work().last());
    shard_msg gathered{step_index, settings_.layer_index, shard_msg::gathered, std::move(step.flat),
                       {}};
    stamp(gathered, self_->track_, sink_track_, "gathered", bytes_of(gathered.flat));
    self_->send(settings_.sink, std::move(gathered));
    return;
  }
  // Unflatten: one view per parameter, shaped like the local gradients, ready once
  // everything this step submitted has run.
  std::vector<tensor> sums;
  std::int64_t offset = 0;
  for (const auto& shape : step.shapes) {
    sums.push_back(step.flat.view(offset, shape));
    offset += element_count(shape);
  }
  auto done = settings_.on->work().last();
  for (auto& s : sums) s.set_ready(done);
  self_->send(settings_.sink, weight_grads_msg{step_index, settings_.layer_index, settings_.replica,
                                               std::move(sums)});
}

void grad_averager_actor::impl::hand_reduced(std::int64_t step_index) {
  auto& step = ring_.at(step_index);
  std::vector<std::int64_t> spans;
  for (std::int32_t b = 0; b < static_cast<std::int32_t>(step.processed.size()); ++b) {
    auto where = chunk_span(step, b, owned_chunk());
    spans.push_back(where.offset);
    spans.push_back(where.size);
  }
  auto flat = step.flat;
  flat.set_ready(settings_.on->work().last());
  shard_msg reduced{step_index, settings_.layer_index, shard_msg::reduced, std::move(flat),
                    std::move(spans)};
  stamp(reduced, self_->track_, sink_track_, "reduced", bytes_of(reduced.flat));
  self_->send(settings_.sink, std::move(reduced));
}

void grad_averager_actor::impl::start_gather(shard_msg& updated) {
  auto it = ring_.find(updated.step);
  if (!sharded() || updated.stage != shard_msg::updated || it == ring_.end() ||
      it->second.reduced_left > 0 || it->second.gathering)
    throw std::logic_error(settings_.name + ": unexpected shard message (step " +
                           std::to_string(updated.step) + ", stage " +
                           std::to_string(updated.stage) + ")");
  auto& step = it->second;
  if (updated.flat.numel() != step.flat.numel())
    throw std::logic_error(settings_.name + ": updated parameters of " +
                           std::to_string(updated.flat.numel()) + " floats, expected " +
                           std::to_string(step.flat.numel()));
  // The optimizer handed the buffer over: we write the chunks others own into it, and
  // send views of ours, which nobody writes again.
  step.flat = std::move(updated.flat);
  step.gathering = true;
  const auto buckets = static_cast<std::int32_t>(step.processed.size());
  for (std::int32_t b = 0; b < buckets; ++b) {
    auto where = chunk_span(step, b, owned_chunk());
    auto mine = step.flat.view(where.offset, {where.size});
    mine.set_ready(step.flat.ready());
    send_ring(updated.step, b, 1, 0, owned_chunk(), std::move(mine));
  }
  for (std::int32_t b = 0; b < buckets; ++b) take_pending(updated.step, b);
  finish_if_done(updated.step);
}

}  // namespace troupe

namespace troupe {

TROUPE_REGISTER_ACTOR_KIND(
    "averager", "sums one layer's gradients over the replicas (method: central | ring)",
    [](const actor_plan& plan, spawn_context& context) {
      grad_averager_settings s;
      s.name = plan.name;
      s.method = to_string(plan.method);
      s.layer_index = plan.layer;
      s.replica = s.method == "ring" ? plan.replica : -1;
      s.replicas = static_cast<std::int32_t>(context.graph.replicas);
      s.bucket_elements = context.config.parallel.bucket_kib * 1024 / 4;
      s.shard_optimizer = s.method == "ring" && context.config.parallel.shard_optimizer;
      s.on = &context.devices.at(plan.device);
      return context.system.spawn<grad_averager_actor>(std::move(s));
    });

}  // namespace troupe
