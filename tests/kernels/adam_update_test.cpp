// adam_update_test.cpp: the CPU Adam/AdamW step against hand-computed steps and against
// torch.optim.Adam / AdamW's own numbers in tests/reference/optimizer_reference.json, each
// both in place and out of place; and out of place against in place, bit for bit.
//
// The hand-computed cases use eps = 0 and dyadic numbers, so that most results are exact;
// where a sqrt or a 1/3 rounds, the tolerance says how far.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "kernel_test_support.hpp"
#include "optimizer_test_support.hpp"
#include "troupe/error.hpp"
#include "troupe/ops.hpp"

using namespace troupe;

namespace {

using test::same_bits;

struct adam_run {
  std::vector<float> param, m, v;
  kernels::adam_hyper hyper;
  bool in_place = true;

  adam_run(std::vector<float> initial, bool update_in_place)
      : param(std::move(initial)),
        m(param.size(), 0.0f),
        v(param.size(), 0.0f),
        in_place(update_in_place) {
    hyper.step = 0;
  }

  void step(const std::vector<float>& grad) {
    auto adam = kernels::lookup<kernels::ops::adam_update>(kernels::device_type::cpu);
    ++hyper.step;
    const auto n = static_cast<std::int64_t>(param.size());
    if (in_place) {
      adam(test::cpu_context(), n, param.data(), param.data(), grad.data(), m.data(), v.data(),
           hyper);
    } else {
      // NaN in the output shows any element the kernel forgets to write.
      std::vector<float> next(param.size(), std::numeric_limits<float>::quiet_NaN());
      const auto before = param;
      adam(test::cpu_context(), n, param.data(), next.data(), grad.data(), m.data(), v.data(),
           hyper);
      CHECK_MESSAGE(same_bits(param, before), "out of place wrote its input parameters");
      param = std::move(next);
    }
  }
};

/// Runs `body(in_place)` once in place and once out of place.
using test::in_place_and_out_of_place;

// lr = 1/8, beta1 = 1/2, beta2 = 3/4, eps = 0: simple enough to do by hand.
adam_run hand_run(std::vector<float> initial, bool in_place) {
  adam_run run{std::move(initial), in_place};
  run.hyper.lr = 0.125f;
  run.hyper.beta1 = 0.5f;
  run.hyper.beta2 = 0.75f;
  run.hyper.eps = 0.0f;
  return run;
}

}  // namespace

TEST_CASE("Adam's first step moves every parameter by lr against the gradient's sign") {
  in_place_and_out_of_place([&](bool in_place) {
    auto run = hand_run({1.0f, -1.0f}, in_place);
    run.step({2.0f, -0.5f});
    // Element 0: m = 0.5 * 2 = 1, v = 0.25 * 4 = 1; bias corrections 1 - 0.5 = 0.5 and
    // 1 - 0.75 = 0.25; step size 0.125 / 0.5 = 0.25; denom sqrt(1) / sqrt(0.25) = 2;
    // p = 1 - 0.25 * (1 / 2) = 0.875.
    // Element 1: m = -0.25, v = 0.0625, denom = 0.25 / 0.5 = 0.5, p = -1 + 0.25 * 0.5.
    CHECK(run.m == std::vector<float>{1.0f, -0.25f});
    CHECK(run.v == std::vector<float>{1.0f, 0.0625f});
    CHECK(run.param == std::vector<float>{0.875f, -0.875f});
  });
}

TEST_CASE("Adam's second step uses the step-2 bias corrections") {
  in_place_and_out_of_place([&](bool in_place) {
    auto run = hand_run({1.0f}, in_place);
    run.step({2.0f});
    run.step({2.0f});
    // m = 0.5 * 1 + 0.5 * 2 = 1.5; v = 0.75 * 1 + 0.25 * 4 = 1.75;
    // step size = 0.125 / (1 - 0.25) = 1/6; denom = sqrt(1.75) / sqrt(1 - 0.5625) = 2;
    // p = 0.875 - (1/6) * (1.5 / 2) = 0.75.
    CHECK(run.m[0] == 1.5f);
    CHECK(run.v[0] == 1.75f);
    // 1/6 and the two square roots round (each within half an ulp); 3 ulps of 0.75.
    CHECK(std::abs(run.param[0] - 0.75) <= 3 * 6e-8);
  });
}

TEST_CASE("Adam's weight decay is added to the gradient (L2), AdamW's decays the weight") {
  in_place_and_out_of_place([&](bool in_place) {
    auto adam = hand_run({1.0f}, in_place);
    adam.hyper.weight_decay = 0.5f;
    adam.step({1.5f});
    // g = 1.5 + 0.5 * 1 = 2, then as the first step above: p = 1 - 0.125 = 0.875.
    CHECK(adam.m[0] == 1.0f);
    CHECK(adam.param[0] == 0.875f);

    auto adamw = hand_run({1.0f}, in_place);
    adamw.hyper.weight_decay = 0.5f;
    adamw.hyper.decoupled = true;
    adamw.step({2.0f});
    // p = 1 * (1 - 0.125 * 0.5) = 0.9375, the moments see g = 2 unchanged, then
    // p = 0.9375 - 0.125 = 0.8125.
    CHECK(adamw.m[0] == 1.0f);
    CHECK(adamw.param[0] == 0.8125f);
  });
}

TEST_CASE("Adam's eps keeps a zero gradient from dividing by zero") {
  in_place_and_out_of_place([&](bool in_place) {
    adam_run run{{1.0f}, in_place};
    run.step({0.0f});
    // m = v = 0, denom = 0 + 1e-8: p = 1 - step * 0 / 1e-8 = 1.
    CHECK(run.param[0] == 1.0f);
  });
}

TEST_CASE("Adam's step count is 1-based") {
  auto adam = kernels::lookup<kernels::ops::adam_update>(kernels::device_type::cpu);
  std::vector<float> p{1.0f}, g{1.0f}, m{0.0f}, v{0.0f};
  kernels::adam_hyper hyper;
  hyper.step = 0;
  CHECK_THROWS_AS(
      adam(test::cpu_context(), 1, p.data(), p.data(), g.data(), m.data(), v.data(), hyper),
      check_failure);
}

TEST_CASE("Adam out of place leaves its input alone and matches in place bit for bit") {
  // Adam, Adam with L2 decay and AdamW over three steps (the bias corrections change). One
  // run updates in place, the other writes to a fresh buffer each step, as the optimizer
  // actor does: the results must be the same floats.
  auto adam = kernels::lookup<kernels::ops::adam_update>(kernels::device_type::cpu);
  // 1039 = 64 * 16 + 15: the 16-wide body, the 8-wide epilogue GCC adds after it and
  // the scalar tail all run (they may contract a * b + c into an FMA differently).
  const std::size_t n = 1039;
  const auto n64 = static_cast<std::int64_t>(n);
  kernels::adam_hyper plain;
  plain.lr = 1e-2f;
  kernels::adam_hyper l2 = plain;
  l2.weight_decay = 0.01f;
  kernels::adam_hyper decoupled = plain;
  decoupled.weight_decay = 0.1f;
  decoupled.decoupled = true;
  int variant = 0;
  for (const auto& base : {plain, l2, decoupled}) {
    CAPTURE(variant++);
    auto in_place_param = test::random_floats(n, 710);
    auto current = in_place_param;
    std::vector<float> m_in_place(n, 0.0f), v_in_place(n, 0.0f);
    std::vector<float> m_out_of_place(n, 0.0f), v_out_of_place(n, 0.0f);
    auto hyper = base;
    for (std::int64_t step = 1; step <= 3; ++step) {
      CAPTURE(step);
      hyper.step = step;
      const auto grad = test::random_floats(n, 710 + static_cast<std::uint32_t>(step));
      adam(test::cpu_context(), n64, in_place_param.data(), in_place_param.data(), grad.data(),
           m_in_place.data(), v_in_place.data(), hyper);
      const auto before = current;
      std::vector<float> next(n, std::numeric_limits<float>::quiet_NaN());
      adam(test::cpu_context(), n64, current.data(), next.data(), grad.data(),
           m_out_of_place.data(), v_out_of_place.data(), hyper);
      CHECK(same_bits(current, before));
      CHECK(same_bits(next, in_place_param));
      CHECK(same_bits(m_out_of_place, m_in_place));
      CHECK(same_bits(v_out_of_place, v_in_place));
      current = std::move(next);
    }
  }
}

TEST_CASE("Adam rejects an output that partially overlaps its input") {
  auto adam = kernels::lookup<kernels::ops::adam_update>(kernels::device_type::cpu);
  std::vector<float> memory(5, 1.0f), g(4, 1.0f), m(4, 0.0f), v(4, 0.0f);
  kernels::adam_hyper hyper;
  // param = memory[0, 4), param_out = memory[1, 5): three floats shared.
  CHECK_THROWS_AS(adam(test::cpu_context(), 4, memory.data(), memory.data() + 1, g.data(),
                       m.data(), v.data(), hyper),
                  check_failure);
}

TEST_CASE("Adam over a long vector matches a double-precision reference") {
  in_place_and_out_of_place([&](bool in_place) {
    const std::size_t n = 1027;  // odd: the vector body and the scalar tail both run
    adam_run run{test::random_floats(n, 700), in_place};
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
  });
}

TEST_CASE("Adam and AdamW match torch.optim step by step on the reference sequence") {
  in_place_and_out_of_place([&](bool in_place) {
    const auto reference = test::optimizer_reference();
    int cases = 0, with_weight_decay = 0;
    for (const auto& c : reference.at("cases")) {
      const auto kind = c.at("optimizer").get<std::string>();
      if (kind != "adam" && kind != "adamw")
        continue;
      ++cases;
      CAPTURE(c.at("name").get<std::string>());
      const auto& h = c.at("hyper");
      adam_run run{c.at("initial").get<std::vector<float>>(), in_place};
      run.hyper.lr = h.at("lr").get<float>();
      run.hyper.beta1 = h.at("beta1").get<float>();
      run.hyper.beta2 = h.at("beta2").get<float>();
      run.hyper.eps = h.at("eps").get<float>();
      run.hyper.weight_decay = h.at("weight_decay").get<float>();
      run.hyper.decoupled = kind == "adamw";
      with_weight_decay += run.hyper.weight_decay != 0.0f ? 1 : 0;
      // PyTorch holds beta1 etc. as Python (double) numbers and rounds them to float per
      // operation, we hold float hyper-parameters: 1 - beta1 may differ by ~2e-7
      // relative, so each update (<= lr = 0.1) differs by ~2e-8 absolute. The rest is
      // rounding (and possible FMA fusion in ATen) of parameters below 4 (ulp 2.4e-7):
      // at most half an ulp per step, 6e-7 over 5 steps. The observed worst is 3e-8.
      test::check_reference_steps(run, c, 6e-7);
    }
    CHECK(cases >= 4);
    CHECK(with_weight_decay >= 3);
  });
}

