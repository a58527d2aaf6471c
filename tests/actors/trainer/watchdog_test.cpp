// The watchdog's clock (actors/trainer/watchdog.hpp), without actors: any change in the progress
// count resets it, and the limit decides when a run is stuck. (tracing_test.cpp has the
// whole watchdog in a stuck run.)
#include <doctest/doctest.h>

#include "actors/trainer/watchdog.hpp"

using namespace troupe;
using namespace std::chrono_literals;

TEST_CASE("the watchdog counts the time since the progress count last changed") {
  watchdog w{2.0};
  auto t0 = watchdog::clock::time_point{} + 100s;
  w.start(t0);
  CHECK(w.observe(0, t0 + 1s) == doctest::Approx(1.0));
  CHECK_FALSE(w.stuck(1.0));
  CHECK(w.observe(5, t0 + 1500ms) == doctest::Approx(0.0));  // moved
  CHECK(w.observe(5, t0 + 3s) == doctest::Approx(1.5));
  auto quiet = w.observe(5, t0 + 3600ms);
  CHECK(quiet == doctest::Approx(2.1));
  CHECK(w.stuck(quiet));
}

TEST_CASE("the watchdog looks four times per limit, between 10 ms and 1 s, and 0 is off") {
  CHECK(watchdog{2.0}.interval() == 500ms);
  CHECK(watchdog{0.01}.interval() == 10ms);
  CHECK(watchdog{60}.interval() == 1000ms);
  watchdog off{0};
  CHECK_FALSE(off.enabled());
  CHECK_FALSE(off.stuck(1e9));
}

TEST_CASE("the watchdog's report says how long nothing moved and lists every answer") {
  auto text = watchdog_report(3.7, {"layer_0: waiting for a credit", "loss: idle"});
  CHECK(text ==
        "watchdog: nothing has moved for 3 s, so the run is stuck; what each actor is waiting "
        "for:\n  layer_0: waiting for a credit\n  loss: idle");
}
