// bce_with_logits.cpp: the loss "bce_with_logits", binary cross-entropy on logits for
// binary and multi-label targets (0 or 1 per output, float), as
// torch.nn.functional.binary_cross_entropy_with_logits (mean over every element); its
// metric is accuracy over the elements (logit > 0 against target >= 0.5).
//
//     loss = "bce_with_logits"
#include "troupe/loss.hpp"

namespace troupe {
namespace {

class bce_with_logits_loss final : public loss_function {
 public:
  explicit bce_with_logits_loss(loss_settings& s)
      : function_(kernels::lookup<kernels::ops::bce_with_logits>(s.device())) {}

  loss_spec spec() const override {
    return {target_kind::values, kernels::no_ignore_index, {{"accuracy", false, true}}};
  }

  void compute(const kernels::context& context, const loss_job& job) const override {
    function_(context, job.rows * job.width, job.output, job.values, job.grad_scale, job.sums,
              job.doutput);
  }

 private:
  kernels::ops::bce_with_logits::function function_;
};

}  // namespace
}  // namespace troupe

TROUPE_REGISTER_LOSS("bce_with_logits",
                     "binary cross-entropy on logits, 0/1 targets per output (metric: accuracy)",
                     [](troupe::loss_settings& s) {
                       return std::make_unique<troupe::bce_with_logits_loss>(s);
                     });
