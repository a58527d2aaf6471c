// softmax_xent.cpp: the loss "softmax_xent", softmax cross-entropy over class logits, as
// torch.nn.functional.cross_entropy with its label_smoothing and ignore_index; its metric
// is accuracy (over the rows counted).
//
//     loss = "softmax_xent"
//     loss = { type = "softmax_xent", label_smoothing = 0.1, ignore_index = 0 }
#include "troupe/loss.hpp"

namespace troupe {
namespace {

class softmax_xent_loss final : public loss_function {
 public:
  explicit softmax_xent_loss(loss_settings& s)
      : xent_(kernels::lookup<kernels::ops::softmax_xent>(s.device())),
        accuracy_(kernels::lookup<kernels::ops::accuracy>(s.device())) {
    options_.label_smoothing = static_cast<float>(s.number("label_smoothing", 0.0, 0.0, 1.0));
    // A class index or a padding id; INT32_MIN is no_ignore_index.
    if (s.has("ignore_index"))
      options_.ignore_index = static_cast<std::int32_t>(
          s.integer("ignore_index", INT32_MIN + 1, INT32_MAX));
  }

  loss_spec spec() const override {
    return {target_kind::class_ids, options_.ignore_index, {{"accuracy", false, true}}};
  }

  void compute(const kernels::context& context, const loss_job& job) const override {
    const auto rows = static_cast<int>(job.rows);
    const auto classes = static_cast<int>(job.width);
    xent_(context, rows, classes, job.output, job.class_ids, options_, job.grad_scale, job.sums,
          job.doutput);
    accuracy_(context, rows, classes, job.output, job.class_ids, options_.ignore_index,
              job.sums + 2);
  }

 private:
  kernels::ops::softmax_xent::function xent_;
  kernels::ops::accuracy::function accuracy_;
  kernels::xent_options options_;
};

}  // namespace
}  // namespace troupe

TROUPE_REGISTER_LOSS("softmax_xent",
                     "softmax cross-entropy over class logits (label_smoothing, ignore_index)",
                     [](troupe::loss_settings& s) {
                       return std::make_unique<troupe::softmax_xent_loss>(s);
                     });
