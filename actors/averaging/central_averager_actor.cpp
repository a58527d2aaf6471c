// central_averager_actor.cpp: the replica-ordered sum of one layer's gradients (see the
// header). The actor only books: every sum is a job on its device's stream, and the sums
// it sends carry the event of the job that writes them.
#include "actors/averaging/central_averager_actor.hpp"

#include <stdexcept>

#include "runtime/core/transfer.hpp"
#include "troupe/check.hpp"

namespace troupe {

central_averager_actor::central_averager_actor(caf::actor_config& config,
                                               grad_averager_settings settings)
    : device_actor(config, settings.name, settings.on),
      settings_(std::move(settings)),
      layout_(settings_.name, settings_.layer_index) {
  check_averager_settings(settings_, averaging_method::central);
  axpy_ = kernels::lookup<kernels::ops::axpy>(settings_.on->id().type);
}

caf::message_handler central_averager_actor::handlers() {
  return {
      grads_handler([this](weight_grads_msg& message) {
        layout_.check(message, 0, settings_.replicas - 1);
        receive(message);
      }),
  };
}

void central_averager_actor::connect(const wiring_msg& wiring) {
  auto sinks = wiring.out("grads");
  TROUPE_CHECK(sinks.size() == 1, settings_.name << " needs one grads wire out");
  sink_ = sinks[0].peer;
}

void central_averager_actor::release_peers() { sink_ = nullptr; }

std::string central_averager_actor::role() const { return to_string(settings_.method); }

std::string central_averager_actor::waiting_for() const {
  std::string out;
  for (const auto& [step, state] : steps_) {
    std::int32_t arrived = 0;
    for (bool a : state.arrived)
      arrived += a ? 1 : 0;
    out += (out.empty() ? "" : ", ") + std::string{"step "} + std::to_string(step) + " has " +
           std::to_string(arrived) + " of " + std::to_string(settings_.replicas) +
           " replicas' gradients";
  }
  return out.empty() ? "; no step in progress" : "; steps in progress: " + out;
}

void central_averager_actor::receive(weight_grads_msg& message) {
  const auto R = static_cast<std::size_t>(settings_.replicas);
  auto& step = steps_[message.step];
  if (step.grads.empty()) {
    step.grads.resize(R);
    step.arrived.assign(R, false);
  }
  const auto replica = static_cast<std::size_t>(message.replica);
  if (step.arrived[replica])
    throw std::logic_error(layout_.describe(message) + " arrived twice");
  step.arrived[replica] = true;
  // Start the copy to our device now; the sum waits for it on our stream.
  step.grads[replica] = arrive(message.grads, on());

  // Fold replicas in, in replica order, as far as the arrived prefix allows.
  auto& work = on().work();
  event done;
  bool submitted = false;
  while (step.summed < settings_.replicas && step.arrived[static_cast<std::size_t>(step.summed)]) {
    auto& add = step.grads[static_cast<std::size_t>(step.summed)];
    for (const auto& g : add)
      work.wait_for(g.ready());
    if (step.summed == 0) {
      // Handed over (see weight_grads_msg) or copied here on arrival: ours to sum into.
      step.sums = std::move(add);
      ++step.summed;
      continue;
    }
    auto label = job_for_step(job_kind::reduce, message.step, settings_.replica);
    for (const auto& g : add)
      label.bytes += static_cast<std::int64_t>(g.bytes());  // the simulator prices it by them
    done = work.submit(
        [axpy = axpy_, context = on().context(), sums = step.sums, add = std::move(add)] {
          for (std::size_t i = 0; i < sums.size(); ++i)
            axpy(context, add[i].numel(), 1.0f, add[i].f32(), sums[i].f32());
        },
        label);
    submitted = true;
    ++step.summed;
  }
  if (step.summed < settings_.replicas)
    return;
  auto sums = std::move(step.sums);
  if (submitted)
    for (auto& s : sums)
      s.set_ready(done);
  const auto step_index = message.step;
  steps_.erase(step_index);
  send(sink_, weight_grads_msg{step_index, settings_.layer_index, -1, std::move(sums)});
}

}  // namespace troupe
