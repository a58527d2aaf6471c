// optimizer_actor.cpp: parameter init, gradient gathering and the update job.
#include "actors/optimizer_actor.hpp"

#include <algorithm>

#include "actors/actor_kinds.hpp"
#include "actors/failures.hpp"
#include "actors/inputs.hpp"
#include "actors/traced.hpp"
#include "runtime/transfer.hpp"

namespace troupe {

optimizer_actor::optimizer_actor(caf::actor_config& config, optimizer_actor_settings settings)
    : caf::event_based_actor(config), settings_(std::move(settings)) {
  auto type = settings_.on->id().type;
  sgd_ = kernels::lookup<kernels::ops::sgd_update>(type);
  adam_ = kernels::lookup<kernels::ops::adam_update>(type);
  axpy_ = kernels::lookup<kernels::ops::axpy>(type);
  const auto& id = settings_.on->id();
  for (std::size_t i = 0; i < settings_.params.size(); ++i) {
    const auto& spec = settings_.params[i];
    // Initialised on the host, then owned by this actor's device.
    auto p = tensor::empty(spec.shape, dtype::f32, id);
    initialise_parameter(spec, settings_.seed, settings_.layer_index, static_cast<std::int64_t>(i),
                         p.f32());
    params_.push_back(p);
    momentum_.push_back(tensor::zeros(spec.shape, dtype::f32, id));
    if (settings_.optimizer.type != "sgd")
      second_.push_back(tensor::zeros(spec.shape, dtype::f32, id));
  }
}

caf::behavior optimizer_actor::make_behavior() {
  report_failures_to(this, settings_.name, &trainer_);
  return {
      [this](const wiring_msg& wiring) {
        trainer_ = wiring.trainer;
        track_ = wiring.track;
        for (const auto& end : wiring.out("params")) {
          subscribers_.push_back(end.peer);
          subscriber_tracks_.push_back(end.peer_track);
        }
        for (const auto& end : wiring.in("grads"))
          sources_ += (sources_.empty() ? "" : ", ") + end.peer_name;
        grads_expected_ = static_cast<std::int32_t>(wiring.in("grads").size());
        TROUPE_CHECK(grads_expected_ >= 1 && !subscribers_.empty(),
                     settings_.name << " needs grads wires in and params wires out");
      },
      [this](start_atom) { publish(); },
      [this](weight_grads_msg& message) {
        if (come_back_when_ready(this, pending_input(settings_.on->id(), message.grads), message))
          return;
        auto span = handling(track_, message);
        receive_grads(message);
      },
      [this](status_atom) {
        return settings_.name + " (on " + settings_.on->id().to_string() + "): parameter version " +
               std::to_string(version_) + "; has " + std::to_string(grads_received_) + " of " +
               std::to_string(grads_expected_) + " gradient message(s) for step " +
               std::to_string(version_) + " (from " + sources_ + ")";
      },
      // The parameters once they have reached `version` (the end of a run, tests,
      // checkpoints): answered at once, or as soon as that update has been submitted.
      // The caller waits for readiness.
      [this](caf::get_atom, std::int64_t version) -> caf::result<std::vector<tensor>> {
        if (version_ >= version)
          return params_;
        auto promise = make_response_promise<std::vector<tensor>>();
        waiting_for_version_.emplace_back(version, promise);
        return promise;
      },
      [this](finish_atom) { quit(); },
  };
}

void optimizer_actor::publish() {
  for (std::size_t i = 0; i < subscribers_.size(); ++i) {
    params_msg out{version_, settings_.layer_index, params_};
    stamp(out, track_, subscriber_tracks_[i], "params", bytes_of(out.params));
    send(subscribers_[i], std::move(out));
  }
}

void optimizer_actor::receive_grads(weight_grads_msg& message) {
  TROUPE_CHECK(message.step == version_,
               settings_.name << " got gradients of step " << message.step << " at version "
                              << version_);
  TROUPE_CHECK(message.grads.size() == params_.size(),
               settings_.name << " got " << message.grads.size() << " gradients for "
                              << params_.size() << " parameters");
  auto& work = settings_.on->work();
  message.grads = arrive(message.grads, *settings_.on);
  if (grads_received_ == 0) {
    // Handed over by the sender (see weight_grads_msg), or copied here on arrival: the
    // first message's buffers are ours to sum the others into.
    grad_sum_ = std::move(message.grads);
  } else {
    work.submit([axpy = axpy_, context = settings_.on->context(), sum = grad_sum_,
                 add = std::move(message.grads)] {
      for (std::size_t i = 0; i < sum.size(); ++i)
        axpy(context, sum[i].numel(), 1.0f, add[i].f32(), sum[i].f32());
    });
  }
  if (++grads_received_ < grads_expected_)
    return;
  grads_received_ = 0;
  update(message.step);
  publish();
}

void optimizer_actor::update(std::int64_t step) {
  const auto& o = settings_.optimizer;
  const auto lr = static_cast<float>(settings_.schedule.at(step));
  std::vector<tensor> next;
  for (const auto& p : params_)
    next.push_back(tensor::empty(p.shape(), dtype::f32, settings_.on->id()));
  const bool adam = o.type != "sgd";
  kernels::sgd_hyper sgd{lr,
                         static_cast<float>(o.momentum),
                         static_cast<float>(o.dampening),
                         static_cast<float>(o.weight_decay),
                         o.nesterov,
                         step == 0};
  kernels::adam_hyper adam_hyper{lr,
                                 static_cast<float>(o.beta1),
                                 static_cast<float>(o.beta2),
                                 static_cast<float>(o.eps),
                                 static_cast<float>(o.weight_decay),
                                 o.type == "adamw",
                                 step + 1};
  auto& work = settings_.on->work();
  auto done = work.submit([=, context = settings_.on->context(), current = params_,
                           grads = std::move(grad_sum_), first = momentum_, second = second_,
                           sgd_update = sgd_, adam_update = adam_] {
    // Out of place: one pass reads version step (which subscribers may still be reading,
    // so it is never written) and writes version step + 1 (kernels/ops.hpp,
    // Note [out-of-place updates]).
    for (std::size_t i = 0; i < current.size(); ++i) {
      auto n = current[i].numel();
      if (adam)
        adam_update(context, n, current[i].f32(), next[i].f32(), grads[i].f32(), first[i].f32(),
                    second[i].f32(), adam_hyper);
      else
        sgd_update(context, n, current[i].f32(), next[i].f32(), grads[i].f32(),
                   o.momentum != 0 ? first[i].f32() : nullptr, sgd);
    }
  }, job_label{"update", track_, step, -1, -1, 0, 0});
  grad_sum_.clear();
  for (auto& p : next)
    p.set_ready(done);
  params_ = std::move(next);
  version_ = step + 1;
  for (auto it = waiting_for_version_.begin(); it != waiting_for_version_.end();) {
    if (it->first <= version_) {
      it->second.deliver(params_);
      it = waiting_for_version_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace troupe

namespace troupe {

TROUPE_REGISTER_ACTOR_KIND(
    "optimizer", "owns one layer's parameters and optimizer state ([optimizer])",
    [](const actor_plan& plan, spawn_context& context) {
      optimizer_actor_settings s;
      s.name = plan.name;
      s.layer_index = plan.layer;
      const auto& model_layer = *std::find_if(
          context.graph.actors.begin(), context.graph.actors.end(),
          [&](const actor_plan& a) { return a.kind == "layer" && a.layer == plan.layer; });
      s.params = create_layer(model_layer.math)
                     ->parameters(context.graph.shapes.at(static_cast<std::size_t>(plan.layer)));
      s.optimizer = context.config.optimizer;
      s.schedule = context.schedule;
      s.seed = context.config.run.seed;
      s.on = &context.devices.at(plan.device);
      return context.system.spawn<optimizer_actor>(std::move(s));
    });

}  // namespace troupe
