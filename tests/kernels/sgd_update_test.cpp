// sgd_update_test.cpp: the CPU SGD step against hand-computed steps (plain, weight decay,
// momentum, dampening, nesterov, first step vs later) and against torch.optim.SGD's own
// numbers in tests/reference/optimizer_reference.json, each both in place and out of
// place; and out of place against in place, bit for bit.
//
// The hand-computed cases use dyadic numbers (0.5, 0.25, ...) so every float operation
// is exact and the checks are equalities; the arithmetic is written next to each.
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

struct sgd_run {
  std::vector<float> param, buffer;
  kernels::sgd_hyper hyper;
  bool in_place = true;

  void step(const std::vector<float>& grad) {
    auto sgd = kernels::lookup<kernels::ops::sgd_update>(kernels::device_type::cpu);
    const auto n = static_cast<std::int64_t>(param.size());
    float* momentum = buffer.empty() ? nullptr : buffer.data();
    if (in_place) {
      sgd(test::cpu_context(), n, param.data(), param.data(), grad.data(), momentum, hyper);
    } else {
      // NaN in the output shows any element the kernel forgets to write.
      std::vector<float> next(param.size(), std::numeric_limits<float>::quiet_NaN());
      const auto before = param;
      sgd(test::cpu_context(), n, param.data(), next.data(), grad.data(), momentum, hyper);
      CHECK_MESSAGE(same_bits(param, before), "out of place wrote its input parameters");
      param = std::move(next);
    }
    hyper.first_step = false;
  }
};

/// Runs `body(in_place)` once in place and once out of place.
using test::in_place_and_out_of_place;

}  // namespace

TEST_CASE("plain SGD subtracts lr * grad") {
  in_place_and_out_of_place([&](bool in_place) {
    sgd_run run{{1.0f, -2.0f}, {}, {}};
    run.in_place = in_place;
    run.hyper.lr = 0.5f;
    run.step({0.5f, 0.25f});
    // p = (1 - 0.5 * 0.5, -2 - 0.5 * 0.25) = (0.75, -2.125)
    CHECK(run.param == std::vector<float>{0.75f, -2.125f});
  });
}

TEST_CASE("SGD weight decay adds weight_decay * p to the gradient") {
  in_place_and_out_of_place([&](bool in_place) {
    sgd_run run{{1.0f, -2.0f}, {}, {}};
    run.in_place = in_place;
    run.hyper.lr = 0.5f;
    run.hyper.weight_decay = 0.5f;
    run.step({0.5f, 0.25f});
    // d = (0.5 + 0.5 * 1, 0.25 + 0.5 * -2) = (1, -0.75); p = (1 - 0.5, -2 + 0.375)
    CHECK(run.param == std::vector<float>{0.5f, -1.625f});
  });
}

TEST_CASE("SGD momentum copies d into the buffer on the first step and blends it later") {
  in_place_and_out_of_place([&](bool in_place) {
    // The buffer starts as NaN: the first step must overwrite it, never read it.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    sgd_run run{{1.0f}, {nan}, {}};
    run.in_place = in_place;
    run.hyper.lr = 0.5f;
    run.hyper.momentum = 0.5f;
    run.step({0.5f});
    // buf = d = 0.5; p = 1 - 0.5 * 0.5 = 0.75
    CHECK(run.buffer[0] == 0.5f);
    CHECK(run.param[0] == 0.75f);
    run.step({0.25f});
    // buf = 0.5 * 0.5 + (1 - 0) * 0.25 = 0.5; p = 0.75 - 0.5 * 0.5 = 0.5
    CHECK(run.buffer[0] == 0.5f);
    CHECK(run.param[0] == 0.5f);
  });
}

TEST_CASE("SGD dampening scales d into the buffer after the first step only") {
  in_place_and_out_of_place([&](bool in_place) {
    sgd_run run{{1.0f}, {0.0f}, {}};
    run.in_place = in_place;
    run.hyper.lr = 0.5f;
    run.hyper.momentum = 0.5f;
    run.hyper.dampening = 0.5f;
    run.step({0.5f});
    // First step: buf = d = 0.5 (no dampening, as PyTorch's clone); p = 1 - 0.25 = 0.75
    CHECK(run.buffer[0] == 0.5f);
    CHECK(run.param[0] == 0.75f);
    run.step({0.25f});
    // buf = 0.5 * 0.5 + (1 - 0.5) * 0.25 = 0.375; p = 0.75 - 0.5 * 0.375 = 0.5625
    CHECK(run.buffer[0] == 0.375f);
    CHECK(run.param[0] == 0.5625f);
  });
}

TEST_CASE("SGD nesterov steps along d + momentum * buf") {
  in_place_and_out_of_place([&](bool in_place) {
    sgd_run run{{1.0f}, {0.0f}, {}};
    run.in_place = in_place;
    run.hyper.lr = 0.5f;
    run.hyper.momentum = 0.5f;
    run.hyper.nesterov = true;
    run.step({0.5f});
    // buf = 0.5; step = 0.5 + 0.5 * 0.5 = 0.75; p = 1 - 0.5 * 0.75 = 0.625
    CHECK(run.buffer[0] == 0.5f);
    CHECK(run.param[0] == 0.625f);
    run.step({0.25f});
    // buf = 0.5 * 0.5 + 0.25 = 0.5; step = 0.25 + 0.5 * 0.5 = 0.5; p = 0.625 - 0.25 = 0.375
    CHECK(run.buffer[0] == 0.5f);
    CHECK(run.param[0] == 0.375f);
  });
}

TEST_CASE("SGD momentum with weight decay decays inside d, before the buffer") {
  in_place_and_out_of_place([&](bool in_place) {
    sgd_run run{{1.0f}, {0.0f}, {}};
    run.in_place = in_place;
    run.hyper.lr = 0.5f;
    run.hyper.momentum = 0.5f;
    run.hyper.weight_decay = 0.5f;
    run.step({0.5f});
    // d = 0.5 + 0.5 * 1 = 1; buf = 1; p = 1 - 0.5 * 1 = 0.5
    CHECK(run.param[0] == 0.5f);
    run.step({0.25f});
    // d = 0.25 + 0.5 * 0.5 = 0.5; buf = 0.5 * 1 + 0.5 = 1; p = 0.5 - 0.5 * 1 = 0
    CHECK(run.buffer[0] == 1.0f);
    CHECK(run.param[0] == 0.0f);
  });
}

TEST_CASE("SGD with momentum but no buffer is a programmer error") {
  auto sgd = kernels::lookup<kernels::ops::sgd_update>(kernels::device_type::cpu);
  std::vector<float> param{1.0f}, grad{1.0f};
  kernels::sgd_hyper hyper;
  hyper.momentum = 0.9f;
  CHECK_THROWS_AS(
      sgd(test::cpu_context(), 1, param.data(), param.data(), grad.data(), nullptr, hyper),
      check_failure);
}

TEST_CASE("SGD out of place leaves its input alone and matches in place bit for bit") {
  // Every variant over three steps (the first step differs). One run updates in place,
  // the other writes to a fresh buffer each step, as the optimizer actor does: the results
  // must be the same floats, so that a training run does not depend on which one is used.
  auto sgd = kernels::lookup<kernels::ops::sgd_update>(kernels::device_type::cpu);
  // 1039 = 64 * 16 + 15: the 16-wide body, the 8-wide epilogue GCC adds after it and
  // the scalar tail all run (they may contract a * b + c into an FMA differently).
  const std::size_t n = 1039;
  const auto n64 = static_cast<std::int64_t>(n);
  kernels::sgd_hyper plain;
  plain.lr = 0.05f;
  kernels::sgd_hyper decayed = plain;
  decayed.weight_decay = 0.01f;
  kernels::sgd_hyper damped = decayed;
  damped.momentum = 0.9f;
  damped.dampening = 0.1f;
  kernels::sgd_hyper nesterov = decayed;
  nesterov.momentum = 0.9f;
  nesterov.nesterov = true;
  int variant = 0;
  for (const auto& base : {plain, decayed, damped, nesterov}) {
    CAPTURE(variant++);
    auto in_place_param = test::random_floats(n, 610);
    auto current = in_place_param;
    std::vector<float> in_place_buffer(n, 0.0f), out_of_place_buffer(n, 0.0f);
    auto hyper = base;
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      hyper.first_step = step == 0;
      const auto grad = test::random_floats(n, 611 + static_cast<std::uint32_t>(step));
      sgd(test::cpu_context(), n64, in_place_param.data(), in_place_param.data(), grad.data(),
          in_place_buffer.data(), hyper);
      const auto before = current;
      std::vector<float> next(n, std::numeric_limits<float>::quiet_NaN());
      sgd(test::cpu_context(), n64, current.data(), next.data(), grad.data(),
          out_of_place_buffer.data(), hyper);
      CHECK(same_bits(current, before));
      CHECK(same_bits(next, in_place_param));
      CHECK(same_bits(out_of_place_buffer, in_place_buffer));
      current = std::move(next);
    }
  }
}

TEST_CASE("SGD accepts an output right next to its input but not one overlapping it") {
  auto sgd = kernels::lookup<kernels::ops::sgd_update>(kernels::device_type::cpu);
  // One allocation holding param (4 floats) then param_out (4 floats): adjacent, disjoint.
  std::vector<float> memory{1.0f, 2.0f, 3.0f, 4.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<float> grad(4, 0.5f);
  kernels::sgd_hyper hyper;
  hyper.lr = 0.5f;
  sgd(test::cpu_context(), 4, memory.data(), memory.data() + 4, grad.data(), nullptr, hyper);
  // p_out = p - 0.5 * 0.5: the input half is untouched.
  CHECK(memory == std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f, 0.75f, 1.75f, 2.75f, 3.75f});
  // Shifted by one element in either direction, the two ranges share three floats.
  CHECK_THROWS_AS(sgd(test::cpu_context(), 4, memory.data(), memory.data() + 1, grad.data(),
                      nullptr, hyper),
                  check_failure);
  CHECK_THROWS_AS(sgd(test::cpu_context(), 4, memory.data() + 1, memory.data(), grad.data(),
                      nullptr, hyper),
                  check_failure);
}

TEST_CASE("SGD over a long vector applies the same update to every element") {
  in_place_and_out_of_place([&](bool in_place) {
    // Long and odd-sized, so the vectorised body and the scalar tail both run.
    const std::size_t n = 1027;
    sgd_run run{test::random_floats(n, 600), std::vector<float>(n, 0.0f), {}};
    run.in_place = in_place;
    run.hyper.lr = 0.05f;
    run.hyper.momentum = 0.9f;
    run.hyper.weight_decay = 0.01f;
    run.hyper.nesterov = true;
    const auto grad = test::random_floats(n, 601);
    std::vector<double> p(run.param.begin(), run.param.end()), buf(n);
    for (int step = 0; step < 3; ++step) {
      run.step(grad);
      for (std::size_t i = 0; i < n; ++i) {
        const double d = grad[i] + 0.01 * p[i];
        buf[i] = step == 0 ? d : 0.9 * buf[i] + d;
        p[i] -= 0.05 * (d + 0.9 * buf[i]);
      }
    }
    // Three steps of a handful of float roundings each on values of size ~1: a few ulps of
    // 1 per step; 1e-6 absolute is ~8 ulps. (Hyper-parameters are floats in the kernel and
    // decimals here: 0.05f differs from 0.05 by 1.5e-8 relative, well inside.)
    TROUPE_CHECK_CLOSE(run.param, p, 1e-6, 0.0);
  });
}

TEST_CASE("SGD matches torch.optim.SGD step by step on the reference sequence") {
  in_place_and_out_of_place([&](bool in_place) {
    const auto reference = test::optimizer_reference();
    int cases = 0;
    for (const auto& c : reference.at("cases")) {
      if (c.at("optimizer") != "sgd")
        continue;
      ++cases;
      CAPTURE(c.at("name").get<std::string>());
      const auto& h = c.at("hyper");
      sgd_run run;
      run.in_place = in_place;
      run.param = c.at("initial").get<std::vector<float>>();
      run.buffer.assign(run.param.size(), 0.0f);
      run.hyper.lr = h.at("lr").get<float>();
      run.hyper.momentum = h.at("momentum").get<float>();
      run.hyper.dampening = h.at("dampening").get<float>();
      run.hyper.weight_decay = h.at("weight_decay").get<float>();
      run.hyper.nesterov = h.at("nesterov").get<bool>();
      // PyTorch evaluates the same float operations in the same order, but may fuse
      // `a + alpha * b` into an FMA where we round twice: up to half an ulp per step.
      // Parameters stay below 4 (ulp 2.4e-7), so 5 steps differ by <= 2.5 ulps = 6e-7 in
      // the worst case; the observed worst is 1.2e-7.
      test::check_reference_steps(run, c, 6e-7);
    }
    CHECK(cases >= 2);
  });
}

