// grad_clipper.cpp: an example plugin actor kind, "grad_clipper": clips one layer's gradients
// to a maximum global L2 norm on their way to the optimizer (as torch.nn.utils.
// clip_grad_norm_ does for the tensors it is given).
//
// It sits on a grads wire: an explicit config replaces
//     layer_2 --grads--> optimizer_2
// by
//     layer_2 --grads--> clip_2 --grads--> optimizer_2
// and gives it `max_norm` in its [[actor]] table. For each weight_grads_msg it computes
// norm = sqrt(sum of g^2 over every tensor of the message) and scales every tensor by
// min(1, max_norm / norm), on its device's stream, then sends the message on. The norm is
// per message, so per layer (and per replica when it sits before an averager): clipping
// the whole model's norm would need one clipper seeing every layer, which is a different
// wiring, not a different actor.
//
// It follows the conventions of troupe's built-in actors (actors/grad_averager_actor.cpp):
// an exception in a handler reaches the trainer (report_failures_to), gradients from
// another device are taken only once written (come_back_when_ready) and copied over
// (arrive), the math is a job on the device stream (the actor thread only books), and
// sends and handling are traced. It writes the received tensors in place: weight_grads_msg
// hands them over (actors/messages.hpp), so they are ours. A NaN or infinite norm passes
// the gradients on unscaled (min(1, NaN) is 1 here), as clip_grad_norm_ does by default.
#include <caf/all.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <variant>

#include "actors/actor_kinds.hpp"
#include "actors/failures.hpp"
#include "actors/inputs.hpp"
#include "actors/traced.hpp"
#include "kernels/kernels.hpp"
#include "runtime/base/error.hpp"
#include "actors/messages.hpp"
#include "runtime/core/transfer.hpp"

namespace custom_layers {

using troupe::kernels::context;

// ---- ops: the scalar stays in device memory (kernels/ops.hpp conventions) ------------

/// *sum_of_squares = (accumulate ? *sum_of_squares : 0) + sum of x[i]^2 over n elements.
struct sum_of_squares {
  static constexpr const char* name = "custom_layers.sum_of_squares";
  using function = void (*)(const context&, std::int64_t n, const float* x, bool accumulate,
                            float* sum_of_squares);
};

/// x *= min(1, max_norm / sqrt(*sum_of_squares)) over n elements.
struct clip_by_norm {
  static constexpr const char* name = "custom_layers.clip_by_norm";
  using function = void (*)(const context&, std::int64_t n, float max_norm,
                            const float* sum_of_squares, float* x);
};

namespace {

void sum_of_squares_cpu(const context&, std::int64_t n, const float* x, bool accumulate,
                        float* out) {
  // In double: a layer has up to millions of gradients, and float partial sums would lose
  // the small ones.
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  *out = static_cast<float>((accumulate ? static_cast<double>(*out) : 0.0) + sum);
}

float clip_factor(float max_norm, float sum_of_squares) {
  const float factor = max_norm / std::sqrt(sum_of_squares);  // +inf for a zero norm
  return factor < 1.0f ? factor : 1.0f;                         // NaN compares false: 1
}

void clip_by_norm_cpu(const context&, std::int64_t n, float max_norm, const float* sum_of_squares,
                      float* x) {
  const float factor = clip_factor(max_norm, *sum_of_squares);
  if (factor == 1.0f) return;  // within the bound: the gradients stay bit for bit
  for (std::int64_t i = 0; i < n; ++i) x[i] *= factor;
}

}  // namespace

TROUPE_REGISTER_KERNEL(sum_of_squares, troupe::kernels::device_type::cpu, sum_of_squares_cpu);
TROUPE_REGISTER_KERNEL(clip_by_norm, troupe::kernels::device_type::cpu, clip_by_norm_cpu);

// ---- the actor ------------------------------------------------------------------------

namespace {

struct grad_clipper_settings {
  std::string name;        // its [[actor]] name, e.g. "clip_2"
  float max_norm = 1.0f;   // > 0
  troupe::device* on = nullptr;
};

class grad_clipper_actor : public caf::event_based_actor {
 public:
  grad_clipper_actor(caf::actor_config& config, grad_clipper_settings settings)
      : caf::event_based_actor(config), settings_(std::move(settings)) {
    TROUPE_CHECK(settings_.on != nullptr, settings_.name << " has no device");
    // Resolved once; a device type without these kernels fails at spawn, naming the op.
    const auto type = settings_.on->id().type;
    sum_of_squares_ = troupe::kernels::lookup<sum_of_squares>(type);
    clip_ = troupe::kernels::lookup<clip_by_norm>(type);
  }

  caf::behavior make_behavior() override {
    troupe::report_failures_to(this, settings_.name, &trainer_);
    attach_functor([this] {  // let go of the neighbours on exit
      sink_ = nullptr;
      trainer_ = nullptr;
    });
    return {
        [this](const troupe::wiring_msg& wiring) {
          trainer_ = wiring.trainer;
          track_ = wiring.track;
          auto in = wiring.in("grads");
          auto out = wiring.out("grads");
          TROUPE_CHECK(in.size() == 1 && out.size() == 1,
                       settings_.name << " needs one grads wire in and one out, has "
                                      << in.size() << " in and " << out.size() << " out");
          sink_ = out[0].peer;
          sink_track_ = out[0].peer_track;
          source_ = in[0].peer_name;
        },
        [this](troupe::weight_grads_msg& message) {
          if (troupe::come_back_when_ready(
                  this, troupe::pending_input(settings_.on->id(), message.grads), message))
            return;
          troupe::micro_tag tag;
          tag.step = message.step;
          tag.replica = message.replica;
          auto span = troupe::handling(track_, "grads", message.trace, tag,
                                       troupe::bytes_of(message.grads));
          clip(message);
        },
        [this](troupe::status_atom) {
          return settings_.name + " (grad_clipper to norm " + std::to_string(settings_.max_norm) +
                 " on " + settings_.on->id().to_string() + "): clipped " +
                 std::to_string(steps_) + " step(s) of gradients from " + source_;
        },
        [this](troupe::finish_atom) { quit(); },
    };
  }

 private:
  void clip(troupe::weight_grads_msg& message) {
    if (message.grads.empty())
      throw std::logic_error(settings_.name + ": gradients of step " +
                             std::to_string(message.step) + " hold no tensors");
    for (const auto& g : message.grads)
      if (!g.defined() || g.type() != troupe::dtype::f32)
        throw std::logic_error(settings_.name + ": every gradient must be a defined f32 tensor");
    // Same device: the tensors themselves (handed over, ours to write). Another device:
    // copies on ours, ready after the copy job.
    auto grads = troupe::arrive(message.grads, *settings_.on);
    auto squares = troupe::tensor::empty({1}, troupe::dtype::f32, settings_.on->id());
    auto& work = settings_.on->work();
    auto done = work.submit(
        [sum_of_squares = sum_of_squares_, clip = clip_, context = settings_.on->context(),
         max_norm = settings_.max_norm, grads, squares] {
          for (std::size_t i = 0; i < grads.size(); ++i)
            sum_of_squares(context, grads[i].numel(), grads[i].f32(), i > 0, squares.f32());
          for (const auto& g : grads) clip(context, g.numel(), max_norm, squares.f32(), g.f32());
        },
        troupe::job_label{"clip", track_, message.step, -1, message.replica, 0, 0});
    for (auto& g : grads) g.set_ready(done);
    troupe::weight_grads_msg out{message.step, message.layer, message.replica, std::move(grads),
                                 troupe::trace_stamp{}};
    troupe::stamp(out, track_, sink_track_, "grads", troupe::bytes_of(out.grads));
    send(sink_, std::move(out));
    ++steps_;
  }

  grad_clipper_settings settings_;
  sum_of_squares::function sum_of_squares_ = nullptr;
  clip_by_norm::function clip_ = nullptr;
  caf::actor sink_;          // the optimizer (or averager) the clipped gradients go to
  caf::actor trainer_;       // receives failure_msg
  std::uint32_t track_ = 0;  // trace tracks (0 when not tracing)
  std::uint32_t sink_track_ = 0;
  std::string source_;       // the grads wire's sender, for the watchdog
  std::int64_t steps_ = 0;
};

/// max_norm from the [[actor]] table: a positive number (an integer is fine).
float read_max_norm(const troupe::actor_plan& plan) {
  auto found = plan.settings.find("max_norm");
  if (found == plan.settings.end())
    throw troupe::config_error(plan.where, "[[actor]] '" + plan.name +
                                               "' (a grad_clipper): missing key 'max_norm' "
                                               "(e.g. max_norm = 1.0)");
  const auto& value = found->second;
  double x = std::numeric_limits<double>::quiet_NaN();
  if (const auto* d = std::get_if<double>(&value.value)) x = *d;
  if (const auto* i = std::get_if<std::int64_t>(&value.value)) x = static_cast<double>(*i);
  if (!(x > 0 && x < 1e30))
    throw troupe::config_error(value.where, "[[actor]] '" + plan.name +
                                                "' max_norm: expected a positive number");
  return static_cast<float>(x);
}

}  // namespace

// Its signature: grads wires in and out, nothing else (validate_topology() refuses any other
// wire to or from a grad_clipper, naming it).
TROUPE_REGISTER_ACTOR_KIND(
    "grad_clipper",
    "scales one layer's gradients to a global L2 norm of at most max_norm, on a grads wire",
    troupe::accepts{"grads"}, troupe::emits{"grads"},
    [](const troupe::actor_plan& plan, troupe::spawn_context& context) {
      grad_clipper_settings s;
      s.name = plan.name;
      s.max_norm = read_max_norm(plan);
      s.on = &context.devices.at(plan.device);
      return context.system.spawn<grad_clipper_actor>(std::move(s));
    });

}  // namespace custom_layers
