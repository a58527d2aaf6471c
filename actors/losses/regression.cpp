// regression.cpp: the losses "mse", "l1" and "huber" over float targets of the output's
// shape, as torch.nn.functional's mse_loss, l1_loss and huber_loss (mean over every
// element); their metrics are RMSE and MAE over the elements.
//
//     loss = "mse"
//     loss = { type = "huber", delta = 0.5 }
#include "troupe/loss.hpp"

namespace troupe {
namespace {

class regression_loss final : public loss_function {
 public:
  regression_loss(kernels::ops::mse_loss::function function, float delta)
      : function_(function), delta_(delta) {}

  loss_spec spec() const override {
    return {target_kind::values, kernels::no_ignore_index, {{"rmse", true, false}, {"mae"}}};
  }

  void compute(const kernels::context& context, const loss_job& job) const override {
    function_(context, job.rows * job.width, job.output, job.values, delta_, job.grad_scale,
              job.sums, job.doutput);
  }

 private:
  kernels::ops::mse_loss::function function_;
  float delta_;
};

}  // namespace
}  // namespace troupe

TROUPE_REGISTER_LOSS("mse", "mean squared error over float targets (metrics: RMSE, MAE)",
                     [](troupe::loss_settings& s) {
                       using namespace troupe;
                       return std::make_unique<regression_loss>(
                           kernels::lookup<kernels::ops::mse_loss>(s.device()), 0.0f);
                     });
TROUPE_REGISTER_LOSS("l1", "mean absolute error over float targets (metrics: RMSE, MAE)",
                     [](troupe::loss_settings& s) {
                       using namespace troupe;
                       return std::make_unique<regression_loss>(
                           kernels::lookup<kernels::ops::l1_loss>(s.device()), 0.0f);
                     });
TROUPE_REGISTER_LOSS("huber", "Huber loss over float targets, delta = 1 (metrics: RMSE, MAE)",
                     [](troupe::loss_settings& s) {
                       using namespace troupe;
                       const auto delta = s.number("delta", 1.0, 1e-30, 1e30);
                       return std::make_unique<regression_loss>(
                           kernels::lookup<kernels::ops::huber_loss>(s.device()),
                           static_cast<float>(delta));
                     });
