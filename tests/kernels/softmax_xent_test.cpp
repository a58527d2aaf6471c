// softmax_xent_test.cpp: the CPU softmax cross-entropy against a double-precision
// reference, its gradient against central finite differences of the double loss, huge
// logits, and the label range check.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/error.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

// sum over rows of -log softmax(z)[label], in double, computed the stable way.
template <class Logits>
double loss_reference(int rows, int classes, const Logits& z,
                      const std::vector<std::int32_t>& labels) {
  double total = 0.0;
  for (int r = 0; r < rows; ++r) {
    double max = z[r * classes];
    for (int c = 1; c < classes; ++c)
      max = std::max<double>(max, z[r * classes + c]);
    double sum = 0.0;
    for (int c = 0; c < classes; ++c)
      sum += std::exp(z[r * classes + c] - max);
    total += std::log(sum) + max - z[r * classes + labels[r]];
  }
  return total;
}

const int shapes[][2] = {{1, 1}, {1, 10}, {7, 3}, {128, 10}, {5, 1000}};

}  // namespace

TEST_CASE("softmax_xent's loss and gradient match a double-precision reference") {
  auto xent = kernels::lookup<kernels::ops::softmax_xent>(kernels::device_type::cpu);
  std::uint32_t seed = 200;
  for (const auto& shape : shapes) {
    const int rows = shape[0], classes = shape[1];
    CAPTURE(rows);
    CAPTURE(classes);
    const auto logits = test::random_floats(static_cast<std::size_t>(rows) * classes,
                                            ++seed, -4.0f, 4.0f);
    const auto labels = test::random_labels(rows, classes, ++seed);
    const float grad_scale = 1.0f / 128.0f;
    float loss = -1.0f;
    std::vector<float> dlogits(logits.size());
    xent(test::cpu_context(), rows, classes, logits.data(), labels.data(), grad_scale, &loss,
         dlogits.data());

    // Per row the float exponent (z - max) is rounded once (|z - max| <= 8: <= 4.8e-7
    // absolute) and expf adds ~1 ulp, so every term of the double sum is off by <= 6e-7
    // relative and log(sum) by <= 6e-7 absolute: allow 1e-6 per row.
    const double want_loss = loss_reference(rows, classes, logits, labels);
    CHECK(std::abs(loss - want_loss) <= 1e-6 * rows + 1.2e-7 * std::abs(want_loss));

    std::vector<double> want(logits.size());
    for (int r = 0; r < rows; ++r) {
      double max = *std::max_element(logits.begin() + r * classes,
                                     logits.begin() + (r + 1) * classes);
      double sum = 0.0;
      for (int c = 0; c < classes; ++c)
        sum += std::exp(logits[r * classes + c] - max);
      for (int c = 0; c < classes; ++c)
        want[r * classes + c] = grad_scale * (std::exp(logits[r * classes + c] - max) / sum -
                                              (c == labels[r] ? 1.0 : 0.0));
    }
    // Probabilities carry the same <= 6e-7 relative error plus two roundings (scale/sum,
    // the product); the label's "- grad_scale" cancels, so the bound is absolute:
    // grad_scale * 1e-6.
    TROUPE_CHECK_CLOSE(dlogits, want, grad_scale * 1e-6, 0.0);

    float loss_only = -1.0f;
    xent(test::cpu_context(), rows, classes, logits.data(), labels.data(), grad_scale,
         &loss_only, nullptr);
    CHECK(loss_only == loss);
  }
}

TEST_CASE("softmax_xent's gradient matches central finite differences of the double loss") {
  auto xent = kernels::lookup<kernels::ops::softmax_xent>(kernels::device_type::cpu);
  std::uint32_t seed = 300;
  for (const auto& shape : shapes) {
    const int rows = shape[0], classes = std::min(shape[1], 50);  // keep O(n^2) small
    CAPTURE(rows);
    CAPTURE(classes);
    const auto logits = test::random_floats(static_cast<std::size_t>(rows) * classes,
                                            ++seed, -4.0f, 4.0f);
    const auto labels = test::random_labels(rows, classes, ++seed);
    const float grad_scale = 0.25f;
    float loss = 0.0f;
    std::vector<float> dlogits(logits.size());
    xent(test::cpu_context(), rows, classes, logits.data(), labels.data(), grad_scale, &loss,
         dlogits.data());

    // d(grad_scale * L)/dz by central differences of the double loss at the float logits.
    // h = 1e-4: truncation h^2/6 * |L'''| (softmax's third derivative is < 1) < 2e-9;
    // rounding: L is a sum of `rows` terms of size <= 10, eps_double * 10 * rows / h is
    // < 1e-8 for the largest case.
    const double h = 1e-4;
    std::vector<double> perturbed(logits.begin(), logits.end());
    std::vector<double> want(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i) {
      perturbed[i] = logits[i] + h;
      const double up = loss_reference(rows, classes, perturbed, labels);
      perturbed[i] = logits[i] - h;
      const double down = loss_reference(rows, classes, perturbed, labels);
      perturbed[i] = logits[i];
      want[i] = grad_scale * (up - down) / (2 * h);
    }
    // The float gradient is within grad_scale * 1e-6 of the exact one (see the test above).
    TROUPE_CHECK_CLOSE(dlogits, want, grad_scale * 1e-6, 0.0);
  }
}

TEST_CASE("softmax_xent stays finite for logits of +-1000") {
  auto xent = kernels::lookup<kernels::ops::softmax_xent>(kernels::device_type::cpu);
  // Three rows, the same logits; the label picks the largest, the smallest, the middle.
  const std::vector<float> logits{1000, -1000, 0, 1000, -1000, 0, 1000, -1000, 0};
  const std::vector<std::int32_t> labels{0, 1, 2};
  float loss = 0.0f;
  std::vector<float> dlogits(9);
  xent(test::cpu_context(), 3, 3, logits.data(), labels.data(), 1.0f, &loss, dlogits.data());
  // softmax = (1, e^-2000, e^-1000) = (1, 0, 0) in double; -log of it per row:
  //   label 0: log(1 + e^-1000 + e^-2000) = 0, label 1: 2000, label 2: 1000.
  CHECK(loss == 3000.0f);
  // dlogits = softmax - onehot: (0, 0, 0), (1, -1, 0), (1, 0, -1).
  CHECK(dlogits == std::vector<float>{0, 0, 0, 1, -1, 0, 1, 0, -1});
}

TEST_CASE("softmax_xent may write its gradient over the logits") {
  auto xent = kernels::lookup<kernels::ops::softmax_xent>(kernels::device_type::cpu);
  const auto logits = test::random_floats(4 * 10, 400, -4.0f, 4.0f);
  const auto labels = test::random_labels(4, 10, 401);
  float loss = 0.0f, loss_in_place = 0.0f;
  std::vector<float> dlogits(logits.size());
  xent(test::cpu_context(), 4, 10, logits.data(), labels.data(), 0.5f, &loss, dlogits.data());
  auto in_place = logits;
  xent(test::cpu_context(), 4, 10, in_place.data(), labels.data(), 0.5f, &loss_in_place,
       in_place.data());
  CHECK(loss_in_place == loss);
  CHECK(in_place == dlogits);
}

TEST_CASE("softmax_xent rejects a label that is not a class index") {
  auto xent = kernels::lookup<kernels::ops::softmax_xent>(kernels::device_type::cpu);
  const std::vector<float> logits(2 * 3, 0.0f);
  float loss = 0.0f;
  for (std::int32_t bad : {-1, 3}) {
    const std::vector<std::int32_t> labels{0, bad};
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(xent(test::cpu_context(), 2, 3, logits.data(), labels.data(), 1.0f,
                              &loss, nullptr),
                         doctest::Contains("outside [0, 3)"), check_failure);
  }
}
