// adam_update_test.cpp: the CPU Adam/AdamW step against hand-computed steps and against
// torch.optim.Adam / AdamW's own numbers in tests/reference/optimizer_reference.json.
//
// The hand-computed cases use eps = 0 and dyadic numbers, so that most results are exact;
// where a sqrt or a 1/3 rounds, the tolerance says how far.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "kernel_test_support.hpp"
#include "kernels/ops.hpp"
#include "runtime/error.hpp"

using namespace troupe;

namespace {

struct adam_run {
  std::vector<float> param, m, v;
  kernels::adam_hyper hyper;

  explicit adam_run(std::vector<float> initial)
      : param(std::move(initial)), m(param.size(), 0.0f), v(param.size(), 0.0f) {
    hyper.step = 0;
  }

  void step(const std::vector<float>& grad) {
    auto adam = kernels::lookup<kernels::ops::adam_update>(kernels::device_type::cpu);
    ++hyper.step;
    adam(test::cpu_context(), static_cast<std::int64_t>(param.size()), param.data(),
         grad.data(), m.data(), v.data(), hyper);
  }
};

// lr = 1/8, beta1 = 1/2, beta2 = 3/4, eps = 0: simple enough to do by hand.
adam_run hand_run(std::vector<float> initial) {
  adam_run run{std::move(initial)};
  run.hyper.lr = 0.125f;
  run.hyper.beta1 = 0.5f;
  run.hyper.beta2 = 0.75f;
  run.hyper.eps = 0.0f;
  return run;
}

}  // namespace

TEST_CASE("Adam's first step moves every parameter by lr against the gradient's sign") {
  auto run = hand_run({1.0f, -1.0f});
  run.step({2.0f, -0.5f});
  // Element 0: m = 0.5 * 2 = 1, v = 0.25 * 4 = 1; bias corrections 1 - 0.5 = 0.5 and
  // 1 - 0.75 = 0.25; step size 0.125 / 0.5 = 0.25; denom sqrt(1) / sqrt(0.25) = 2;
  // p = 1 - 0.25 * (1 / 2) = 0.875.
  // Element 1: m = -0.25, v = 0.0625, denom = 0.25 / 0.5 = 0.5, p = -1 + 0.25 * 0.5.
  CHECK(run.m == std::vector<float>{1.0f, -0.25f});
  CHECK(run.v == std::vector<float>{1.0f, 0.0625f});
  CHECK(run.param == std::vector<float>{0.875f, -0.875f});
}

TEST_CASE("Adam's second step uses the step-2 bias corrections") {
  auto run = hand_run({1.0f});
  run.step({2.0f});
  run.step({2.0f});
  // m = 0.5 * 1 + 0.5 * 2 = 1.5; v = 0.75 * 1 + 0.25 * 4 = 1.75;
  // step size = 0.125 / (1 - 0.25) = 1/6; denom = sqrt(1.75) / sqrt(1 - 0.5625) = 2;
  // p = 0.875 - (1/6) * (1.5 / 2) = 0.75.
  CHECK(run.m[0] == 1.5f);
  CHECK(run.v[0] == 1.75f);
  // 1/6 and the two square roots round (each within half an ulp); 3 ulps of 0.75.
  CHECK(std::abs(run.param[0] - 0.75) <= 3 * 6e-8);
}

TEST_CASE("Adam's weight decay is added to the gradient (L2), AdamW's decays the weight") {
  auto adam = hand_run({1.0f});
  adam.hyper.weight_decay = 0.5f;
  adam.step({1.5f});
  // g = 1.5 + 0.5 * 1 = 2, then as the first step above: p = 1 - 0.125 = 0.875.
  CHECK(adam.m[0] == 1.0f);
  CHECK(adam.param[0] == 0.875f);

  auto adamw = hand_run({1.0f});
  adamw.hyper.weight_decay = 0.5f;
  adamw.hyper.decoupled = true;
  adamw.step({2.0f});
  // p = 1 * (1 - 0.125 * 0.5) = 0.9375, the moments see g = 2 unchanged, then
  // p = 0.9375 - 0.125 = 0.8125.
  CHECK(adamw.m[0] == 1.0f);
  CHECK(adamw.param[0] == 0.8125f);
}

TEST_CASE("Adam's eps keeps a zero gradient from dividing by zero") {
  adam_run run{{1.0f}};
  run.step({0.0f});
  // m = v = 0, denom = 0 + 1e-8: p = 1 - step * 0 / 1e-8 = 1.
  CHECK(run.param[0] == 1.0f);
}

TEST_CASE("Adam's step count is 1-based") {
  auto adam = kernels::lookup<kernels::ops::adam_update>(kernels::device_type::cpu);
  std::vector<float> p{1.0f}, g{1.0f}, m{0.0f}, v{0.0f};
  kernels::adam_hyper hyper;
  hyper.step = 0;
  CHECK_THROWS_AS(adam(test::cpu_context(), 1, p.data(), g.data(), m.data(), v.data(), hyper),
                  check_failure);
}

TEST_CASE("Adam over a long vector matches a double-precision reference") {
  const std::size_t n = 1027;  // odd: the vector body and the scalar tail both run
  adam_run run{test::random_floats(n, 700)};
  run.hyper.weight_decay = 0.01f;
  run.hyper.decoupled = true;
  std::vector<double> p(run.param.begin(), run.param.end()), m(n), v(n);
  const double lr = run.hyper.lr, b1 = run.hyper.beta1, b2 = run.hyper.beta2;
  const double eps = run.hyper.eps, wd = run.hyper.weight_decay;
  for (int step = 1; step <= 4; ++step) {
    const auto grad = test::random_floats(n, 700 + step);
    run.step(grad);
    for (std::size_t i = 0; i < n; ++i) {
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * grad[i];
      v[i] = b2 * v[i] + (1 - b2) * grad[i] * grad[i];
      p[i] -= lr / (1 - std::pow(b1, step)) * m[i] /
              (std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, step)) + eps);
    }
  }
  // Each step moves a parameter by <= ~lr = 1e-3, computed to ~1e-6 relative (a few float
  // roundings, and the float hyper-parameters differ from the decimals by < 3e-8); the
  // parameter itself (size <= 1) is rounded each step: 4 steps * 0.5 ulp(1) = 2.4e-7.
  TROUPE_CHECK_CLOSE(run.param, p, 5e-7, 0.0);
}

TEST_CASE("Adam and AdamW match torch.optim step by step on the reference sequence") {
  std::ifstream file{TROUPE_SOURCE_DIR "/tests/reference/optimizer_reference.json"};
  REQUIRE(file.good());
  const auto reference = nlohmann::json::parse(file);
  int cases = 0, with_weight_decay = 0;
  for (const auto& c : reference.at("cases")) {
    const auto kind = c.at("optimizer").get<std::string>();
    if (kind != "adam" && kind != "adamw")
      continue;
    ++cases;
    CAPTURE(c.at("name").get<std::string>());
    const auto& h = c.at("hyper");
    adam_run run{c.at("initial").get<std::vector<float>>()};
    run.hyper.lr = h.at("lr").get<float>();
    run.hyper.beta1 = h.at("beta1").get<float>();
    run.hyper.beta2 = h.at("beta2").get<float>();
    run.hyper.eps = h.at("eps").get<float>();
    run.hyper.weight_decay = h.at("weight_decay").get<float>();
    run.hyper.decoupled = kind == "adamw";
    with_weight_decay += run.hyper.weight_decay != 0.0f ? 1 : 0;
    const auto& grads = c.at("gradients");
    const auto& after = c.at("params_after_step");
    for (std::size_t step = 0; step < grads.size(); ++step) {
      CAPTURE(step);
      run.step(grads[step].get<std::vector<float>>());
      // PyTorch holds beta1 etc. as Python (double) numbers and rounds them to float per
      // operation, we hold float hyper-parameters: 1 - beta1 may differ by ~2e-7
      // relative, so each update (<= lr = 0.1) differs by ~2e-8 absolute. The rest is
      // rounding (and possible FMA fusion in ATen) of parameters below 4 (ulp 2.4e-7):
      // at most half an ulp per step, 6e-7 over 5 steps. The observed worst is 3e-8.
      TROUPE_CHECK_CLOSE(run.param, after[step].get<std::vector<float>>(), 6e-7, 0.0);
    }
  }
  CHECK(cases >= 4);
  CHECK(with_weight_decay >= 3);
}
