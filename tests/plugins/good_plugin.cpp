// good_plugin.cpp: a well-formed troupe plugin, as the tests load it: a layer
// ("test_scale", y = a * x with a learnable a per feature), an actor kind
// ("test_grad_scaler", which multiplies the gradients passing through it by its `factor`
// setting; it accepts and emits grads wires, so it can sit between a layer and its
// averager or optimizer) and a loss ("test_margin", the multi-class hinge loss of
// torch.nn.MultiMarginLoss, on CPU devices).
#include "tests/plugins/scale_layer.hpp"
#include "troupe/actor_kind.hpp"
#include "troupe/loss.hpp"
#include "troupe/ops.hpp"
#include "troupe/plugin.hpp"

TROUPE_PLUGIN("troupe_test_plugin");

namespace {

TROUPE_REGISTER_LAYER("test_scale", "y = a * x, a learnable per feature (test plugin)",
                      scale_layer_factory(scale_fault::none));

/// Scales each weight_grads_msg in place (the sender hands its tensors over, see
/// troupe/messages.hpp) on its device's stream and passes it on to its one grads sink.
class grad_scaler final : public troupe::grads_filter {
 public:
  grad_scaler(caf::actor_config& config, std::string name, float factor, troupe::device* on)
      : grads_filter(config, std::move(name), on, "scaled"),
        factor_(factor),
        scale_(troupe::kernels::lookup<troupe::kernels::ops::scale>(this->on().id().type)) {}

 protected:
  troupe::event transform(std::vector<troupe::tensor>& grads,
                          const troupe::weight_grads_msg& message) override {
    return on().work().submit(
        [scale = scale_, context = on().context(), grads, f = factor_] {
          for (const auto& g : grads)
            scale(context, g.numel(), f, g.f32());
        },
        job_for_step("scale", message.step, message.replica));
  }
  std::string role() const override {
    return "test_grad_scaler, factor " + std::to_string(factor_);
  }

 private:
  float factor_;
  troupe::kernels::ops::scale::function scale_;
};

TROUPE_REGISTER_ACTOR_KIND("test_grad_scaler",
                           "multiplies the gradients passing through by `factor` (test plugin)",
                           troupe::accepts{"grads"}, troupe::emits{"grads"},
                           [](troupe::actor_spawn& spawn) {
                             const auto factor = spawn.settings.number("factor", -1e30, 1e30);
                             return spawn.system.spawn<grad_scaler>(
                                 spawn.name, static_cast<float>(factor), &spawn.on);
                           });

/// torch.nn.MultiMarginLoss (p = 1, margin = `margin`): a row's loss is
/// sum over c != y of max(0, margin - x_y + x_c) / classes; its metric is accuracy. The math
/// runs on the host: the factory refuses devices of other types.
class margin_loss final : public troupe::loss_function {
 public:
  explicit margin_loss(troupe::loss_settings& s)
      : margin_(s.number("margin", 1.0, 0.0, 1e6)) {
    if (s.device() != troupe::kernels::device_type::cpu)
      throw troupe::config_error(s.where(), "loss 'test_margin' runs on CPU devices only");
  }

  troupe::loss_spec spec() const override {
    return {troupe::target_kind::class_ids, troupe::kernels::no_ignore_index,
            {{"accuracy", false, true}}};
  }

  void compute(const troupe::kernels::context&, const troupe::loss_job& job) const override {
    double loss = 0, right = 0;
    const auto classes = job.width;
    for (std::int64_t r = 0; r < job.rows; ++r) {
      const float* x = job.output + r * classes;
      const auto y = job.class_ids[r];
      std::int64_t best = 0;
      for (std::int64_t c = 0; c < classes; ++c) {
        best = x[c] > x[best] ? c : best;
        const double hinge = margin_ - x[y] + x[c];
        const bool active = c != y && hinge > 0;
        loss += active ? hinge / static_cast<double>(classes) : 0.0;
        if (job.doutput != nullptr)
          job.doutput[r * classes + c] = 0.0f;
      }
      right += best == y ? 1 : 0;
      for (std::int64_t c = 0; job.doutput != nullptr && c < classes; ++c)
        if (c != y && margin_ - x[y] + x[c] > 0) {
          const auto g = job.grad_scale / static_cast<float>(classes);
          job.doutput[r * classes + c] += g;
          job.doutput[r * classes + y] -= g;
        }
    }
    job.sums[0] = static_cast<float>(loss);
    job.sums[1] = static_cast<float>(job.rows);
    job.sums[2] = static_cast<float>(right);
  }

 private:
  double margin_;
};

TROUPE_REGISTER_LOSS("test_margin", "multi-class hinge loss (test plugin)",
                     [](troupe::loss_settings& s) { return std::make_unique<margin_loss>(s); });

}  // namespace
