// Wake-ups a stream's thread puts off (Note [deferred wake-ups] in
// runtime/core/deferred.hpp): only a stream's thread may put work off, and what it puts off
// runs when a stream has nothing to do, before a stream waits for another, or once it is
// late, never only after a wait that needs it.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/core/deferred.hpp"
#include "troupe/device.hpp"

using namespace troupe;

namespace {

using clock_type = std::chrono::steady_clock;

void busy_for(std::chrono::microseconds how_long) {
  const auto until = clock_type::now() + how_long;
  while (clock_type::now() < until) {
  }
}

/// Waits (at most 10 s) until `flag` is set; true if it was.
bool eventually(const std::atomic<bool>& flag) {
  const auto until = clock_type::now() + std::chrono::seconds(10);
  while (!flag.load() && clock_type::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  return flag.load();
}

}  // namespace

TEST_CASE("only a stream's thread puts work off: elsewhere the caller must act now") {
  CHECK_FALSE(on_stream_worker());
  bool ran = false;
  CHECK_FALSE(defer_until_idle([&ran] { ran = true; }));
  CHECK_FALSE(ran);  // not kept either

  stream s{device_id{}, -1};
  bool worker = false;
  bool put_off = false;
  s.submit([&] {
     worker = on_stream_worker();
     put_off = defer_until_idle([] {});
   }).wait();
  CHECK(worker);
  CHECK(put_off);
}

TEST_CASE("work put off in a job runs after that job, once the stream has nothing to run") {
  stream s{device_id{}, -1};
  std::atomic<bool> ran{false};
  std::atomic<bool> ran_during_job{true};
  s.submit([&] {
    REQUIRE(defer_until_idle([&ran] { ran = true; }));
    busy_for(std::chrono::microseconds(200));  // not late yet when it ends
    ran_during_job = ran.load();
  });
  CHECK(eventually(ran));
  CHECK_FALSE(ran_during_job.load());
}

TEST_CASE("work put off on a busy stream runs once it is late, between jobs") {
  // Twenty jobs of 500 us back to back behind a gate, all queued before it opens: the
  // stream never waits, so only the patience (500 us) brings the task on, between jobs.
  stream s{device_id{}, -1};
  std::atomic<bool> gate{false};
  std::atomic<bool> ran{false};
  std::atomic<int> jobs_before{-1};
  std::atomic<int> jobs_done{0};
  s.submit([&] {
    while (!gate.load()) {
    }
  });
  s.submit([&] {
    REQUIRE(defer_until_idle([&] {
      jobs_before = jobs_done.load();
      ran = true;
    }));
  });
  for (int i = 0; i < 20; ++i)
    s.submit([&] {
      busy_for(std::chrono::microseconds(500));
      ++jobs_done;
    });
  gate = true;
  s.synchronize();
  REQUIRE(eventually(ran));
  INFO("jobs done before the task ran: " << jobs_before.load());
  CHECK(jobs_before.load() < 20);  // not only once the stream had nothing left to run
}

TEST_CASE("work put off runs before its stream waits for another stream, which may need it") {
  // The task opens a gate that another stream's job waits at; the first stream then waits
  // for that job. Were the task left for after the wait, neither could go on.
  stream first{device_id{device_type::cpu, 0}, -1};
  stream second{device_id{device_type::cpu, 1}, -1};
  std::atomic<bool> gate{false};
  std::atomic<bool> opened_in_time{false};
  // Keep `second` busy (not idle: it must not be the one that runs the task) until the gate
  // opens, for at most 5 s.
  auto behind_gate = second.submit([&] {
    const auto until = clock_type::now() + std::chrono::seconds(5);
    while (!gate.load() && clock_type::now() < until) {
    }
    opened_in_time = gate.load();
  });
  first.submit([&] { REQUIRE(defer_until_idle([&gate] { gate = true; })); });
  first.wait_for(behind_gate);
  first.synchronize();
  CHECK(opened_in_time.load());
}

TEST_CASE("work one stream puts off is done by another stream that has nothing to do") {
  // `busy` puts the task off and computes for up to 5 s without waiting; `idle` has nothing
  // to run (a post wakes it, should it have gone to sleep), so it takes the task up long
  // before `busy` would (after its job, at the latest).
  stream busy{device_id{device_type::cpu, 0}, -1};
  stream idle{device_id{device_type::cpu, 1}, -1};
  std::atomic<bool> ran{false};
  std::atomic<bool> ran_during_job{false};
  busy.submit([&] {
    REQUIRE(defer_until_idle([&ran] { ran = true; }));
    idle.post([] {});
    const auto until = clock_type::now() + std::chrono::seconds(5);
    while (!ran.load() && clock_type::now() < until) {
    }
    ran_during_job = ran.load();
  });
  busy.synchronize();
  CHECK(ran_during_job.load());
}
