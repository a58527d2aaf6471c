// bce_with_logits.cpp: binary cross-entropy on logits over n elements, with its gradient
// and the elements classified right, on the CPU.
//
//   loss = max(x, 0) - x y + log1p(exp(-|x|))     (never exp of a positive number)
//   dx   = grad_scale * (sigmoid(x) - y)
// The sums (loss, n, right: Note [loss sums] in include/troupe/ops.hpp) are accumulated in
// double and written once as float. Targets may be soft (any value in [0, 1]); "right" is
// (x > 0) == (y >= 0.5). dx may be null or x itself.
#include <algorithm>
#include <cmath>

#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

void bce_with_logits(const context&, std::int64_t n, const float* x, const float* y,
                     float grad_scale, float* sums, float* dx) {
  TROUPE_CHECK(n >= 0, "bce_with_logits needs n >= 0, not " << n);
  double loss = 0.0;
  std::int64_t right = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double logit = x[i];
    const double target = y[i];
    loss += std::max(logit, 0.0) - logit * target + std::log1p(std::exp(-std::abs(logit)));
    right += ((logit > 0) == (target >= 0.5)) ? 1 : 0;
    if (dx != nullptr) {
      // sigmoid without overflow: e = exp(-|x|) <= 1.
      const double e = std::exp(-std::abs(logit));
      const double sigmoid = logit >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
      dx[i] = static_cast<float>(grad_scale * (sigmoid - target));
    }
  }
  sums[0] = static_cast<float>(loss);
  sums[1] = static_cast<float>(n);
  sums[2] = static_cast<float>(right);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::bce_with_logits, device_type::cpu, bce_with_logits);

}  // namespace troupe::kernels::cpu
