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
// Its base, troupe::grads_filter (troupe/grads_filter.hpp, on troupe's device_actor like the
// built-in actors), owns the protocol: wiring (one grads wire in, one out), failures to the
// trainer, status, finish, gradients from another device taken once written, tracing.
// What is left here is the math: two kernels and the job that calls them, which scales
// the gradients in place (they are handed over, troupe/messages.hpp). A NaN or infinite
// norm passes the gradients on unscaled (min(1, NaN) is 1 here), as clip_grad_norm_ does.
#include <cmath>
#include <string>

#include "troupe/actor_kind.hpp"
#include "troupe/kernel.hpp"

namespace custom_layers {

using troupe::kernels::context;

// ---- ops: the scalar stays in device memory (troupe/ops.hpp conventions) ------------

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

// ---- the actor: its math; the protocol is troupe::grads_filter's ----------------------

namespace {

class grad_clipper_actor final : public troupe::grads_filter {
 public:
  grad_clipper_actor(caf::actor_config& config, std::string name, float max_norm,
                     troupe::device* on)
      : grads_filter(config, std::move(name), on, "clipped"),
        max_norm_(max_norm),
        // Resolved once; a device type without these kernels fails at spawn, naming the op.
        sum_of_squares_(troupe::kernels::lookup<sum_of_squares>(this->on().id().type)),
        clip_(troupe::kernels::lookup<clip_by_norm>(this->on().id().type)) {}

 protected:
  troupe::event transform(std::vector<troupe::tensor>& grads,
                          const troupe::weight_grads_msg& message) override {
    auto squares = troupe::tensor::empty({1}, troupe::dtype::f32, on().id());
    return on().work().submit(
        [sum_of_squares = sum_of_squares_, clip = clip_, context = on().context(),
         max_norm = max_norm_, grads, squares] {
          for (std::size_t i = 0; i < grads.size(); ++i)
            sum_of_squares(context, grads[i].numel(), grads[i].f32(), i > 0, squares.f32());
          for (const auto& g : grads) clip(context, g.numel(), max_norm, squares.f32(), g.f32());
        },
        job_for_step("clip", message.step, message.replica));
  }
  std::string role() const override { return "grad_clipper to norm " + std::to_string(max_norm_); }

 private:
  float max_norm_;  // > 0
  sum_of_squares::function sum_of_squares_;
  clip_by_norm::function clip_;
};

}  // namespace

// Its signature: grads wires in and out, nothing else (validate_topology() refuses any other
// wire to or from a grad_clipper, naming it). Its one setting, max_norm, is required and
// positive; any other key in its [[actor]] table is refused, naming the table's position.
TROUPE_REGISTER_ACTOR_KIND(
    "grad_clipper",
    "scales one layer's gradients to a global L2 norm of at most max_norm, on a grads wire",
    troupe::accepts{"grads"}, troupe::emits{"grads"}, [](troupe::actor_spawn& spawn) {
      const auto max_norm = static_cast<float>(spawn.settings.number("max_norm", 1e-30, 1e30));
      return spawn.system.spawn<grad_clipper_actor>(spawn.name, max_norm, &spawn.on);
    });

}  // namespace custom_layers
