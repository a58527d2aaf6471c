// softmax_xent.cpp: softmax cross-entropy of logits(rows, classes) against integer
// labels(rows), with its gradient, on the CPU.
//
// Per row: m = max(logits), s = sum exp(logits - m) (accumulated in double), and
//   loss_row = log(s) - (logits[label] - m)      (never exp of a large number)
//   dlogits  = grad_scale * (exp(logits - m) / s - onehot(label))
// *loss_sum is the sum of loss_row over rows, accumulated in double and written once as
// float. It does not average over rows: the caller folds 1/global_batch into grad_scale
// and divides the loss sum itself. dlogits may be null (loss only) or be logits itself.
#include <cmath>

#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

void softmax_xent(const context&, int rows, int classes, const float* logits,
                  const std::int32_t* labels, float grad_scale, float* loss_sum,
                  float* dlogits) {
  TROUPE_CHECK(classes > 0 || rows == 0, "softmax_xent needs at least one class");
  double total = 0.0;
  for (int r = 0; r < rows; ++r) {
    const std::int64_t offset = static_cast<std::int64_t>(r) * classes;
    const float* row = logits + offset;
    const std::int32_t label = labels[r];
    TROUPE_CHECK(label >= 0 && label < classes,
                 "label " << label << " of row " << r << " is outside [0, " << classes
                          << ")");
    float max = row[0];
    for (int c = 1; c < classes; ++c)
      max = row[c] > max ? row[c] : max;
    // Read before dlogits (which may be logits) is written.
    const double label_logit = static_cast<double>(row[label]) - max;

    double sum = 0.0;
    if (dlogits == nullptr) {
      for (int c = 0; c < classes; ++c)
        sum += std::exp(row[c] - max);
    } else {
      float* out = dlogits + offset;
      for (int c = 0; c < classes; ++c) {
        const float e = std::exp(row[c] - max);
        out[c] = e;
        sum += e;
      }
      const float scale = static_cast<float>(grad_scale / sum);
      for (int c = 0; c < classes; ++c)
        out[c] *= scale;
      out[label] -= grad_scale;
    }
    total += std::log(sum) - label_logit;
  }
  *loss_sum = static_cast<float>(total);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::softmax_xent, device_type::cpu, softmax_xent);

}  // namespace troupe::kernels::cpu
