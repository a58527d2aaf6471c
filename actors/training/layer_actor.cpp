// layer_actor.cpp: forward, backward, parameter versions and credits of one layer.
#include "actors/training/layer_actor.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>

#include "actors/base/actor_kinds.hpp"
#include "actors/training/bf16_versions.hpp"
#include "runtime/config/precision.hpp"
#include "runtime/core/transfer.hpp"
#include "troupe/inputs.hpp"

namespace troupe {

layer_actor::layer_actor(caf::actor_config& config, std::shared_ptr<layer_actor_settings> settings)
    : device_actor(config, settings->name, settings->on), settings_(std::move(settings)) {
  output_shape_ = settings_->math->output_shape(settings_->input_shape);
  has_params_ = !settings_->math->parameters(settings_->input_shape).empty();
  settings_->math->bind(settings_->on->id().type);
  if (!has_params_)
    version_ = std::numeric_limits<std::int64_t>::max();  // any version will do
  if (settings_->fused != nullptr) {
    for (const auto& m : settings_->fused->members())
      if (m.params > 0)
        members_.push_back(member_port{&m, nullptr, 0, -1});
    params_.resize(settings_->math->parameters(settings_->input_shape).size());
  }
  split_ = settings_->split_backward && has_params_ && settings_->math->splits_backward();
  add_ = kernels::lookup<kernels::ops::add>(settings_->on->id().type);
  axpy_ = kernels::lookup<kernels::ops::axpy>(settings_->on->id().type);
  if (settings_->sequencer != nullptr) {
    // Weak: the sequencer lives as long as the settings this actor owns.
    auto wake = [me = caf::actor_cast<caf::weak_actor_ptr>(this)] {
      if (auto strong = caf::actor_cast<caf::strong_actor_ptr>(me))
        caf::anon_send<caf::message_priority::high>(caf::actor_cast<caf::actor>(strong),
                                                    turn_atom::value);
    };
    settings_->sequencer->on_turn(settings_->stage, std::move(wake));
  }
}

layer_context layer_actor::context_for(device& on, const micro_tag& tag, std::int64_t batch,
                                       bool training) const {
  layer_context context{on.id(), on.context(), training};
  context.seed = settings_->seed;
  context.step = tag.step;
  context.layer = settings_->layer_index;
  context.replica = std::max<std::int32_t>(tag.replica, 0);
  context.first_sample =
      tag.first_sample >= 0
          ? tag.first_sample
          : (static_cast<std::int64_t>(tag.replica) * settings_->microbatches + tag.microbatch) *
                batch;
  return context;
}

fused_layer::part_trace layer_actor::parts_of(const job_label& label) const {
  return {settings_->on->work().trace_track(), label, &settings_->member_tracks};
}

std::string layer_actor::describe(const layer_actor_settings& settings, const char* pass,
                                  const micro_tag& tag, std::size_t member) {
  // A fused group's failure names the member that failed, then the group.
  const auto* fused = settings.fused;
  const bool one = fused != nullptr && member < fused->members().size();
  const auto& name = one ? fused->members()[member].name : settings.name;
  const auto type = one ? fused->members()[member].math->type() : settings.math->type();
  return name + " (" + type + ") " + pass + " of " +
         (tag.stage == phase::train ? "step " : "eval batch ") + std::to_string(tag.step) +
         ", micro-batch " + std::to_string(tag.microbatch) + ", replica " +
         std::to_string(tag.replica) + (one ? " (fused in " + settings.name + ")" : "");
}

namespace {

// A message that came back once its tensor was ready (Note [no blocking waits] in
// troupe/inputs.hpp), with the port it first came in on: sent by no one, it no longer
// says. Local only.
struct ported_activation {
  activation_msg message;
  std::int32_t port = 0;
};
struct ported_gradient {
  gradient_msg message;
  std::int32_t port = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ported_activation& x) {
  return f(caf::meta::type_name("ported_activation"), x.message, x.port);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ported_gradient& x) {
  return f(caf::meta::type_name("ported_gradient"), x.message, x.port);
}

}  // namespace

// Note [ports]
// A layer of a model beyond a chain has several activations wires in (an `add`, one per
// input) or out (one to each layer that reads it). A message does not say which wire it
// came on; its sender does, since no two wires of a layer join the same two actors
// (validate_topology refuses that). Each wire out has its own credits, returned by the
// gradient or release that comes back on it. A pass waits until every port has brought
// its part: an `add`'s forward for all its inputs, a backward for the gradients of all
// readers. Parts are summed in port order, which is the model's order in every wiring,
// so a residual model computes the same floats on one device and in a pipeline. A
// layer with one wire each way skips all of this.
template <class Ports>
std::int32_t layer_actor::port_of(const Ports& ports, std::int32_t carried) {
  if (ports.size() == 1)
    return 0;
  const auto& sender = current_sender();
  if (sender == nullptr)
    return carried;  // came back once ready
  for (std::size_t i = 0; i < ports.size(); ++i) {
    const auto& peer = [&]() -> const caf::actor& {
      if constexpr (std::is_same_v<typename Ports::value_type, in_port>)
        return ports[i].peer;
      else
        return ports[i].wire.peer();
    }();
    if (peer && peer->id() == sender->id() && peer->node() == sender->node())
      return static_cast<std::int32_t>(i);
  }
  throw std::logic_error(settings_->name + " got a message from actor " +
                         std::to_string(sender->id()) + ", which none of its wires joins");
}

bool layer_actor::gathered(std::map<pass_key, gathering>& by_key, const pass_key& key,
                           std::size_t ports, std::int32_t port, tensor part,
                           std::vector<tensor>& out) {
  auto& g = by_key[key];
  if (g.parts.empty())
    g.parts.resize(ports);
  auto& slot = g.parts.at(static_cast<std::size_t>(port));
  if (slot.defined())
    throw std::logic_error(settings_->name + " got a second message on port " +
                           std::to_string(port) + " for step " +
                           std::to_string(std::get<1>(key)) + ", micro-batch " +
                           std::to_string(std::get<2>(key)));
  slot = std::move(part);
  if (++g.count < ports)
    return false;
  out = std::move(g.parts);
  by_key.erase(key);
  return true;
}

void layer_actor::arrive_forward(activation_msg& message, std::int32_t port) {
  if (pending_input(settings_->on->id(), {&message.x}) != nullptr) {
    ported_activation later{std::move(message), port};
    // The device's idle lane may wait for it (Note [looking ahead before an idle job] in
    // runtime/core/stream.cpp), unless it will first hurry this layer's weight gradients
    // itself, having no room for its stash then (Note [split backward]).
    std::function<bool()> room;
    if (split_ && settings_->stash_limit > 0)
      room = [holding = holding_, limit = settings_->stash_limit] {
        return holding->load(std::memory_order_relaxed) < limit;
      };
    come_back_when_ready(this, &later.message.x, later,  // its event is copied out first
                         &settings_->on->work(), std::move(room));
    return;
  }
  auto span = handling_span("forward", message.trace, message.tag, bytes_of(message.x));
  pass work{std::move(message), {}, false, {}};
  if (ins_.size() > 1) {
    const auto& tag = work.activation.tag;
    std::vector<tensor> parts;
    if (!gathered(inputs_in_, pass_key{tag.stage, tag.step, tag.microbatch}, ins_.size(), port,
                  std::move(work.activation.x), parts))
      return;
    work.activation.x = std::move(parts.front());
    work.more.assign(std::make_move_iterator(parts.begin() + 1),
                     std::make_move_iterator(parts.end()));
  }
  if (work.activation.tag.stage == phase::train)
    offer_in_order(forwards_, std::move(work));
  else
    proceed(std::move(work));
}

void layer_actor::proceed(pass work) {
  if (!work.backward && work.activation.tag.version > version_) {
    waiting_.push_back(std::move(work));  // install() offers it
    return;
  }
  offer(std::move(work));
}

void layer_actor::arrive_backward(gradient_msg& message, std::int32_t port) {
  if (pending_input(settings_->on->id(), {&message.dx}) != nullptr) {
    ported_gradient later{std::move(message), port};
    come_back_when_ready<caf::message_priority::high>(this, &later.message.dx, later,
                                                      &settings_->on->work());
    return;
  }
  auto span = handling_span("backward", message.trace, message.tag, bytes_of(message.dx));
  pass work{{}, std::move(message), true, {}};
  if (outs_.size() > 1) {
    const auto& tag = work.gradient.tag;
    std::vector<tensor> parts;
    if (!gathered(gradients_in_, pass_key{tag.stage, tag.step, tag.microbatch}, outs_.size(),
                  port, std::move(work.gradient.dx), parts))
      return;
    work.gradient.dx = std::move(parts.front());
    work.more.assign(std::make_move_iterator(parts.begin() + 1),
                     std::make_move_iterator(parts.end()));
  }
  if (has_params_)
    offer_in_order(backwards_, std::move(work));
  else
    proceed(std::move(work));
}

// Note [passes in order]
// A layer's weight gradients of a step are the sum over its micro-batches, accumulated in
// the order its backwards run; float addition makes that order part of the result. Every
// schedule sends passes in micro-batch order, but they need not arrive so: a message whose
// tensor from another device is not written yet comes back later (Note [no blocking
// waits]), and the next one, written by then, can overtake it; a layer read by several
// gathers its parts over paths of different lengths (a skip wire's comes straight from a
// later stage). So a layer with parameters holds a backward that arrives early until those
// before it have gone: the same sums in the same order on every run, which a resume bit
// for bit and an ejected config's identical parameters rely on. The credit came back on
// arrival.
// Holding backwards needs forwards in order too, on every layer: a forward that overtook
// its predecessor takes the wire's credit, and with 1F1B's single credit at the last
// boundary the overtaken micro-batch then waits for a credit that comes back only with
// the overtaker's gradient, which the layers behind hold until the overtaken one's has
// gone: a deadlock (seen once in 30 runs of a 3-stage 1F1B on two loaded cores). A
// training forward that arrives early therefore waits here for those before it, which
// their senders sent first and so are on their way. Evaluation passes are not ordered.
// Only micro-batches of one step are ordered (the sums are per step; a synchronous step
// cannot start at a layer before the last one's passes reached it), so a step whose
// micro-batches never all come holds up no other.
void layer_actor::offer_in_order(in_order& gate, pass work) {
  const auto& tag = work.backward ? work.gradient.tag : work.activation.tag;
  const auto step = tag.step;
  const auto microbatch = tag.microbatch;
  auto next = gate.next.find(step);
  if (step <= gate.done_through ||
      (next != gate.next.end() && microbatch < next->second)) {  // its pass has gone:
    proceed(std::move(work));                                     // forward() or backward() says so
    return;
  }
  if (next == gate.next.end())
    next = gate.next.emplace(step, 0).first;
  if (microbatch != next->second) {  // early: held until those before it have gone
    if (gate.early.count({step, microbatch}) != 0)
      throw std::logic_error(describe(*settings_, work.backward ? "backward" : "forward", tag) +
                             " arrived twice");
    gate.early.emplace(stash_key{step, microbatch}, std::move(work));
    return;
  }
  // In turn (the usual case): it goes, then those it held up.
  for (;;) {
    if (++next->second == settings_->microbatches) {
      gate.next.erase(next);
      gate.done_through = std::max(gate.done_through, step);
      proceed(std::move(work));
      return;
    }
    proceed(std::move(work));
    auto ready = gate.early.find({step, next->second});
    if (ready == gate.early.end())
      return;
    work = std::move(ready->second);
    gate.early.erase(ready);
  }
}

caf::message_handler layer_actor::handlers() {
  return {
      [this](activation_msg& message) { arrive_forward(message, port_of(ins_, 0)); },
      [this](ported_activation& message) { arrive_forward(message.message, message.port); },
      [this](gradient_msg& message) {
        // Note [credits back on arrival]
        // A gradient returns its wire's credit when it arrives, before its tensor is
        // written: the reader sent it as it submitted its backward, so its stash is freed
        // by a job already in its stream, ahead of any forward the credit lets in. The next
        // forward then reaches the reader while that backward runs, instead of a hand-over
        // after it ends and another after the gradient is read: 1F1B's order on the reader
        // (it runs in its stream's order) with no gap for an idle-lane job (a zero-bubble
        // weight gradient) to fill and the forward to wait behind.
        const auto port = port_of(outs_, 0);
        auto& out = outs_.at(static_cast<std::size_t>(port));
        out.wire.release(this);
        record_counter("credits", out.track, out.wire.in_flight());
        arrive_backward(message, port);
      },
      [this](ported_gradient& message) { arrive_backward(message.message, message.port); },
      [this](resume_atom) {
        resume_requested_ = false;
        drain();
      },
      [this](turn_atom) { take_turns(); },
      [this](written_atom) {  // Note [split backward]
        if (unwritten_.empty())
          return;
        auto out = std::move(unwritten_.front());
        unwritten_.pop_front();
        stamp_send(out, grad_sink_track_, "grads", bytes_of(out.grads));
        send_written(grad_sink_, std::move(out));
      },
      [this](release_msg& message) {
        auto span = handling_span("release", message.trace, message.tag, 0);
        auto& out = outs_.at(static_cast<std::size_t>(port_of(outs_, 0)));
        out.wire.release(this);
        record_counter("credits", out.track, out.wire.in_flight());
      },
      [this](params_msg& message) {
        if (deferred_until_ready(message, message.params))
          return;
        auto span = handling_span("params", message.trace, message.version, 0,
                                  bytes_of(message.params));
        install(message);
      },
  };
}

std::string layer_actor::role() const {
  return settings_->math->type();
}

std::string layer_actor::waiting_for() const {
  std::string s = ": parameter version " +
                  (has_params_ ? std::to_string(version_) : std::string{"-"});
  if (!waiting_.empty())
    s += "; " + std::to_string(waiting_.size()) + " forward(s) waiting for parameter version " +
         std::to_string(waiting_.front().activation.tag.version) + " from its optimizer";
  std::string readers;
  for (const auto& out : outs_) {
    readers += (readers.empty() ? "" : ", ") + out.name;
    if (out.wire.waiting() > 0)
      s += "; " + std::to_string(out.wire.waiting()) +
           " activation(s) waiting for a credit on the wire to " + out.name + " (capacity " +
           std::to_string(out.wire.capacity()) + ", " + std::to_string(out.wire.in_flight()) +
           " in flight, released by gradients from " + out.name + ")";
    else if (out.wire.in_flight() > 0)
      s += "; " + std::to_string(out.wire.in_flight()) + " micro-batch(es) sent to " + out.name +
           " not released yet";
  }
  auto partial = [&](const std::map<pass_key, gathering>& by_key, const char* what,
                     const auto& ports) {
    if (by_key.empty())
      return;
    const auto& [key, g] = *by_key.begin();
    std::string missing;
    for (std::size_t i = 0; i < g.parts.size(); ++i)
      if (!g.parts[i].defined())
        missing += (missing.empty() ? "" : ", ") + ports[i].name;
    s += "; " + std::to_string(by_key.size()) + " micro-batch(es) with some " + what +
         " still to come (first: step " + std::to_string(std::get<1>(key)) + ", micro-batch " +
         std::to_string(std::get<2>(key)) + ", waiting for " + missing + ")";
  };
  partial(inputs_in_, "inputs", ins_);
  partial(gradients_in_, "gradients", outs_);
  if (!stash_.empty())
    s += "; holds " + std::to_string(stash_.size()) + " micro-batch(es) waiting for their gradient from " +
         readers + " (first: step " + std::to_string(std::get<0>(stash_.begin()->first)) +
         ", micro-batch " + std::to_string(std::get<1>(stash_.begin()->first)) + ")";
  auto held_back = [&](const in_order& gate, const char* what) {
    if (gate.early.empty())
      return;
    const auto step = std::get<0>(gate.early.begin()->first);
    auto next = gate.next.find(step);
    s += "; " + std::to_string(gate.early.size()) + " " + what + "(s) held until that of step " +
         std::to_string(step) + ", micro-batch " +
         std::to_string(next == gate.next.end() ? 0 : next->second) + " arrives";
  };
  held_back(forwards_, "forward");
  held_back(backwards_, "backward");
  if (!queued_.empty())
    s += "; " + std::to_string(queued_.size()) + " pass(es) queued behind its last job";
  if (!parked_.empty()) {
    const auto& first = parked_.front();
    const auto& tag = first.backward ? first.gradient.tag : first.activation.tag;
    s += "; " + std::to_string(parked_.size()) + " pass(es) waiting for their turn (first: " +
         (first.backward ? "backward" : "forward") + " of step " + std::to_string(tag.step) +
         ", micro-batch " + std::to_string(tag.microbatch) + "; " +
         settings_->sequencer->describe() + ")";
  }
  auto pending = std::count_if(weight_jobs_.begin(), weight_jobs_.end(),
                               [](const event& e) { return !e.reached(); });
  if (pending > 0)
    s += "; " + std::to_string(pending) + " weight gradient(s) waiting for the device to idle";
  return s;
}

void layer_actor::connect(const wiring_msg& wiring) {
  auto out = wiring.out("activations");
  auto in = wiring.in("activations");
  TROUPE_CHECK(!out.empty() && !in.empty(),
               settings_->name << " needs activations wires in and out");
  for (const auto& end : in)
    // Layers (and custom actors between layers) need dx; the data loader only the credit.
    ins_.push_back(in_port{end.peer, end.peer_name, end.peer_track,
                           end.peer_kind != "data_loader"});
  for (const auto& end : out) {
    outs_.emplace_back();
    outs_.back().wire.connect(end);
    outs_.back().name = end.peer_name;
    outs_.back().track = end.peer_track;
  }
  merges_ = ins_.size() > 1;
  TROUPE_CHECK(!merges_ || settings_->math->sums_inputs(),
               settings_->name << " (" << settings_->math->type() << ") has " << ins_.size()
                               << " activations wires in; only a layer that sums its inputs "
                                  "reads several");
  auto grads = wiring.out("grads");
  if (settings_->fused != nullptr) {  // one grads wire a member with parameters, in order
    TROUPE_CHECK(grads.size() == members_.size(), settings_->name << " needs " << members_.size()
                                                                  << " grads wires, not "
                                                                  << grads.size());
    for (std::size_t i = 0; i < grads.size(); ++i) {
      members_[i].sink = grads[i].peer;
      members_[i].sink_track = grads[i].peer_track;
    }
    return;
  }
  TROUPE_CHECK(grads.size() == (has_params_ ? 1u : 0u),
               settings_->name << " needs " << (has_params_ ? "one grads wire" : "no grads wire"));
  if (has_params_) {
    grad_sink_ = grads[0].peer;
    grad_sink_track_ = grads[0].peer_track;
  }
}

void layer_actor::release_peers() {
  for (auto& in : ins_)
    in.peer = nullptr;
  grad_sink_ = nullptr;
  for (auto& m : members_)
    m.sink = nullptr;
}

// Note [one job at a time]
// A stream runs jobs in submission order, whoever submitted them. If this actor
// submitted the forwards of all M micro-batches it has been sent at once, the next
// layer's forward of micro-batch 0 would queue behind them, and the next pipeline stage
// would get micro-batch 0 only when this stage had done all M: no pipelining. So each
// layer keeps at most one of its jobs in its stream: the next waits here until the last
// one has run (backward before forward, as 1F1B wants), and the stream interleaves the
// layers of a stage micro-batch by micro-batch. A run without queueing pays nothing.
void layer_actor::admit(pass work) {
  queued_.push_back(std::move(work));
  drain();
}

void layer_actor::drain() {
  while (!queued_.empty() && last_job_.reached()) {
    // Backward first, as 1F1B wants; but a layer whose stage takes its turns keeps the
    // order its sequencer admitted them in.
    auto it = settings_->sequencer != nullptr
                  ? queued_.begin()
                  : std::find_if(queued_.begin(), queued_.end(),
                                 [](const pass& p) { return p.backward; });
    if (it == queued_.end())
      it = queued_.begin();
    auto work = std::move(*it);
    queued_.erase(it);
    if (work.backward) {
      backward(work);
    } else {
      if (work.activation.tag.stage == phase::train)
        make_room();
      forward(work);
    }
  }
  if (!queued_.empty() && !resume_requested_) {
    resume_requested_ = true;
    last_job_.then([me = caf::actor_cast<caf::actor>(this)] {
      caf::anon_send<caf::message_priority::high>(me, resume_atom::value);
    });
  }
}

// A pass that must wait for its stage's turn on an interleaved device (the forward of a
// stage's first layer, the backward of its last; training only) is parked until the
// sequencer admits it; everything else goes on at once.
void layer_actor::offer(pass work) {
  const auto& s = *settings_;
  const bool training = work.backward || work.activation.tag.stage == phase::train;
  const bool gated = work.backward ? s.last_of_stage : s.first_of_stage;
  if (s.sequencer == nullptr || !training || !gated) {
    admit(std::move(work));
    return;
  }
  parked_.push_back(std::move(work));
  take_turns();
}

void layer_actor::take_turns() {
  auto& sequencer = *settings_->sequencer;
  for (bool progress = true; progress;) {
    progress = false;
    for (auto it = parked_.begin(); it != parked_.end(); ++it) {
      const auto& tag = it->backward ? it->gradient.tag : it->activation.tag;
      bool turn = it->backward ? sequencer.try_backward(tag.step, settings_->stage, tag.microbatch)
                               : sequencer.try_forward(tag.step, settings_->stage, tag.microbatch);
      if (turn) {
        auto work = std::move(*it);
        parked_.erase(it);
        admit(std::move(work));
        progress = true;
        break;
      }
    }
  }
}

void layer_actor::send_release(const micro_tag& tag) {
  for (const auto& in : ins_) {
    release_msg release{tag};
    stamp_send(release, in.track, "release", 0);
    // The loader takes a credit by the tag's replica, so on another process of this
    // machine it takes it from shared memory; a layer finds the wire by its sender, which
    // a message from there has not (Note [messages through shared memory]).
    if (!in.wants_dx)
      send_written<caf::message_priority::high>(in.peer, std::move(release));
    else
      send<caf::message_priority::high>(in.peer, std::move(release));
  }
}

tensor layer_actor::summed(std::vector<tensor> parts, const micro_tag& tag, const char* job) {
  auto& device = *settings_->on;
  for (auto& part : parts)
    part = arrive(part, device, job_for(job_kind::copy, tag));
  if (parts.size() == 1)
    return parts.front();
  for (auto& part : parts)  // summed in f32 (Note [bf16 activations])
    part = in_dtype(part, dtype::f32, device, job_for(job_kind::convert, tag));
  auto sum = tensor::empty(parts.front().shape(), dtype::f32, device.id());
  auto done = device.work().submit(
      [parts, sum, add = add_, axpy = axpy_, on = &device] {
        // The first two in one pass (a copy then an axpy was two, 3% of char_lm's step),
        // the same sums in the same order: parts[0] + parts[1], then + each further part.
        const auto& context = on->context();
        add(context, sum.numel(), parts[0].f32(), parts[1].f32(), sum.f32());
        for (std::size_t k = 2; k < parts.size(); ++k)
          axpy(context, sum.numel(), 1.0f, parts[k].f32(), sum.f32());
      },
      job_for(job, tag));
  sum.set_ready(done);
  last_job_ = done;
  return sum;
}

void layer_actor::install(params_msg& message) {
  auto params = arrive(message.params, *settings_->on);
  if (members_.empty()) {
    params_ = in_precision(params, 0, message.version);
    version_ = message.version;
  } else {
    // A fused group: the member's slots, and the version all members hold.
    auto it = std::find_if(members_.begin(), members_.end(), [&](const member_port& m) {
      return m.member->index == message.layer;
    });
    TROUPE_CHECK(it != members_.end() && params.size() == it->member->params,
                 settings_->name << " got parameters for layer " << message.layer
                                 << ", not one of its members'");
    const auto first = it->member->first_param;
    params = in_precision(params, first, message.version);
    std::copy(params.begin(), params.end(), params_.begin() + static_cast<std::ptrdiff_t>(first));
    it->version = message.version;
    version_ = std::min_element(members_.begin(), members_.end(),
                                [](const member_port& a, const member_port& b) {
                                  return a.version < b.version;
                                })->version;
  }
  while (!waiting_.empty() && waiting_.front().activation.tag.version <= version_) {
    auto next = std::move(waiting_.front());
    waiting_.pop_front();
    offer(std::move(next));
  }
}

// Note [bf16 parameters]
// Under [run] precision = "bf16" a layer's bf16_parameters() reach its forward and backward
// rounded to bfloat16. The optimizer keeps the fp32 masters, updates them with fp32
// gradients and writes them to checkpoints, and rounds each new version once, by one job on
// its device before it sends the version (in_layer_precision, actors/training/
// bf16_versions.hpp): the parameter wires carry 2 bytes a rounded element instead of 4, and
// every replica and pass of the version reads the same rounded copy. Rounding never
// accumulates: each version is rounded from the exact master, as PyTorch's autocast rounds
// a weight from its fp32 value, so a checkpoint of a bf16 run resumes in bf16 bit for bit,
// or in fp32. A layer makes do with what arrives: a parameter it computes with in bf16
// that came as f32 (an optimizer of another precision setting, a test's) is rounded here,
// and one it computes with in f32 that came as bf16 is widened, by one job on the layer's
// device that runs before any pass of that version (stream order).
std::vector<tensor> layer_actor::in_precision(const std::vector<tensor>& params, std::size_t first,
                                              std::int64_t version) {
  event done;
  auto out = in_layer_precision(params, settings_->bf16_params, first, *settings_->on,
                                job_for_step(job_kind::convert, version), &done);
  if (done.owner != nullptr)
    last_job_ = done;
  return out;
}

// Note [split backward]
// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023) splits a layer's backward
// into the input gradient, which the previous stage waits for, and the weight gradient,
// which nobody needs until the step's optimizer. Here the first is a main-lane job whose
// dx goes back at once, as an unsplit backward's does; the second goes to the device's
// idle lane (Note [idle lane] in runtime/core/stream.cpp), so it runs when the device
// would otherwise wait for its neighbours. Until it has run, the micro-batch's saved
// activations stay alive: in 1F1B's order (its turns, Note [zero-bubble turns] in
// runtime/model/interleaved_schedule.hpp, or its credits where a replica's stages share a
// device) a stage holds P - s micro-batches waiting
// for their gradient, and with deferred weight gradients up to stash_limit (P: 1F1B's
// peak, at stage 0) waiting for either. A forward that would exceed it first hurries the
// oldest weight gradients into the main lane, ahead of itself. The weight gradients of a
// step run in backward order, each accumulating into the step's buffer; the grads go to
// the optimizer once the last one has run (the optimizer, on this device, would trust
// the stream's order instead, which the idle lane does not keep).
std::int64_t layer_actor::held() {
  while (!weight_jobs_.empty() && weight_jobs_.front().reached())
    weight_jobs_.pop_front();
  return static_cast<std::int64_t>(stash_.size() + weight_jobs_.size());
}

void layer_actor::make_room() {
  const auto limit = settings_->stash_limit;
  if (!split_ || limit <= 0)
    return;
  auto over = held() + 1 - limit;  // after this forward
  if (over <= 0 || weight_jobs_.empty())
    return;
  auto index = static_cast<std::size_t>(
      std::min<std::int64_t>(over, static_cast<std::int64_t>(weight_jobs_.size())));
  settings_->on->work().hurry(weight_jobs_[index - 1]);
}

// Note [bf16 activations]
// In a bf16 run the activations between layers, and their gradients, travel and are kept in
// bf16 where the layers on both sides work in it: half the bytes on every wire, in every
// stash and in every elementwise pass. Each layer says how (layer::activations(),
// include/troupe/layer.hpp): `made` (linear, conv2d computing in bf16) rounds its f32 result
// once into a bf16 y, and takes x in either dtype; `kept` (relu, max pooling, reshapes on a
// CPU) gives y x's dtype, selecting or moving bits exactly; `none` (the default, and every
// layer of an fp32 run) works in f32. The actor applies three rules:
// - x reaches the layer in the dtype it takes (input_dtype): a bf16 x sent to a layer that
//   does not take it is widened, exactly, by a convert job on arrival;
// - y is allocated in the layer's output_dtype; a `made` y is bf16 only where every actor
//   reading it takes bf16 (bf16_readers_of, once per run from the topology), so that a
//   linear layer before a gelu or the loss puts out f32 as before instead of rounding what
//   its reader would widen again;
// - dy is given in y's dtype (a gradient of an f32 reader is rounded on arrival, as the
//   layer itself rounded dy before) and dx is allocated in x's dtype as the layer took it;
//   several readers' gradients are summed in f32, as are an `add`'s inputs.
// Every rule depends on the model and the device type only, not on the wiring, so every
// wiring rounds the same values: DP, PP and fused runs stay equal to one device (a fused
// layer applies the rules between its members, runtime/model/fused_layer.cpp). As PyTorch's
// autocast, a linear layer's bf16 output is its f32 sum rounded once; what troupe adds is
// that the rounded values are what moves. The loss and the parameter gradients stay f32.
void layer_actor::forward(pass& work) {
  auto& message = work.activation;
  const auto& tag = message.tag;
  if (has_params_ && tag.version != version_)
    throw std::logic_error(describe(*settings_, "forward", tag) + " needs parameter version " +
                           std::to_string(tag.version) + " but holds " + std::to_string(version_));
  auto& device = *settings_->on;
  const bool training = tag.stage == phase::train;
  if (training && settings_->sequencer != nullptr && settings_->last_of_stage)
    settings_->sequencer->forward_passed();  // the stage's next turn may come
  if (merges_) {  // an `add`: y is the sum of its inputs, and nothing is saved
    work.more.insert(work.more.begin(), std::move(message.x));
    auto y = summed(std::move(work.more), tag, "add");
    const auto type = y.type();
    finish_forward(tag, y.shape(), type, {}, std::move(y));
    return;
  }
  // Note [bf16 activations]: x in the dtype the layer takes it in, y in the one it makes.
  auto x = arrive(message.x, device, job_for(job_kind::copy, tag));
  const auto& math = *settings_->math;
  x = in_dtype(x, math.input_dtype(x.type(), params_), device, job_for(job_kind::convert, tag));
  shape_t y_shape{x.dim(0)};
  y_shape.insert(y_shape.end(), output_shape_.begin(), output_shape_.end());
  tensor y = tensor::empty(std::move(y_shape),
                           math.output_dtype(x.type(), params_, settings_->readers_take_bf16),
                           device.id());
  auto saved = std::make_shared<std::vector<tensor>>();
  const auto context = context_for(device, tag, x.dim(0), training);

  const auto label = job_for(job_kind::forward, tag);
  auto done = device.work().submit(
      // Captures the settings (which own the layer) so the job outlives the actor safely;
      // the description for an error is built only when there is one.
      // The output is allocated from output_shape() and passed as a const tensor&: a
      // layer writes its values but cannot replace or reshape it (no check needed here).
      [settings = settings_, context, params = params_, x, y, saved, tag,
       parts = parts_of(label)]() {
        try {
          if (settings->fused != nullptr)
            settings->fused->forward(context, params, x, y, *saved, &parts);
          else
            settings->math->forward(context, params, x, y, *saved);
        } catch (const fused_layer::member_error& e) {
          throw std::runtime_error(describe(*settings, "forward", tag, e.member) + ": " + e.what());
        } catch (const std::exception& e) {
          throw std::runtime_error(describe(*settings, "forward", tag) + ": " + e.what());
        }
      },
      label);
  y.set_ready(done);
  last_job_ = done;
  finish_forward(tag, x.shape(), x.type(), std::move(saved), std::move(y));
}

void layer_actor::finish_forward(const micro_tag& tag, const shape_t& input_shape, dtype input_type,
                                 std::shared_ptr<std::vector<tensor>> saved, tensor y) {
  if (tag.stage == phase::train) {
    holding_->fetch_add(1, std::memory_order_relaxed);
    stash_.emplace(stash_key{tag.step, tag.microbatch},
                   stash_entry{std::move(saved), params_, input_shape, input_type, y.type()});
  } else {
    send_release(tag);
  }
  record_counter("stash", 0, held());
  for (auto& out : outs_) {  // the same y to every reader
    activation_msg forward{tag, y};
    stamp_send(forward, out.track, "forward", bytes_of(forward.x));
    out.wire.send(this, std::move(forward));
    record_counter("credits", out.track, out.wire.in_flight());
  }
}

void layer_actor::backward(pass& work) {
  auto& message = work.gradient;
  const auto& tag = message.tag;
  auto it = stash_.find(stash_key{tag.step, tag.microbatch});
  if (it == stash_.end())
    throw std::logic_error(describe(*settings_, "backward", tag) + " has no stashed forward");
  auto entry = std::move(it->second);
  stash_.erase(it);
  holding_->fetch_sub(1, std::memory_order_relaxed);
  if (settings_->sequencer != nullptr && settings_->first_of_stage)
    settings_->sequencer->release();  // the micro-batch leaves this device's stash

  auto& device = *settings_->on;
  // Several readers: the sum of their gradients (Note [ports]).
  work.more.insert(work.more.begin(), std::move(message.dx));
  auto dy = summed(std::move(work.more), tag, "sum gradients");
  if (merges_) {  // an `add` passes dy back to every input unchanged
    record_counter("stash", 0, held());
    for (const auto& in : ins_) {
      gradient_msg back{tag, dy};
      stamp_send(back, in.track, "backward", bytes_of(back.dx));
      send_written<caf::message_priority::high>(in.peer, std::move(back));
    }
    return;
  }
  dy = in_dtype(dy, entry.output_type, device, job_for(job_kind::convert, tag));
  const bool wants_dx = ins_.front().wants_dx;
  if (has_params_ && grads_step_ != tag.step) {
    // One buffer, one view per parameter (see weight_grads_msg).
    std::int64_t total = 0;
    for (const auto& p : entry.params)
      total += p.numel();
    auto flat = tensor::empty({total}, dtype::f32, device.id());
    grads_.clear();
    std::int64_t offset = 0;
    for (const auto& p : entry.params) {
      grads_.push_back(flat.view(offset, p.shape()));
      offset += p.numel();
    }
    grads_step_ = tag.step;
    backwards_done_ = 0;
  }
  bool accumulate = backwards_done_ > 0;
  tensor dx;
  if (wants_dx)
    dx = tensor::empty(entry.input_shape, entry.input_type, device.id());
  const auto context = context_for(device, tag, entry.input_shape.at(0), true);

  event done;  // when the parameter gradients are written
  if (split_) {
    if (wants_dx)
      last_job_ = device.work().submit(
          [settings = settings_, context, entry, dy, dx, tag] {
            try {
              settings->math->backward_input(context, entry.params, *entry.saved, dy, dx);
            } catch (const std::exception& e) {
              throw std::runtime_error(describe(*settings, "backward", tag) + ": " + e.what());
            }
          },
          job_for(job_kind::backward, tag));
    holding_->fetch_add(1, std::memory_order_relaxed);  // until the job has run
    done = device.work().submit_when_idle(  // Note [split backward]
        [settings = settings_, context, entry = std::move(entry), dy, grads = grads_, accumulate,
         tag, holding = holding_]() mutable {
          try {
            settings->math->backward_weight(context, entry.params, *entry.saved, dy, grads,
                                            accumulate);
          } catch (const std::exception& e) {
            holding->fetch_sub(1, std::memory_order_relaxed);
            throw std::runtime_error(describe(*settings, "backward_weight", tag) + ": " + e.what());
          }
          holding->fetch_sub(1, std::memory_order_relaxed);
        },
        job_for(job_kind::backward_weight, tag));
    weight_jobs_.push_back(done);
  } else {
    const auto label = job_for(job_kind::backward, tag);
    done = device.work().submit(
        [settings = settings_, context, entry, dy, dx, grads = grads_, accumulate,
         need_dx = wants_dx, tag, parts = parts_of(label)]() mutable {
          try {
            if (settings->fused != nullptr)
              settings->fused->backward(context, entry.params, *entry.saved, dy,
                                        need_dx ? &dx : nullptr, grads, accumulate, &parts);
            else
              settings->math->backward(context, entry.params, *entry.saved, dy,
                                       need_dx ? &dx : nullptr, grads, accumulate);
          } catch (const fused_layer::member_error& e) {
            throw std::runtime_error(describe(*settings, "backward", tag, e.member) + ": " +
                                     e.what());
          } catch (const std::exception& e) {
            throw std::runtime_error(describe(*settings, "backward", tag) + ": " + e.what());
          }
        },
        label);
    last_job_ = done;
  }
  record_counter("stash", 0, held());
  // Gradients go back at high priority: with 1F1B credits this makes backward first.
  if (wants_dx) {
    dx.set_ready(last_job_);
    gradient_msg back{tag, std::move(dx)};
    stamp_send(back, ins_.front().track, "backward", bytes_of(back.dx));
    send_written<caf::message_priority::high>(ins_.front().peer, std::move(back));
  } else {
    send_release(tag);
  }
  if (!has_params_)
    return;
  if (++backwards_done_ == settings_->microbatches)
    send_grads(tag, done);
}

void layer_actor::send_grads(const micro_tag& tag, const event& done) {
  for (auto& g : grads_)
    g.set_ready(done);
  for (const auto& m : members_) {  // a fused group: each member's to its own sink
    const auto first = grads_.begin() + static_cast<std::ptrdiff_t>(m.member->first_param);
    weight_grads_msg out{tag.step, m.member->index, settings_->replica,
                         std::vector<tensor>(first, first + static_cast<std::ptrdiff_t>(
                                                                 m.member->params))};
    stamp_send(out, m.sink_track, "grads", bytes_of(out.grads));
    send_written(m.sink, std::move(out));
  }
  if (members_.empty()) {
    weight_grads_msg out{tag.step, settings_->layer_index, settings_->replica, std::move(grads_)};
    if (split_) {
      // Its consumers trust the stream's order for tensors of their own device, but an
      // idle-lane job may run after jobs submitted later: send them once it has run.
      unwritten_.push_back(std::move(out));
      done.then([me = caf::actor_cast<caf::actor>(this)] {
        caf::anon_send<caf::message_priority::high>(me, written_atom::value);
      });
    } else {
      // To another node (the async server, a central averager): once written, over the
      // emulated link if any (Note [nothing unwritten to the network] in device_actor.cpp).
      stamp_send(out, grad_sink_track_, "grads", bytes_of(out.grads));
      send_written(grad_sink_, std::move(out));
    }
  }
  grads_.clear();
  grads_step_ = -1;
}

}  // namespace troupe

namespace troupe {

std::vector<bool> bf16_parameter_mask(const layer& math, const shape_t& input_shape,
                                      numeric_precision precision) {
  std::vector<bool> mask;
  if (precision != numeric_precision::bf16)
    return mask;
  const auto names = math.bf16_parameters();
  bool any = false;
  for (const auto& spec : math.parameters(input_shape)) {
    mask.push_back(std::find(names.begin(), names.end(), spec.name) != names.end());
    any = any || mask.back();
  }
  if (!any)
    mask.clear();
  return mask;
}

std::vector<bool> bf16_parameter_mask(const layer& math, const layer_config& layer_config,
                                      const shape_t& input_shape, const run_config& config) {
  return bf16_parameter_mask(
      math, input_shape,
      layer_precision(layer_config.settings, this_cpu_bf16()).value_or(config.run.precision));
}

bf16_readers bf16_readers_of(const topology& graph, const run_config& config,
                             std::optional<device_type> as) {
  bf16_readers out;
  const bool any_bf16 = std::any_of(graph.actors.begin(), graph.actors.end(), [&](const auto& a) {
    return a.kind == actor_kind::layer &&
           layer_precision(a.math.settings, this_cpu_bf16()).value_or(config.run.precision) ==
               numeric_precision::bf16;
  });
  if (!any_bf16)
    return out;
  std::unordered_map<std::string, const actor_plan*> by_name;
  for (const auto& a : graph.actors)
    by_name.emplace(a.name, &a);
  // Whether a reader takes bf16 x, by model layer and device type (replicas read alike).
  std::map<std::pair<std::int32_t, device_type>, bool> known;
  auto takes = [&](const actor_plan& reader) {
    if (reader.kind != actor_kind::layer)
      return false;  // the loss reads f32
    const auto type = as.value_or(reader.device.type);
    const auto key = std::make_pair(reader.layer, type);
    auto it = known.find(key);
    if (it == known.end()) {
      auto math = create_layer(reader.math);
      math->bind(type);
      const auto& input = graph.shapes.at(static_cast<std::size_t>(reader.layer));
      const auto flow = math->activations();
      const bool yes = flow == bf16_flow::kept ||
                       (flow == bf16_flow::made &&
                        !bf16_parameter_mask(*math, reader.math, input, config).empty());
      it = known.emplace(key, yes).first;
    }
    return it->second;
  };
  for (const auto& w : graph.wires) {
    if (w.kind != wire_kind::activations)
      continue;
    auto from = by_name.find(w.from), to = by_name.find(w.to);
    if (from == by_name.end() || to == by_name.end() || from->second->kind != actor_kind::layer)
      continue;
    const bool yes = takes(*to->second);
    auto [at, fresh] = out.emplace(w.from, yes);
    if (!fresh)
      at->second = at->second && yes;
  }
  return out;
}

std::vector<activation_types> activation_dtypes(const topology& graph, const run_config& config,
                                                std::optional<device_type> as) {
  const auto readers = bf16_readers_of(graph, config, as);
  std::vector<const actor_plan*> first(graph.inputs.size(), nullptr);
  for (const auto& a : graph.actors)
    if (a.kind == actor_kind::layer && a.layer >= 0 &&
        static_cast<std::size_t>(a.layer) < first.size() &&
        (first[static_cast<std::size_t>(a.layer)] == nullptr ||
         a.replica < first[static_cast<std::size_t>(a.layer)]->replica))
      first[static_cast<std::size_t>(a.layer)] = &a;
  std::vector<activation_types> out(first.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    const auto* plan = first[i];
    const auto& reads = graph.inputs[i];
    if (plan == nullptr || reads.size() != 1)
      continue;  // an `add` sums in f32
    const auto sent = reads.front() == data_input
                          ? dtype::f32
                          : out.at(static_cast<std::size_t>(reads.front())).y;
    auto math = create_layer(plan->math);
    math->bind(as.value_or(plan->device.type));
    // The parameters' dtypes are all the rules read of them.
    std::vector<tensor> params;
    for (bool rounded : bf16_parameter_mask(*math, plan->math, graph.shapes.at(i), config))
      params.push_back(tensor::empty({0}, rounded ? dtype::bf16 : dtype::f32));
    const auto took = readers.find(plan->name);
    out[i].x = math->input_dtype(sent, params);
    out[i].y = math->output_dtype(out[i].x, params, took != readers.end() && took->second);
  }
  return out;
}

stage_sequencers make_stage_sequencers(const topology& t) {
  stage_sequencers out;
  if (!t.takes_turns())
    return out;
  const interleaved_pipeline pipeline{t.stages / t.virtual_stages, t.virtual_stages, t.microbatches,
                                      t.virtual_stages == 1};
  for (const auto& a : t.actors) {
    if (a.kind != actor_kind::layer)
      continue;
    auto& sequencer = out[{a.device, a.replica}];
    if (sequencer == nullptr)
      sequencer = std::make_shared<stage_sequencer>(pipeline, a.stage % pipeline.devices);
    sequencer->add_layer(a.stage, a.layer);
  }
  return out;
}

namespace {

std::shared_ptr<layer_actor_settings> settings_for(const actor_plan& plan, spawn_context& context) {
  auto s = std::make_shared<layer_actor_settings>();
  s->name = plan.name;
  s->layer_index = plan.layer;
  s->replica = plan.replica;
  s->microbatches = static_cast<std::int32_t>(context.plan.microbatches);
  s->seed = context.config.run.seed;
  s->input_shape = context.graph.shapes.at(static_cast<std::size_t>(plan.layer));
  s->on = &context.devices.at(plan.device);
  s->math = create_layer(plan.math);
  s->bf16_params = bf16_parameter_mask(*s->math, plan.math, s->input_shape, context.config);
  const auto readers = context.readers_in_bf16.find(plan.name);
  s->readers_take_bf16 = readers != context.readers_in_bf16.end() && readers->second;
  if (context.graph.schedule == pipeline_schedule::zb_h1) {
    s->split_backward = true;
    s->stash_limit = context.graph.stages;
  }
  // Interleaved stages (Note [interleaved stages]).
  auto sequencer = context.sequencers.find({plan.device, plan.replica});
  if (sequencer != context.sequencers.end()) {
    s->sequencer = sequencer->second;
    s->stage = plan.stage;
    s->first_of_stage = s->sequencer->first_of(plan.stage, plan.layer);
    s->last_of_stage = s->sequencer->last_of(plan.stage, plan.layer);
  }
  return s;
}

}  // namespace

caf::actor spawn_fused_layers(const std::string& name, const std::vector<const actor_plan*>& members,
                              std::vector<std::uint32_t> member_tracks, spawn_context& context) {
  // The group's first member's settings (device, replica, micro-batches, seed, input), with
  // the members' math fused and their bf16 masks one after the other.
  auto s = settings_for(*members.front(), context);
  TROUPE_CHECK(s->sequencer == nullptr && !s->split_backward,
               name << ": layers that take turns or split their backward are not fused");
  std::vector<fused_layer::member> parts;
  std::vector<bool> mask;
  bool any_bf16 = false;
  for (const auto* plan : members) {
    auto own = settings_for(*plan, context);
    const auto count = own->math->parameters(own->input_shape).size();
    any_bf16 = any_bf16 || !own->bf16_params.empty();
    own->bf16_params.resize(count, false);
    mask.insert(mask.end(), own->bf16_params.begin(), own->bf16_params.end());
    parts.push_back(
        fused_layer::member{std::move(own->math), plan->layer, plan->name, own->input_shape});
  }
  auto fused = std::make_unique<fused_layer>(std::move(parts));
  s->name = name;
  s->fused = fused.get();
  s->math = std::move(fused);
  s->bf16_params = any_bf16 ? std::move(mask) : std::vector<bool>{};
  // Its y is its last member's: read by that member's readers.
  const auto readers = context.readers_in_bf16.find(members.back()->name);
  s->readers_take_bf16 = readers != context.readers_in_bf16.end() && readers->second;
  s->member_tracks = std::move(member_tracks);
  return context.system.spawn<layer_actor>(std::move(s));
}

TROUPE_REGISTER_BUILTIN_ACTOR_KIND("layer",
                                   "one model layer of one replica (settings: the layer's)",
                                   [](const actor_plan& plan, spawn_context& context) {
                                     return context.system.spawn<layer_actor>(
                                         settings_for(plan, context));
                                   });

}  // namespace troupe
