// gloo_averager_actor.cpp: one layer's all-reduce through gloo, for one replica (see the
// header). The actor books; its worker thread waits and sums; results come back as
// messages, so no handler ever blocks.
#include "actors/averaging/gloo_averager_actor.hpp"

#include <cstring>
#include <stdexcept>

#include "runtime/core/transfer.hpp"
#include "troupe/check.hpp"
#include "troupe/trace.hpp"

namespace troupe {

// Note [one gloo context per layer]
// Each layer has its own gloo context over the R replicas, with its own worker thread on
// every rank (one per averager actor), rather than one context per replica shared by all
// of that replica's layers:
//  - order: gloo needs every rank to issue a context's collectives in the same order
//    (Note [gloo order] in runtime/collective/gloo_allreduce.cpp). One averager per
//    context gives that for free: its steps come in order over one wire. A shared context
//    would need the layers' averagers, which run on different devices' threads under a
//    pipeline, to agree on one global order of (step, layer) first.
//  - overlap: a shared context runs one collective at a time, so layer 3's all-reduce
//    would wait behind layer 4's; with one context per layer they run side by side, as
//    the ring's averagers do, and the averaging of late layers overlaps the backward of
//    early layers.
// The price is L x R threads (each mostly asleep in a wait) and L x R x (R - 1) loopback
// TCP connections per run, both small for the models troupe runs.

namespace {

using gloo_done_atom = caf::atom_constant<caf::atom("gloo_done")>;
using gloo_fail_atom = caf::atom_constant<caf::atom("gloo_fail")>;

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

/// The tag of a step's all-reduce of n floats (Note [gloo order]): the step and the size
/// mixed, so that ranks at different steps, or with different sizes, never match.
std::uint32_t gloo_tag(std::int64_t step, std::int64_t n) {
  auto mixed = static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ull ^
               static_cast<std::uint64_t>(n) * 0xC2B2AE3D27D4EB4Full;
  return static_cast<std::uint32_t>(mixed ^ (mixed >> 32));
}

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

gloo_averager_actor::gloo_averager_actor(caf::actor_config& config, grad_averager_settings settings)
    : device_actor(config, settings.name, settings.on),
      settings_(std::move(settings)),
      layout_(settings_.name, settings_.layer_index) {
  check_averager_settings(settings_, averaging_method::gloo);
  TROUPE_CHECK(settings_.replica >= 0 && settings_.replica < settings_.replicas,
               settings_.name << ": replica " << settings_.replica << " of " << settings_.replicas);
  TROUPE_CHECK(settings_.on->id().type == device_type::cpu,
               settings_.name << ": gloo averages host memory, but its device is "
                              << settings_.on->id().to_string());
  // Connecting starts now, on the worker's thread, while the first forward runs.
  worker_ = std::make_unique<gloo_allreduce_worker>(
      settings_.gloo, "layer_" + std::to_string(settings_.layer_index), settings_.replica,
      settings_.replicas, settings_.gloo_timeout);
}

// The worker was stopped when the actor quit (release_peers); this waits for its thread,
// unless it runs on that thread (a job's callback held the last reference to this actor).
gloo_averager_actor::~gloo_averager_actor() = default;

caf::message_handler gloo_averager_actor::handlers() {
  return {
      grads_handler([this](weight_grads_msg& message) {
        layout_.check(message, settings_.replica, settings_.replica);
        receive_local(message);
      }),
      [this](gloo_done_atom, std::int64_t step, std::int64_t start_ns, std::int64_t end_ns) {
        finish(step, start_ns, end_ns);
      },
      [this](gloo_fail_atom, std::int64_t step, const std::string& what) {
        throw std::runtime_error(settings_.name + ": step " + std::to_string(step) + ": " + what);
      },
  };
}

void gloo_averager_actor::connect(const wiring_msg& wiring) {
  auto sink = single_end(wiring.out("grads"), "grads wire out");
  sink_ = sink.peer;
  sink_track_ = sink.peer_track;
}

// Stops the worker without waiting for it: its thread may be inside an all-reduce whose
// peers quit at about the same time (their contexts closing end it), and this runs on a
// device thread that other actors need. The destructor joins.
void gloo_averager_actor::release_peers() {
  sink_ = nullptr;
  if (worker_)
    worker_->stop();
}

std::string gloo_averager_actor::role() const { return to_string(settings_.method); }

std::string gloo_averager_actor::waiting_for() const {
  std::string out;
  for (const auto& [step, state] : steps_)
    out += (out.empty() ? "" : ", ") + std::string{"step "} + std::to_string(step) +
           " (all-reduce of " + std::to_string(state.flat.numel()) + " floats as gloo rank " +
           std::to_string(settings_.replica) + " of " + std::to_string(settings_.replicas) + ")";
  return out.empty() ? "; no step in progress" : "; all-reduces in progress: " + out;
}

void gloo_averager_actor::receive_local(weight_grads_msg& message) {
  if (steps_.count(message.step) != 0)
    throw std::logic_error(layout_.describe(message) + " arrived twice");
  auto grads = arrive(message.grads, on());
  step_state step;
  std::int64_t n = 0;
  for (const auto& g : grads) {
    step.shapes.push_back(g.shape());
    n += g.numel();
  }
  // The worker waits until the gradients are written (their jobs may still be queued on
  // our stream) and, unless the layer handed them over as views of one buffer, gathers
  // them into a buffer of our own first; gloo then sums in place.
  std::function<void()> prepare;
  if (contiguous(grads)) {
    step.flat = grads.front().view(0, {n});
    prepare = [grads] {
      for (const auto& g : grads)
        g.wait_ready();
    };
  } else {
    step.flat = tensor::empty({n}, dtype::f32, on().id());
    prepare = [grads, flat = step.flat] {
      std::int64_t offset = 0;
      for (const auto& g : grads) {
        g.wait_ready();
        std::memcpy(flat.f32() + offset, g.raw(), g.bytes());
        offset += g.numel();
      }
    };
  }
  const auto step_index = message.step;
  gloo_allreduce_job job;
  job.data = step.flat.f32();
  job.elements = static_cast<std::size_t>(n);
  job.tag = gloo_tag(step_index, n);
  job.prepare = std::move(prepare);
  // A weak address: a worker holding the actor would keep it alive after it quits.
  job.done = [me = address(), step_index, flat = step.flat](const gloo_allreduce_outcome& how) {
    auto actor = caf::actor_cast<caf::actor>(me);
    if (!actor)
      return;
    if (how.ok)
      caf::anon_send(actor, gloo_done_atom::value, step_index, how.start_ns, how.end_ns);
    else
      caf::anon_send(actor, gloo_fail_atom::value, step_index, how.error);
  };
  steps_.emplace(step_index, std::move(step));
  worker_->submit(std::move(job));
}

void gloo_averager_actor::finish(std::int64_t step_index, std::int64_t start_ns,
                                 std::int64_t end_ns) {
  auto it = steps_.find(step_index);
  if (it == steps_.end())
    throw std::logic_error(settings_.name + ": gloo finished step " + std::to_string(step_index) +
                           ", which is not in progress");
  auto step = std::move(it->second);
  steps_.erase(it);
  if (trace::enabled()) {
    // The all-reduce as a span on this averager's track. It ran on the worker's thread,
    // which records nothing itself: its steady_clock times move to the recorder's clock.
    const auto offset = trace::now_ns() - steady_ns();
    trace::event e;
    e.type = trace::event_type::handle;
    e.name = "allreduce";
    e.start_ns = start_ns + offset;
    e.duration_ns = end_ns - start_ns;
    e.track = track();
    e.peer = track();
    e.step = step_index;
    e.replica = settings_.replica;
    e.bytes = static_cast<std::int64_t>(step.flat.bytes());
    trace::record(e);
  }
  // Unflatten: one view per parameter, shaped like the local gradients. The worker wrote
  // them before its message was sent, so they are ready now.
  std::vector<tensor> sums;
  std::int64_t offset = 0;
  for (const auto& shape : step.shapes) {
    sums.push_back(step.flat.view(offset, shape));
    sums.back().set_ready(event{});
    offset += element_count(shape);
  }
  weight_grads_msg out{step_index, settings_.layer_index, settings_.replica, std::move(sums),
                       trace_stamp{}};
  stamp_send(out, sink_track_, "grads", bytes_of(out.grads));
  send(sink_, std::move(out));
}

}  // namespace troupe
