// softmax_xent.cpp: softmax cross-entropy of logits(rows, classes) against integer
// labels(rows), with label smoothing, an ignored label and its gradient, on the CPU.
//
// Per row: m = max(logits), s = sum exp(logits - m) (accumulated in double), and with
// t = (1 - eps) onehot(label) + eps / classes:
//   loss_row = log(s) - (1 - eps) (logits[label] - m) - eps / classes * sum (logits - m)
//   dlogits  = grad_scale * (exp(logits - m) / s - t)        (never exp of a large number)
// The loss sum is accumulated in double and written once as float (Note [loss sums] in
// include/troupe/ops.hpp: no averaging here). dlogits may be null (loss only) or be
// logits itself. A row whose label is ignore_index adds nothing and gets a zero gradient.
#include <cmath>

#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

void softmax_xent(const context&, int rows, int classes, const float* logits,
                  const std::int32_t* labels, const xent_options& options, float grad_scale,
                  float* sums, float* dlogits) {
  TROUPE_CHECK(classes > 0 || rows == 0, "softmax_xent needs at least one class");
  const double smoothing = options.label_smoothing;
  const double spread = smoothing / classes;  // each class's share of the smoothing
  double total = 0.0;
  int counted = 0;
  for (int r = 0; r < rows; ++r) {
    const std::int64_t offset = static_cast<std::int64_t>(r) * classes;
    const float* row = logits + offset;
    const std::int32_t label = labels[r];
    if (label == options.ignore_index) {
      if (dlogits != nullptr)
        for (int c = 0; c < classes; ++c)
          dlogits[offset + c] = 0.0f;
      continue;
    }
    TROUPE_CHECK(label >= 0 && label < classes,
                 "label " << label << " of row " << r << " is outside [0, " << classes
                          << ")");
    ++counted;
    float max = row[0];
    for (int c = 1; c < classes; ++c)
      max = row[c] > max ? row[c] : max;
    // Read before dlogits (which may be logits) is written.
    const double label_logit = static_cast<double>(row[label]) - max;
    double logit_sum = 0.0;  // sum (logits - m), for the smoothing's term
    if (smoothing != 0.0)
      for (int c = 0; c < classes; ++c)
        logit_sum += static_cast<double>(row[c]) - max;

    double sum = 0.0;
    if (dlogits == nullptr) {
      for (int c = 0; c < classes; ++c)
        sum += std::exp(row[c] - max);
    } else {
      // libm's exp, not vector_math.hpp's: a loss over a few classes a row gains little, and
      // the optimizer trajectory test holds troupe to PyTorch's losses within 1e-4 for 20
      // Adam steps, which the polynomial's last bits (within 2e-7) moved past in a clang build.
      float* out = dlogits + offset;
      for (int c = 0; c < classes; ++c) {
        const float e = std::exp(row[c] - max);
        out[c] = e;
        sum += e;
      }
      const float scale = static_cast<float>(grad_scale / sum);
      for (int c = 0; c < classes; ++c)
        out[c] *= scale;
      if (smoothing == 0.0) {
        out[label] -= grad_scale;
      } else {
        const auto off = static_cast<float>(grad_scale * spread);
        for (int c = 0; c < classes; ++c)
          out[c] -= off;
        out[label] -= static_cast<float>(grad_scale * (1.0 - smoothing));
      }
    }
    total += std::log(sum) - (1.0 - smoothing) * label_logit - spread * logit_sum;
  }
  sums[0] = static_cast<float>(total);
  sums[1] = static_cast<float>(counted);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::softmax_xent, device_type::cpu, softmax_xent);

}  // namespace troupe::kernels::cpu
