// lr_schedule_test.cpp: the learning-rate schedules against values computed by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "runtime/model/lr_schedule.hpp"
#include "troupe/error.hpp"

using troupe::lr_schedule;

// Every expected value below is a short decimal computed by hand; the schedule computes
// in double with one pow or cos, so 1e-12 relative is far above its rounding (~1e-16)
// and far below any real mistake.
static bool near(double got, double want) {
  return std::abs(got - want) <= 1e-12 * std::max(1.0, std::abs(want));
}

/// CHECKs that `s` gives each (step, want) pair's rate.
static void check_at(const lr_schedule& s,
                     std::initializer_list<std::pair<std::int64_t, double>> expected) {
  for (const auto& pair : expected) {
    const std::int64_t step = pair.first;  // not a binding: CAPTURE's lambda (clang 14)
    CAPTURE(step);
    CHECK(near(s.at(step), pair.second));
  }
}

TEST_CASE("a constant schedule gives base_lr at every step") {
  lr_schedule s;
  s.base_lr = 0.01;
  check_at(s, {{0, 0.01}, {12345, 0.01}});
}

TEST_CASE("warm-up ramps linearly to base_lr over warmup_steps, then hands over") {
  lr_schedule s;
  s.base_lr = 0.1;
  s.warmup_steps = 4;
  // base * (step + 1) / 4: 0.025, 0.05, 0.075, 0.1, then constant 0.1.
  check_at(s, {{0, 0.025}, {1, 0.05}, {2, 0.075}, {3, 0.1}, {4, 0.1}, {100, 0.1}});
}

TEST_CASE("step decay multiplies by gamma every step_size steps after the warm-up") {
  lr_schedule s;
  s.type = lr_schedule::kind::step;
  s.base_lr = 0.2;
  s.gamma = 0.5;
  s.step_size = 10;
  // floor(step / 10): 0 for steps 0..9, 1 for 10..19, 2 for 20..29.
  check_at(s, {{0, 0.2}, {9, 0.2}, {10, 0.1}, {19, 0.1}, {20, 0.05}, {35, 0.025}});

  s.warmup_steps = 5;
  // Warm-up 0.2 * (step + 1) / 5 for steps 0..4; then floor((step - 5) / 10).
  check_at(s, {{0, 0.04}, {4, 0.2}, {5, 0.2}, {14, 0.2}, {15, 0.1}, {25, 0.05}});
}

TEST_CASE("cosine starts at base_lr, is half-way at the middle and ends at min_lr") {
  lr_schedule s;
  s.type = lr_schedule::kind::cosine;
  s.base_lr = 1.0;
  s.total_steps = 100;
  // t = step / 100: cos(0) = 1 -> 1; t = 0.5 -> 0.5; t = 0.25 -> 0.5 * (1 + sqrt(2)/2).
  check_at(s, {{0, 1.0}, {50, 0.5}, {25, 0.5 * (1.0 + std::sqrt(0.5))},
                {75, 0.5 * (1.0 - std::sqrt(0.5))}});
  // t = 1 at step 100 and beyond (clamped): 0.
  check_at(s, {{100, 0.0}, {250, 0.0}});
}

TEST_CASE("cosine decays from base_lr to the min_lr floor after the warm-up") {
  lr_schedule s;
  s.type = lr_schedule::kind::cosine;
  s.base_lr = 0.1;
  s.min_lr = 0.02;
  s.warmup_steps = 10;
  s.total_steps = 110;
  // Warm-up: 0.1 * (step + 1) / 10.
  check_at(s, {{0, 0.01}, {9, 0.1}});
  // t = (step - 10) / 100: 0 -> 0.1; 0.5 -> 0.02 + 0.08 * 0.5 = 0.06; 1 -> 0.02.
  check_at(s, {{10, 0.1}, {60, 0.06}, {110, 0.02}, {1000, 0.02}});
  // Never below the floor after the warm-up (the warm-up itself starts from 0).
  for (std::int64_t step = 10; step < 200; ++step)
    CHECK(s.at(step) >= 0.02 - 1e-15);
}

TEST_CASE("a cosine run no longer than its warm-up does not divide by zero") {
  lr_schedule s;
  s.type = lr_schedule::kind::cosine;
  s.base_lr = 0.5;
  s.warmup_steps = 10;
  s.total_steps = 10;
  // max(1, 10 - 10) = 1: t = step - 10 clamped, so step 10 is base and 11 is min (0).
  check_at(s, {{10, 0.5}, {11, 0.0}});
}

TEST_CASE("schedule kinds parse from their names and nothing else") {
  using troupe::parse_enum;
  CHECK(parse_enum<lr_schedule::kind>("cosine") == lr_schedule::kind::cosine);
  CHECK(parse_enum<lr_schedule::kind>("step") == lr_schedule::kind::step);
  CHECK(parse_enum<lr_schedule::kind>("constant") == lr_schedule::kind::constant);
  CHECK_FALSE(parse_enum<lr_schedule::kind>("Cosine").has_value());
  CHECK_FALSE(parse_enum<lr_schedule::kind>("linear").has_value());
  CHECK_FALSE(parse_enum<lr_schedule::kind>("").has_value());
  for (auto kind : troupe::enum_values<lr_schedule::kind>::all)
    CHECK(parse_enum<lr_schedule::kind>(troupe::to_string(kind)) == kind);
}

TEST_CASE("a negative step is a programmer error") {
  lr_schedule s;
  CHECK_THROWS_AS(s.at(-1), troupe::check_failure);
}
