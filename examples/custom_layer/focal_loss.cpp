// focal_loss.cpp: a loss kind, "focal" (Lin et al. 2017, "Focal Loss for Dense Object
// Detection"), the softmax cross-entropy with each row's term scaled by (1 - p_y)^gamma, so
// that rows the model already gets right count less:
//
//     loss_row = -(1 - p_y)^gamma log p_y,         p = softmax(logits), y the row's class
//     d loss_row / d logit_c = g (onehot_c - p_c),  g = gamma (1 - p_y)^(gamma - 1) p_y log p_y
//                                                       - (1 - p_y)^gamma
//
// gamma = 0 is the plain cross-entropy. Its metric is accuracy. Written as a plugin's loss is
// (troupe/loss.hpp): a loss_function whose compute() fills the job's sums and gradient. The
// math is in double on the host, so the factory refuses devices of other types (a CUDA
// version would register its own kernel, as swish.cpp registers its CPU one).
//
//     [model]
//     loss = { type = "focal", gamma = 2.0 }
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "troupe/loss.hpp"

namespace {

class focal_loss final : public troupe::loss_function {
 public:
  explicit focal_loss(troupe::loss_settings& s) : gamma_(s.number("gamma", 2.0, 0.0, 10.0)) {
    if (s.device() != troupe::kernels::device_type::cpu)
      throw troupe::config_error(s.where(), "loss 'focal' (custom_layers plugin) runs on CPU "
                                            "devices only");
  }

  troupe::loss_spec spec() const override {
    return {troupe::target_kind::class_ids, troupe::kernels::no_ignore_index,
            {{"accuracy", false, true}}};
  }

  void compute(const troupe::kernels::context&, const troupe::loss_job& job) const override {
    const auto classes = job.width;
    std::vector<double> p(static_cast<std::size_t>(classes));
    double loss = 0, right = 0;
    for (std::int64_t r = 0; r < job.rows; ++r) {
      const float* x = job.output + r * classes;
      const auto y = job.class_ids[r];
      const auto best = std::max_element(x, x + classes) - x;  // the first on ties
      right += best == y ? 1 : 0;
      double sum = 0;
      for (std::int64_t c = 0; c < classes; ++c)
        sum += p[static_cast<std::size_t>(c)] = std::exp(static_cast<double>(x[c]) - x[best]);
      for (auto& v : p)
        v /= sum;
      const double py = p[static_cast<std::size_t>(y)];
      const double log_py = static_cast<double>(x[y]) - x[best] - std::log(sum);
      const double weight = std::pow(1.0 - py, gamma_);
      loss -= weight * log_py;
      if (job.doutput == nullptr)
        continue;
      const double g =
          (gamma_ > 0 ? gamma_ * std::pow(1.0 - py, gamma_ - 1.0) * py * log_py : 0.0) - weight;
      for (std::int64_t c = 0; c < classes; ++c)
        job.doutput[r * classes + c] = static_cast<float>(
            job.grad_scale * g * ((c == y ? 1.0 : 0.0) - p[static_cast<std::size_t>(c)]));
    }
    job.sums[0] = static_cast<float>(loss);
    job.sums[1] = static_cast<float>(job.rows);
    job.sums[2] = static_cast<float>(right);
  }

 private:
  double gamma_;
};

}  // namespace

TROUPE_REGISTER_LOSS("focal", "softmax cross-entropy scaled by (1 - p_y)^gamma (custom_layers)",
                     [](troupe::loss_settings& s) { return std::make_unique<focal_loss>(s); });
