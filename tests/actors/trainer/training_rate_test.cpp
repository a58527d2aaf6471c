// training_rate_test.cpp: samples per second over training time (Note [samples per second]
// in actors/trainer/training_rate.hpp): steady, across an evaluation and the burst of held-back
// steps after it, and for the whole run.
#include "actors/trainer/training_rate.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using troupe::training_rate;
using namespace std::chrono_literals;

TEST_CASE("the rate over training time does not jump after an evaluation's burst of steps") {
  training_rate rate;
  auto now = training_rate::clock::time_point{} + 1h;
  rate.start(now);
  CHECK(rate.samples_per_second() == 0);
  const std::int64_t batch = 128;
  // 1000 steps of 2 ms: 64000 samples/s.
  for (int i = 0; i < 1000; ++i) {
    now += 2ms;
    rate.step(now, batch);
  }
  CHECK(rate.samples_per_second() == doctest::Approx(64000).epsilon(1e-9));
  // An evaluation of 3 s, during which the wiring computed 12 steps that finish together
  // after it (steps finish in order), then steady again.
  now += 3s;
  rate.evaluation_finished();
  double lowest = 1e300, highest = 0;
  for (int i = 0; i < 12; ++i) {
    now += 1us;
    rate.step(now, batch);
    lowest = std::min(lowest, rate.samples_per_second());
    highest = std::max(highest, rate.samples_per_second());
  }
  for (int i = 0; i < 2000; ++i) {
    now += 2ms;
    rate.step(now, batch);
    lowest = std::min(lowest, rate.samples_per_second());
    highest = std::max(highest, rate.samples_per_second());
  }
  CHECK(highest < 64000 * 1.01);
  CHECK(lowest > 64000 * 0.99);
  CHECK(rate.samples_per_second() == doctest::Approx(64000).epsilon(1e-6));
  // The whole run, over training time: the evaluation's 3 s are not in it, and the 12 steps
  // held back by it are charged a typical step each.
  CHECK(rate.training_seconds() == doctest::Approx(3012 * 0.002).epsilon(1e-6));
  CHECK(rate.overall() == doctest::Approx(64000).epsilon(1e-6));
}

TEST_CASE("a run of uneven steps reports their mean over the window, not the last step's") {
  training_rate rate{1.0};
  auto now = training_rate::clock::time_point{};
  rate.start(now);
  // Steps finishing in pairs (a pipeline's rhythm): 1 us, then 4 ms: 64 samples each.
  for (int i = 0; i < 600; ++i) {
    now += i % 2 == 0 ? 1us : 4ms;
    rate.step(now, 64);
  }
  CHECK(rate.samples_per_second() == doctest::Approx(2 * 64 / 0.004001).epsilon(0.01));
}

TEST_CASE("slow steps keep their rate across an evaluation that held some of them back") {
  // Steps of 0.9 s (a large model, or a pipeline of delay layers): an evaluation of 3 s during
  // which three steps were computed, finishing together behind it. Charged no time, they
  // read as a 30% faster run for the next steps, and the run's own rate came out 10% high.
  training_rate rate;
  auto now = training_rate::clock::time_point{};
  rate.start(now);
  const double steady = 16 / 0.9;
  for (int i = 0; i < 20; ++i) {
    now += 900ms;
    rate.step(now, 16);
  }
  CHECK(rate.samples_per_second() == doctest::Approx(steady).epsilon(1e-6));
  now += 3s;
  rate.evaluation_finished();
  double lowest = 1e300, highest = 0;
  for (int i = 0; i < 3; ++i) {
    now += 1us;
    rate.step(now, 16);
    lowest = std::min(lowest, rate.samples_per_second());
    highest = std::max(highest, rate.samples_per_second());
  }
  for (int i = 0; i < 20; ++i) {
    now += 900ms;
    rate.step(now, 16);
    lowest = std::min(lowest, rate.samples_per_second());
    highest = std::max(highest, rate.samples_per_second());
  }
  CHECK(highest < steady * 1.01);
  CHECK(lowest > steady * 0.99);
  CHECK(rate.overall() == doctest::Approx(steady).epsilon(0.01));
}
