// focal_test.cpp: the plugin's "focal" loss, loaded the way `troupe run` loads it
// (load_plugin, then the loss registry), against a double-precision reference of its value
// and central finite differences of its gradient; gamma = 0 gives the plain cross-entropy
// of the built-in softmax_xent. It uses the installed facade only (troupe/*.hpp).
//
// Built only with -DCUSTOM_LAYERS_BUILD_TESTS=ON (scripts/check-install.sh does) and run as
// ./build/focal_test.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "troupe/loss.hpp"
#include "troupe/plugin.hpp"

using namespace troupe;

namespace {

constexpr int rows = 5, classes = 4;

/// sum over rows of -(1 - p_y)^gamma log p_y, in double.
double reference(const std::vector<double>& x, const std::vector<std::int32_t>& y, double gamma) {
  double total = 0;
  for (int r = 0; r < rows; ++r) {
    double max = x[r * classes], sum = 0;
    for (int c = 1; c < classes; ++c)
      max = std::max(max, x[r * classes + c]);
    for (int c = 0; c < classes; ++c)
      sum += std::exp(x[r * classes + c] - max);
    const double log_py = x[r * classes + y[r]] - max - std::log(sum);
    total -= std::pow(1 - std::exp(log_py), gamma) * log_py;
  }
  return total;
}

/// The loss `type` with `gamma` (when not negative) for a CPU device.
std::unique_ptr<loss_function> make(const std::string& type, double gamma) {
  load_plugin(CUSTOM_LAYERS_PLUGIN);
  setting_map values;
  if (gamma >= 0)
    values["gamma"] = setting_value{gamma, {}};
  loss_settings settings{type, values, {}, kernels::device_type::cpu};
  return create_loss(settings);  // what a run does with [model] loss
}

/// Runs `loss` on x and y; returns sums and fills the gradient (grad_scale 1).
std::vector<float> run(const loss_function& loss, const std::vector<float>& x,
                       const std::vector<std::int32_t>& y, std::vector<float>& gradient) {
  std::vector<float> sums(2 + loss_job::max_metrics, 0.0f);
  gradient.assign(x.size(), 0.0f);
  loss_job job;
  job.rows = rows;
  job.width = classes;
  job.output = x.data();
  job.class_ids = y.data();
  job.grad_scale = 1.0f;
  job.sums = sums.data();
  job.doutput = gradient.data();
  loss.compute(kernels::context{}, job);
  return sums;
}

}  // namespace

TEST_CASE("focal matches its reference and the finite differences of it") {
  std::mt19937 engine{3};
  std::uniform_real_distribution<float> uniform{-3.0f, 3.0f};
  std::vector<float> x(rows * classes);
  for (auto& v : x)
    v = uniform(engine);
  const std::vector<std::int32_t> y{0, 3, 1, 1, 2};
  for (double gamma : {0.0, 0.5, 2.0}) {
    CAPTURE(gamma);
    auto loss = make("focal", gamma);
    std::vector<float> gradient;
    const auto sums = run(*loss, x, y, gradient);
    const std::vector<double> at(x.begin(), x.end());
    const double want = reference(at, y, gamma);
    // Double inside, rounded once to float.
    CHECK(std::abs(sums[0] - want) <= 1e-6 * std::abs(want));
    CHECK(sums[1] == rows);
    // h = 1e-5 on a smooth function of size ~1: truncation ~1e-10, rounding ~1e-11.
    const double h = 1e-5;
    for (std::size_t i = 0; i < x.size(); ++i) {
      auto up = at, down = at;
      up[i] += h;
      down[i] -= h;
      const double expected = (reference(up, y, gamma) - reference(down, y, gamma)) / (2 * h);
      CHECK(std::abs(gradient[i] - expected) <= 1e-6);
    }
  }
}

TEST_CASE("focal with gamma 0 is the built-in softmax_xent") {
  std::vector<float> x(rows * classes);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = 0.37f * static_cast<float>(i % 7) - 1.0f;
  const std::vector<std::int32_t> y{2, 0, 3, 1, 1};
  std::vector<float> focal_gradient, xent_gradient;
  const auto focal = run(*make("focal", 0.0), x, y, focal_gradient);
  const auto xent = run(*make("softmax_xent", -1), x, y, xent_gradient);
  CHECK(focal[0] == doctest::Approx(xent[0]).epsilon(1e-6));
  CHECK(focal[2] == xent[2]);  // the same rows right
  for (std::size_t i = 0; i < x.size(); ++i)
    CHECK(focal_gradient[i] == doctest::Approx(xent_gradient[i]).epsilon(1e-5));
}
