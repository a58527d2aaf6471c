// regression_loss.cpp: the three regression losses, mse_loss, l1_loss and huber_loss, over
// n predictions and targets, with their gradients, on the CPU.
//
// One loop, three element rules (the same rules as the CUDA kernels, regression_loss.cu):
// d = x - y, the loss of d and its derivative. The sums (loss, n, d^2, |d|: Note [loss sums]
// in include/troupe/ops.hpp) are accumulated in double and written once as float; the metrics
// (RMSE from d^2, MAE from |d|) come from the same pass. dx may be null or x itself.
#include <cmath>

#include "troupe/check.hpp"
#include "troupe/ops.hpp"

namespace troupe::kernels::cpu {
namespace {

struct squared {
  static double loss(double d, double) { return d * d; }
  static double gradient(double d, double) { return 2.0 * d; }
};

struct absolute {
  static double loss(double d, double) { return std::abs(d); }
  static double gradient(double d, double) { return d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0); }
};

struct huber {
  static double loss(double d, double delta) {
    const double a = std::abs(d);
    return a < delta ? 0.5 * d * d : delta * (a - 0.5 * delta);
  }
  static double gradient(double d, double delta) {
    return d > delta ? delta : (d < -delta ? -delta : d);
  }
};

template <class Rule>
void regression_loss(const context&, std::int64_t n, const float* x, const float* y,
                     float delta, float grad_scale, float* sums, float* dx) {
  TROUPE_CHECK(n >= 0, "a regression loss needs n >= 0, not " << n);
  double loss = 0.0, squares = 0.0, absolutes = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
    loss += Rule::loss(d, delta);
    squares += d * d;
    absolutes += std::abs(d);
    if (dx != nullptr)
      dx[i] = static_cast<float>(grad_scale * Rule::gradient(d, delta));
  }
  sums[0] = static_cast<float>(loss);
  sums[1] = static_cast<float>(n);
  sums[2] = static_cast<float>(squares);
  sums[3] = static_cast<float>(absolutes);
}

void huber_loss(const context& ctx, std::int64_t n, const float* x, const float* y, float delta,
                float grad_scale, float* sums, float* dx) {
  TROUPE_CHECK(delta > 0, "huber_loss needs delta > 0, not " << delta);
  regression_loss<huber>(ctx, n, x, y, delta, grad_scale, sums, dx);
}

}  // namespace

TROUPE_REGISTER_KERNEL(ops::mse_loss, device_type::cpu, regression_loss<squared>);
TROUPE_REGISTER_KERNEL(ops::l1_loss, device_type::cpu, regression_loss<absolute>);
TROUPE_REGISTER_KERNEL(ops::huber_loss, device_type::cpu, huber_loss);

}  // namespace troupe::kernels::cpu
