// layer_actor.cpp: forward, backward, parameter versions and credits of one layer.
#include "actors/layer_actor.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "actors/actor_kinds.hpp"
#include "runtime/core/transfer.hpp"

namespace troupe {

layer_actor::layer_actor(caf::actor_config& config, std::shared_ptr<layer_actor_settings> settings)
    : device_actor(config, settings->name, settings->on), settings_(std::move(settings)) {
  output_shape_ = settings_->math->output_shape(settings_->input_shape);
  has_params_ = !settings_->math->parameters(settings_->input_shape).empty();
  settings_->math->bind(settings_->on->id().type);
  if (!has_params_)
    version_ = std::numeric_limits<std::int64_t>::max();  // any version will do
  split_ = settings_->split_backward && has_params_ && settings_->math->splits_backward();
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
  context.first_sample =
      (static_cast<std::int64_t>(tag.replica) * settings_->microbatches + tag.microbatch) * batch;
  return context;
}

std::string layer_actor::describe(const layer_actor_settings& settings, const char* pass,
                                  const micro_tag& tag) {
  return settings.name + " (" + settings.math->type() + ") " + pass + " of " +
         (tag.stage == phase::train ? "step " : "eval batch ") + std::to_string(tag.step) +
         ", micro-batch " + std::to_string(tag.microbatch) + ", replica " +
         std::to_string(tag.replica);
}

caf::message_handler layer_actor::handlers() {
  return {
      [this](activation_msg& message) {
        if (deferred_until_ready(message, {&message.x}))
          return;
        auto span = handling_span("forward", message.trace, message.tag, bytes_of(message.x));
        if (message.tag.version > version_) {
          waiting_.push_back(std::move(message));
          return;
        }
        offer(pass{std::move(message), {}, false});
      },
      [this](gradient_msg& message) {
        if (deferred_until_ready<caf::message_priority::high>(message, {&message.dx}))
          return;
        auto span = handling_span("backward", message.trace, message.tag, bytes_of(message.dx));
        next_.release(this);
        record_counter("credits", next_track_, next_.in_flight());
        offer(pass{{}, std::move(message), true});
      },
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
        send(grad_sink_, std::move(out));
      },
      [this](release_msg& message) {
        auto span = handling_span("release", message.trace, message.tag, 0);
        next_.release(this);
        record_counter("credits", next_track_, next_.in_flight());
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
         std::to_string(waiting_.front().tag.version) + " from its optimizer";
  if (next_.waiting() > 0)
    s += "; " + std::to_string(next_.waiting()) + " activation(s) waiting for a credit on the wire to " +
         next_name_ + " (capacity " + std::to_string(next_.capacity()) + ", " +
         std::to_string(next_.in_flight()) + " in flight, released by gradients from " + next_name_ +
         ")";
  else if (next_.in_flight() > 0)
    s += "; " + std::to_string(next_.in_flight()) + " micro-batch(es) sent to " + next_name_ +
         " not released yet";
  if (!stash_.empty())
    s += "; holds " + std::to_string(stash_.size()) + " micro-batch(es) waiting for their gradient from " +
         next_name_ + " (first: step " + std::to_string(std::get<0>(stash_.begin()->first)) +
         ", micro-batch " + std::to_string(std::get<1>(stash_.begin()->first)) + ")";
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
  TROUPE_CHECK(out.size() == 1 && in.size() == 1,
               settings_->name << " needs one activations wire in and one out");
  next_.connect(out[0]);
  next_name_ = out[0].peer_name;
  next_track_ = out[0].peer_track;
  previous_ = in[0].peer;
  // Layers (and custom actors between layers) need dx; the data loader only the credit.
  previous_wants_dx_ = in[0].peer_kind != "data_loader";
  auto grads = wiring.out("grads");
  TROUPE_CHECK(grads.size() == (has_params_ ? 1u : 0u),
               settings_->name << " needs " << (has_params_ ? "one grads wire" : "no grads wire"));
  if (has_params_) {
    grad_sink_ = grads[0].peer;
    grad_sink_track_ = grads[0].peer_track;
  }
  previous_track_ = in[0].peer_track;
}

void layer_actor::release_peers() {
  previous_ = nullptr;
  grad_sink_ = nullptr;
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
      backward(work.gradient);
    } else {
      if (work.activation.tag.stage == phase::train)
        make_room();
      forward(work.activation);
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
  release_msg release{tag};
  stamp_send(release, previous_track_, "release", 0);
  send<caf::message_priority::high>(previous_, std::move(release));
}

void layer_actor::install(params_msg& message) {
  params_ = arrive(message.params, *settings_->on);
  version_ = message.version;
  while (!waiting_.empty() && waiting_.front().tag.version <= version_) {
    auto next = std::move(waiting_.front());
    waiting_.pop_front();
    offer(pass{std::move(next), {}, false});
  }
}

// Note [split backward]
// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023) splits a layer's backward
// into the input gradient, which the previous stage waits for, and the weight gradient,
// which nobody needs until the step's optimizer. Here the first is a main-lane job whose
// dx goes back at once, as an unsplit backward's does; the second goes to the device's
// idle lane (Note [idle lane] in runtime/core/device.cpp), so it runs when the device
// would otherwise wait for its neighbours. Until it has run, the micro-batch's saved
// activations stay alive: with 1F1B's credits a stage holds P - s micro-batches waiting
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

void layer_actor::forward(activation_msg& message) {
  const auto& tag = message.tag;
  if (has_params_ && tag.version != version_)
    throw std::logic_error(describe(*settings_, "forward", tag) + " needs parameter version " +
                           std::to_string(tag.version) + " but holds " +
                           std::to_string(version_));
  auto& device = *settings_->on;
  auto x = arrive(message.x, device);
  shape_t y_shape{x.dim(0)};
  y_shape.insert(y_shape.end(), output_shape_.begin(), output_shape_.end());
  tensor y = tensor::empty(std::move(y_shape), dtype::f32, device.id());
  auto saved = std::make_shared<std::vector<tensor>>();
  const bool training = tag.stage == phase::train;
  const auto context = context_for(device, tag, x.dim(0), training);

  auto done = device.work().submit(
      // Captures the settings (which own the layer) so the job outlives the actor safely;
      // the description for an error is built only when there is one.
      // The output is allocated from output_shape() and passed as a const tensor&: a
      // layer writes its values but cannot replace or reshape it (no check needed here).
      [settings = settings_, context, params = params_, x, y, saved, tag]() {
        try {
          settings->math->forward(context, params, x, y, *saved);
        } catch (const std::exception& e) {
          throw std::runtime_error(describe(*settings, "forward", tag) + ": " + e.what());
        }
      },
      job_for("forward", tag));
  y.set_ready(done);
  last_job_ = done;
  if (training)
    stash_.emplace(stash_key{tag.step, tag.microbatch},
                   stash_entry{std::move(saved), params_, x.shape()});
  else
    send_release(tag);
  record_counter("stash", 0, held());
  activation_msg out{tag, std::move(y)};
  stamp_send(out, next_track_, "forward", bytes_of(out.x));
  next_.send(this, std::move(out));
  record_counter("credits", next_track_, next_.in_flight());
}

void layer_actor::backward(gradient_msg& message) {
  const auto& tag = message.tag;
  auto it = stash_.find(stash_key{tag.step, tag.microbatch});
  if (it == stash_.end())
    throw std::logic_error(describe(*settings_, "backward", tag) + " has no stashed forward");
  auto entry = std::move(it->second);
  stash_.erase(it);
  if (settings_->sequencer != nullptr && settings_->first_of_stage)
    settings_->sequencer->release();  // the micro-batch leaves this device's stash

  auto& device = *settings_->on;
  auto dy = arrive(message.dx, device);
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
  if (previous_wants_dx_)
    dx = tensor::empty(entry.input_shape, dtype::f32, device.id());
  const auto context = context_for(device, tag, entry.input_shape.at(0), true);

  event done;  // when the parameter gradients are written
  if (split_) {
    if (previous_wants_dx_)
      last_job_ = device.work().submit(
          [settings = settings_, context, entry, dy, dx, tag] {
            try {
              settings->math->backward_input(context, entry.params, *entry.saved, dy, dx);
            } catch (const std::exception& e) {
              throw std::runtime_error(describe(*settings, "backward", tag) + ": " + e.what());
            }
          },
          job_for("backward", tag));
    done = device.work().submit_when_idle(  // Note [split backward]
        [settings = settings_, context, entry = std::move(entry), dy, grads = grads_, accumulate,
         tag]() mutable {
          try {
            settings->math->backward_weight(context, entry.params, *entry.saved, dy, grads,
                                            accumulate);
          } catch (const std::exception& e) {
            throw std::runtime_error(describe(*settings, "backward_weight", tag) + ": " + e.what());
          }
        },
        job_for("backward_weight", tag));
    weight_jobs_.push_back(done);
  } else {
    done = device.work().submit(
        [settings = settings_, context, entry, dy, dx, grads = grads_, accumulate,
         need_dx = previous_wants_dx_, tag]() mutable {
          try {
            settings->math->backward(context, entry.params, *entry.saved, dy,
                                     need_dx ? &dx : nullptr, grads, accumulate);
          } catch (const std::exception& e) {
            throw std::runtime_error(describe(*settings, "backward", tag) + ": " + e.what());
          }
        },
        job_for("backward", tag));
    last_job_ = done;
  }
  record_counter("stash", 0, held());
  // Gradients go back at high priority: with 1F1B credits this makes backward first.
  if (previous_wants_dx_) {
    dx.set_ready(last_job_);
    gradient_msg back{tag, std::move(dx)};
    stamp_send(back, previous_track_, "backward", bytes_of(back.dx));
    send<caf::message_priority::high>(previous_, std::move(back));
  } else {
    send_release(tag);
  }
  if (!has_params_)
    return;
  if (++backwards_done_ == settings_->microbatches) {
    for (auto& g : grads_)
      g.set_ready(done);
    weight_grads_msg out{tag.step, settings_->layer_index, settings_->replica, std::move(grads_)};
    if (split_) {
      // Its consumers trust the stream's order for tensors of their own device, but an
      // idle-lane job may run after jobs submitted later: send them once it has run.
      unwritten_.push_back(std::move(out));
      done.then([me = caf::actor_cast<caf::actor>(this)] {
        caf::anon_send<caf::message_priority::high>(me, written_atom::value);
      });
    } else {
      stamp_send(out, grad_sink_track_, "grads", bytes_of(out.grads));
      send(grad_sink_, std::move(out));
    }
    grads_.clear();
    grads_step_ = -1;
  }
}

}  // namespace troupe

namespace troupe {

stage_sequencers make_stage_sequencers(const topology& t) {
  stage_sequencers out;
  if (t.virtual_stages <= 1)
    return out;
  const interleaved_pipeline pipeline{t.stages / t.virtual_stages, t.virtual_stages,
                                      t.microbatches};
  for (const auto& a : t.actors) {
    if (a.kind != actor_kind::layer)
      continue;
    auto& sequencer = out[{a.device, a.replica}];
    if (sequencer == nullptr)
      sequencer = std::make_shared<stage_sequencer>(pipeline, a.stage % pipeline.devices);
  }
  return out;
}

namespace {

// Whether the actor at the other end of `name`'s activations wire (in or out) belongs to
// another stage than `stage` (or is not a layer: the loader, the loss, a custom actor).
bool crosses_stage(const topology& t, const std::string& name, std::int32_t stage, bool incoming) {
  for (const auto& w : t.wires) {
    if (w.kind != wire_kind::activations || (incoming ? w.to : w.from) != name)
      continue;
    const auto* other = t.find(incoming ? w.from : w.to);
    return other == nullptr || other->kind != actor_kind::layer || other->stage != stage;
  }
  return true;
}

}  // namespace

TROUPE_REGISTER_BUILTIN_ACTOR_KIND("layer",
                                   "one model layer of one replica (settings: the layer's)",
                                   [](const actor_plan& plan, spawn_context& context) {
                                     auto s = std::make_shared<layer_actor_settings>();
                                     s->name = plan.name;
                                     s->layer_index = plan.layer;
                                     s->replica = plan.replica;
                                     s->microbatches =
                                         static_cast<std::int32_t>(context.plan.microbatches);
                                     s->seed = context.config.run.seed;
                                     s->input_shape = context.graph.shapes.at(
                                         static_cast<std::size_t>(plan.layer));
                                     s->on = &context.devices.at(plan.device);
                                     s->math = create_layer(plan.math);
                                     if (context.graph.schedule == pipeline_schedule::zb_h1) {
                                       s->split_backward = true;
                                       s->stash_limit = context.graph.stages;
                                     }
                                     // Interleaved stages (Note [interleaved stages]).
                                     auto sequencer =
                                         context.sequencers.find({plan.device, plan.replica});
                                     if (sequencer != context.sequencers.end()) {
                                       s->sequencer = sequencer->second;
                                       s->stage = plan.stage;
                                       s->first_of_stage = crosses_stage(context.graph, plan.name,
                                                                         plan.stage, true);
                                       s->last_of_stage = crosses_stage(context.graph, plan.name,
                                                                        plan.stage, false);
                                     }
                                     return context.system.spawn<layer_actor>(std::move(s));
                                   });

}  // namespace troupe
