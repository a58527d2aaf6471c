// softmax_xent_test.cpp: the CPU softmax cross-entropy against a double-precision
// reference, its gradient against central finite differences of the double loss, label
// smoothing and an ignored label (against the same reference and finite differences), huge
// logits, and the label range check. PyTorch's values on the same inputs:
// tests/actors/losses/loss_reference_test.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernel_test_support.hpp"
#include "troupe/error.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

const int shapes[][2] = {{1, 1}, {1, 10}, {7, 3}, {128, 10}, {5, 1000}};

// torch's cross_entropy(reduction="sum") with label_smoothing eps and ignore_index, in
// double: over rows not ignored, -sum_c t_c log softmax(z)_c, t = (1 - eps) onehot + eps / C.
template <class Logits>
double smoothed_reference(int rows, int classes, const Logits& z,
                          const std::vector<std::int32_t>& labels,
                          const kernels::xent_options& options) {
  const double eps = options.label_smoothing;
  double total = 0.0;
  for (int r = 0; r < rows; ++r) {
    if (labels[r] == options.ignore_index)
      continue;
    double max = z[r * classes];
    for (int c = 1; c < classes; ++c)
      max = std::max<double>(max, z[r * classes + c]);
    double sum = 0.0;
    for (int c = 0; c < classes; ++c)
      sum += std::exp(z[r * classes + c] - max);
    const double log_sum = std::log(sum) + max;
    for (int c = 0; c < classes; ++c) {
      const double target = (c == labels[r] ? 1.0 - eps : 0.0) + eps / classes;
      total += target * (log_sum - z[r * classes + c]);
    }
  }
  return total;
}

// sum over rows of -log softmax(z)[label], in double, computed the stable way.
template <class Logits>
double loss_reference(int rows, int classes, const Logits& z,
                      const std::vector<std::int32_t>& labels) {
  return smoothed_reference(rows, classes, z, labels, kernels::xent_options{});
}

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
    float loss[2] = {-1, -1};
    std::vector<float> dlogits(logits.size());
    xent(test::cpu_context(), rows, classes, logits.data(), labels.data(), {}, grad_scale, loss,
         dlogits.data());

    // Per row the float exponent (z - max) is rounded once (|z - max| <= 8: <= 4.8e-7
    // absolute) and expf adds ~1 ulp, so every term of the double sum is off by <= 6e-7
    // relative and log(sum) by <= 6e-7 absolute: allow 1e-6 per row.
    const double want_loss = loss_reference(rows, classes, logits, labels);
    CHECK(std::abs(loss[0] - want_loss) <= 1e-6 * rows + 1.2e-7 * std::abs(want_loss));

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

    float loss_only[2] = {-1, -1};
    xent(test::cpu_context(), rows, classes, logits.data(), labels.data(), {}, grad_scale,
         loss_only, nullptr);
    CHECK(loss_only[0] == loss[0]);
    CHECK(loss_only[1] == loss[1]);
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
    float loss[2] = {};
    std::vector<float> dlogits(logits.size());
    xent(test::cpu_context(), rows, classes, logits.data(), labels.data(), {}, grad_scale, loss,
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
  float loss[2] = {};
  std::vector<float> dlogits(9);
  xent(test::cpu_context(), 3, 3, logits.data(), labels.data(), {}, 1.0f, loss, dlogits.data());
  // softmax = (1, e^-2000, e^-1000) = (1, 0, 0) in double; -log of it per row:
  //   label 0: log(1 + e^-1000 + e^-2000) = 0, label 1: 2000, label 2: 1000.
  CHECK(loss[0] == 3000.0f);
  CHECK(loss[1] == 3.0f);
  // dlogits = softmax - onehot: (0, 0, 0), (1, -1, 0), (1, 0, -1).
  CHECK(dlogits == std::vector<float>{0, 0, 0, 1, -1, 0, 1, 0, -1});
}

TEST_CASE("softmax_xent may write its gradient over the logits") {
  auto xent = kernels::lookup<kernels::ops::softmax_xent>(kernels::device_type::cpu);
  const auto logits = test::random_floats(4 * 10, 400, -4.0f, 4.0f);
  const auto labels = test::random_labels(4, 10, 401);
  float loss[2] = {}, loss_in_place[2] = {};
  std::vector<float> dlogits(logits.size());
  xent(test::cpu_context(), 4, 10, logits.data(), labels.data(), {}, 0.5f, loss, dlogits.data());
  auto in_place = logits;
  xent(test::cpu_context(), 4, 10, in_place.data(), labels.data(), {}, 0.5f, loss_in_place,
       in_place.data());
  CHECK(loss_in_place[0] == loss[0]);
  CHECK(in_place == dlogits);
}

TEST_CASE("softmax_xent rejects a label that is not a class index") {
  auto xent = kernels::lookup<kernels::ops::softmax_xent>(kernels::device_type::cpu);
  const std::vector<float> logits(2 * 3, 0.0f);
  float loss[2] = {};
  for (std::int32_t bad : {-1, 3}) {
    const std::vector<std::int32_t> labels{0, bad};
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(xent(test::cpu_context(), 2, 3, logits.data(), labels.data(), {}, 1.0f,
                              loss, nullptr),
                         doctest::Contains("outside [0, 3)"), check_failure);
  }
}

TEST_CASE("softmax_xent with label smoothing and an ignored label matches the reference and "
          "its finite differences") {
  auto xent = kernels::lookup<kernels::ops::softmax_xent>(kernels::device_type::cpu);
  const int rows = 9, classes = 7;
  const auto logits = test::random_floats(rows * classes, 700, -4.0f, 4.0f);
  auto labels = test::random_labels(rows, classes, 701);
  labels[2] = labels[5] = 3;  // some rows of the ignored label, and the others not
  labels[0] = 0;
  kernels::xent_options cases[4];
  cases[1].label_smoothing = 0.1f;
  cases[2].ignore_index = 3;
  cases[3].label_smoothing = 0.25f;
  cases[3].ignore_index = 3;
  for (const auto& options : cases) {
    CAPTURE(options.label_smoothing);
    CAPTURE(options.ignore_index);
    const float grad_scale = 0.5f;
    float sums[2] = {-1, -1};
    std::vector<float> dlogits(logits.size(), -7.0f);
    xent(test::cpu_context(), rows, classes, logits.data(), labels.data(), options, grad_scale,
         sums, dlogits.data());
    const int counted =
        options.ignore_index == 3
            ? rows - static_cast<int>(std::count(labels.begin(), labels.end(), 3))
            : rows;
    CHECK(sums[1] == static_cast<float>(counted));
    // The smoothing adds eps / C * sum (z - max), |.| <= 8 a row, in double: the bound of
    // the first test holds.
    const double want = smoothed_reference(rows, classes, logits, labels, options);
    CHECK(std::abs(sums[0] - want) <= 1e-6 * rows + 1.2e-7 * std::abs(want));

    // Central differences of the double loss (h and its error as in the test above).
    const double h = 1e-4;
    std::vector<double> perturbed(logits.begin(), logits.end());
    std::vector<double> expected(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i) {
      perturbed[i] = logits[i] + h;
      const double up = smoothed_reference(rows, classes, perturbed, labels, options);
      perturbed[i] = logits[i] - h;
      const double down = smoothed_reference(rows, classes, perturbed, labels, options);
      perturbed[i] = logits[i];
      expected[i] = grad_scale * (up - down) / (2 * h);
    }
    TROUPE_CHECK_CLOSE(dlogits, expected, grad_scale * 1e-6, 0.0);
    for (int r = 0; r < rows; ++r)  // an ignored row's gradient is written: zero
      if (labels[r] == options.ignore_index)
        for (int c = 0; c < classes; ++c)
          CHECK(dlogits[r * classes + c] == 0.0f);
  }
}

TEST_CASE("softmax_xent with every row ignored adds nothing and counts none") {
  auto xent = kernels::lookup<kernels::ops::softmax_xent>(kernels::device_type::cpu);
  const std::vector<float> logits{1, 2, 3, 4};
  const std::vector<std::int32_t> labels{-100, -100};  // torch's default ignore_index
  kernels::xent_options options;
  options.ignore_index = -100;
  float sums[2] = {-1, -1};
  std::vector<float> dlogits(4, 9.0f);
  xent(test::cpu_context(), 2, 2, logits.data(), labels.data(), options, 1.0f, sums,
       dlogits.data());
  CHECK(sums[0] == 0.0f);
  CHECK(sums[1] == 0.0f);
  CHECK(dlogits == std::vector<float>(4, 0.0f));
}
