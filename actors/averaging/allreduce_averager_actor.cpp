// allreduce_averager_actor.cpp: the averager above a collective backend (see the header).
// The actor books: flattening is a job on its device, the sums are its backend's, and what
// it hands its optimizer carries the event after which it is written.
#include "actors/averaging/allreduce_averager_actor.hpp"

#include <optional>
#include <stdexcept>

#include "runtime/core/transfer.hpp"
#include "troupe/check.hpp"
#include "troupe/trace.hpp"

namespace troupe {

namespace {

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

/// The event after which every tensor of `ts` is written, if one of theirs is: they are
/// all of one stream (or already written), so the latest of their events.
std::optional<event> one_event(const std::vector<tensor>& ts) {
  event latest;
  for (const auto& t : ts) {
    const auto& e = t.ready();
    if (!e.owner)
      continue;
    if (latest.owner && latest.owner != e.owner)
      return std::nullopt;
    if (!latest.owner || e.sequence > latest.sequence)
      latest = e;
  }
  return latest;
}

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

allreduce_averager_actor::allreduce_averager_actor(caf::actor_config& config,
                                                   grad_averager_settings settings)
    : device_actor(config, settings.name, settings.on),
      settings_(std::move(settings)),
      layout_(settings_.name, settings_.layer_index) {
  TROUPE_CHECK(settings_.method == averaging_method::ring ||
                   settings_.method == averaging_method::gloo,
               settings_.name << ": an all-reduce averager with method '"
                              << to_string(settings_.method) << "'");
  check_averager_settings(settings_, settings_.method);
  TROUPE_CHECK(settings_.replica >= 0 && settings_.replica < settings_.replicas,
               settings_.name << ": replica " << settings_.replica << " of " << settings_.replicas);
  copy_ = kernels::lookup<kernels::ops::copy>(settings_.on->id().type);
  scale_ = kernels::lookup<kernels::ops::scale>(settings_.on->id().type);
  backend_ = make_collective_backend(*this);
  TROUPE_CHECK(!sharded() || backend_->shards(),
               settings_.name << ": the " << backend_->name() << " backend cannot shard");
}

// The backend was stopped when the actor quit (release_peers); a gloo backend's destructor
// waits for its thread, unless it runs on that thread.
allreduce_averager_actor::~allreduce_averager_actor() = default;

caf::message_handler allreduce_averager_actor::handlers() {
  return {
      grads_handler([this](weight_grads_msg& message) {
        layout_.check(message, settings_.replica, settings_.replica);
        receive_local(message);
      }),
      [this](ring_msg& message) {
        if (deferred_until_ready(message, {&message.data}))
          return;
        micro_tag tag;  // the trace shows the chunk where a micro-batch would be
        tag.step = message.step;
        tag.microbatch = message.chunk;
        auto span = handling_span("ring", message.trace, tag, bytes_of(message.data));
        backend_->receive(message);
      },
      [this](shard_msg& message) {
        if (deferred_until_ready(message, {&message.flat}))
          return;
        const bool average = local() && message.stage == shard_msg::average;
        auto span = handling_span(average ? "average" : "updated", message.trace, message.step, 0,
                                  bytes_of(message.flat));
        if (average) {
          if (!parameter_averages_.insert(message.step).second)
            throw std::logic_error(settings_.name + ": parameters of step " +
                                   std::to_string(message.step) + " sent to average twice");
          // Each rank's share of the mean, scaled while the buffer is still only ours: once
          // the backend has it, peers read it in place until the step is over.
          std::vector<tensor> share{std::move(message.flat)};
          scale(message.step, share, 1.0f / static_cast<float>(settings_.replicas));
          backend_->all_reduce(message.step, std::move(share[0]));
          return;
        }
        if (!sharded() || message.stage != shard_msg::updated)
          throw std::logic_error(settings_.name + ": unexpected shard message (step " +
                                 std::to_string(message.step) + ", stage " +
                                 std::to_string(message.stage) + ")");
        backend_->all_gather(message.step, std::move(message.flat));
      },
      [this](collective_done_atom, std::int64_t step, std::int64_t start_ns, std::int64_t end_ns) {
        backend_->completed(step, start_ns, end_ns);
      },
      [this](collective_fail_atom, std::int64_t step, const std::string& what) {
        throw std::runtime_error(settings_.name + ": step " + std::to_string(step) + ": " + what);
      },
  };
}

void allreduce_averager_actor::connect(const wiring_msg& wiring) {
  auto sink = single_end(wiring.out("grads"), "grads wire out");
  sink_ = sink.peer;
  sink_track_ = sink.peer_track;
  backend_->connect(wiring);
}

void allreduce_averager_actor::release_peers() {
  sink_ = nullptr;
  backend_->release();
}

std::string allreduce_averager_actor::role() const { return to_string(settings_.method); }

std::string allreduce_averager_actor::waiting_for() const { return backend_->waiting_for(); }

job_label allreduce_averager_actor::reduce_job(std::int64_t step, std::int64_t values) const {
  auto label = job_for_step(job_kind::reduce, step, settings_.replica);
  label.bytes = values * static_cast<std::int64_t>(sizeof(float));
  return label;
}

void allreduce_averager_actor::send_to_peer(const caf::actor& peer, std::uint32_t track,
                                            ring_msg message) {
  // Stamped now, as every send is: a trace's transit for the ring includes the wait for
  // the chunk's job, as it does for an activation.
  stamp_send(message, track, "ring", bytes_of(message.data));
  send_written(peer, std::move(message));
}

void allreduce_averager_actor::receive_local(weight_grads_msg& message) {
  if (local()) {
    pass_on(message);
    return;
  }
  if (shapes_.count(message.step) != 0)
    throw std::logic_error(layout_.describe(message) + " arrived twice");
  auto grads = arrive(message.grads, on());
  std::vector<shape_t> shapes;
  std::int64_t n = 0;
  for (const auto& g : grads) {
    shapes.push_back(g.shape());
    n += g.numel();
  }
  shapes_.emplace(message.step, std::move(shapes));
  auto flat = flatten(message.step, std::move(grads), n);
  if (sharded())
    backend_->reduce_scatter(message.step, std::move(flat));
  else
    backend_->all_reduce(message.step, std::move(flat));
}

// The layer hands its gradients over as views of one buffer (see weight_grads_msg), which
// the backend then sums in place; anything else is copied into a buffer of our own first.
tensor allreduce_averager_actor::flatten(std::int64_t step, std::vector<tensor> grads,
                                         std::int64_t n) {
  auto& work = on().work();
  for (const auto& g : grads)
    work.wait_for(g.ready());
  const auto written = one_event(grads);
  if (contiguous(grads) && written) {
    auto flat = grads.front().view(0, {n});
    flat.set_ready(*written);
    return flat;
  }
  auto flat = tensor::empty({n}, dtype::f32, on().id());
  flat.set_ready(work.submit(
      [copy = copy_, context = on().context(), flat, grads = std::move(grads)] {
        std::int64_t offset = 0;
        for (const auto& g : grads) {
          copy(context, static_cast<std::int64_t>(g.bytes()), g.raw(), flat.f32() + offset);
          offset += g.numel();
        }
      },
      reduce_job(step, n)));
  return flat;
}

// Note [local SGD]
// averaging = "local_sgd" (Stich 2019; Lin et al. 2020): each replica's optimizer steps on
// its replica's own gradients, and after every H-th step ([parallel] sync_every) the
// replicas' parameters are replaced by their mean; optimizer state stays each replica's.
// The wiring is the ring's (or gloo's): between syncs this averager scales the layer's
// gradients by R and passes them on, nothing crossing between replicas; on a sync step its
// optimizer sends the updated parameters here (shard_msg::average), this averager scales
// them by 1 / R (before the backend has them: once it does, the ring's peers read the
// buffer in place, so nothing may write it again), the backend sums them over the ranks
// exactly as it would gradients, and the mean goes back (averaged) as the optimizer's next
// version. The layers wait for that version, so a sync costs one all-reduce of the
// parameters every H steps instead of one of the gradients every step.
// Why R: the loss scales each micro-batch by 1 / global batch, so a replica's gradients are
// the sum over its rows / B; times R it is its share's mean when shares are equal. More to
// the point, SGD is linear in the gradient: the mean over replicas of w - lr * R * g_r is
// w - lr * sum_r g_r, synchronous data parallelism's step whatever the shares, and the mean
// of the replicas' momentum buffers follows the synchronous momentum the same way. So with
// H = 1 and SGD (momentum, Nesterov and weight decay included) local SGD is synchronous DP
// up to summation order, which tests/actors/averaging/local_sgd_test.cpp checks; Adam is
// not linear, and its replicas' moments diverge between syncs as in the papers.
// The optimizer also syncs at the run's last step and at the end of every evaluated epoch
// (optimizer_actor::syncs_after), so what is evaluated, exported or trained on after the
// run is one model, the mean. DiLoCo sends deltas instead (Note [DiLoCo] in
// actors/training/optimizer_actor.cpp); this averager does the same for both.
void allreduce_averager_actor::pass_on(weight_grads_msg& message) {
  auto grads = arrive(message.grads, on());
  scale(message.step, grads, static_cast<float>(settings_.replicas));
  weight_grads_msg out{message.step, settings_.layer_index, settings_.replica, std::move(grads),
                       trace_stamp{}};
  stamp_send(out, sink_track_, "grads", bytes_of(out.grads));
  send(sink_, std::move(out));
}

void allreduce_averager_actor::scale(std::int64_t step, std::vector<tensor>& ts, float alpha) {
  auto& work = on().work();
  std::int64_t n = 0;
  for (const auto& t : ts) {
    work.wait_for(t.ready());
    n += t.numel();
  }
  const auto done = work.submit(
      [scale = scale_, context = on().context(), ts, alpha] {
        for (const auto& t : ts)
          scale(context, t.numel(), alpha, t.f32());
      },
      reduce_job(step, n));
  for (auto& t : ts)
    t.set_ready(done);
}

void allreduce_averager_actor::all_reduced(std::int64_t step, tensor flat, std::int64_t start_ns,
                                           std::int64_t end_ns) {
  const bool average = parameter_averages_.erase(step) != 0;
  auto found = shapes_.find(step);
  TROUPE_CHECK(average || found != shapes_.end(),
               settings_.name << ": sums of step " << step << ", which is not in progress");
  if (end_ns > 0 && trace::enabled()) {
    // The collective as a span on this averager's track. It ran on another thread, which
    // records nothing itself: its steady_clock times move to the recorder's clock.
    const auto offset = trace::now_ns() - steady_ns();
    trace::event e;
    e.type = trace::event_type::handle;
    e.name = "allreduce";
    e.start_ns = start_ns + offset;
    e.duration_ns = end_ns - start_ns;
    e.track = track();
    e.peer = track();
    e.step = step;
    e.replica = settings_.replica;
    e.bytes = static_cast<std::int64_t>(flat.bytes());
    trace::record(e);
  }
  if (average) {
    shard_msg averaged{step, settings_.layer_index, shard_msg::averaged, std::move(flat),
                       {},   trace_stamp{}};
    stamp_send(averaged, sink_track_, "averaged", bytes_of(averaged.flat));
    send(sink_, std::move(averaged));
    return;
  }
  auto shapes = std::move(found->second);
  shapes_.erase(found);
  // Unflatten: one view per parameter, shaped like the local gradients, ready with `flat`.
  std::vector<tensor> sums;
  std::int64_t offset = 0;
  for (const auto& shape : shapes) {
    sums.push_back(flat.view(offset, shape));
    sums.back().set_ready(flat.ready());
    offset += element_count(shape);
  }
  weight_grads_msg out{step, settings_.layer_index, settings_.replica, std::move(sums),
                       trace_stamp{}};
  stamp_send(out, sink_track_, "grads", bytes_of(out.grads));
  send(sink_, std::move(out));
}

void allreduce_averager_actor::reduce_scattered(std::int64_t step, tensor flat,
                                                const std::vector<flat_span>& owned) {
  std::vector<std::int64_t> spans;
  for (const auto& where : owned) {
    spans.push_back(where.offset);
    spans.push_back(where.size);
  }
  shard_msg reduced{step, settings_.layer_index, shard_msg::reduced, std::move(flat),
                    std::move(spans), trace_stamp{}};
  stamp_send(reduced, sink_track_, "reduced", bytes_of(reduced.flat));
  send(sink_, std::move(reduced));
}

void allreduce_averager_actor::all_gathered(std::int64_t step, tensor flat) {
  shapes_.erase(step);
  shard_msg gathered{step, settings_.layer_index, shard_msg::gathered, std::move(flat), {},
                     trace_stamp{}};
  stamp_send(gathered, sink_track_, "gathered", bytes_of(gathered.flat));
  send(sink_, std::move(gathered));
}

}  // namespace troupe
