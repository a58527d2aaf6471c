// Simulated streams sharing cores (runtime/core/simulation.hpp, Note [what shares a core]):
// a job holds its core, a handler takes its time from the core it runs on (preempting
// another device's job there), and a host turn takes a free core, else the waker's.
// Each test submits its first jobs under a clock_hold: from the test's thread, a job
// submitted second could otherwise find the clock already moved past the first.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/core/simulation.hpp"

using namespace troupe;

namespace {

constexpr std::int64_t us = 1000;  // ns

/// Every job costs its label's microseconds: "A 1000" is 1 ms.
simulation::settings settings_with(int cores, std::int64_t handler_ns, std::int64_t host_ns,
                                   std::int64_t handover_ns) {
  simulation::settings s;
  s.cost = [](const job_label& label, const device_id&, const std::string&) -> std::int64_t {
    const char* space = std::strchr(label.name, ' ');
    return space == nullptr ? 0 : std::stoll(space + 1) * us;
  };
  s.cores = cores;
  s.handler_ns = handler_ns;
  s.host_ns = host_ns;
  s.handover_ns = handover_ns;
  return s;
}

/// When each named thing happened on the virtual clock.
struct clock_log {
  explicit clock_log(simulation& w) : world(w) {}
  simulation& world;
  std::mutex mutex;
  std::map<std::string, std::int64_t> at;
  void note(const std::string& what) {
    std::lock_guard<std::mutex> guard{mutex};
    at[what] = world.now_ns();
  }
  std::int64_t operator[](const std::string& what) {
    std::lock_guard<std::mutex> guard{mutex};
    REQUIRE(at.count(what) == 1);
    return at[what];
  }
};

}  // namespace

TEST_CASE(
    "a simulated handler takes its time from its core: it preempts another device's job there") {
  for (int cores : {0, 2}) {
    CAPTURE(cores);
    simulation world{settings_with(cores, 100 * us, 0, 0)};
    clock_log log{world};
    {
      // a and c share core 0 when there are two cores; b has core 1.
      stream a{{device_type::cpu, 0}, world.backend()};
      stream b{{device_type::cpu, 1}, world.backend()};
      stream c{{device_type::cpu, 2}, world.backend()};
      {
        simulation::clock_hold hold{world};  // both jobs start at 0
        a.submit([&] { log.note("A"); }, {"A 1000"});
        b.submit(
            [&] {
              log.note("B");
              c.post([&] { log.note("handler on c"); });
            },
            {"B 500"});
      }
      a.synchronize();
      b.synchronize();
      c.drain_posted();
    }
    CHECK(log["B"] == 500 * us);
    CHECK(log["handler on c"] == 500 * us);
    // With a core each, nothing is shared; on two cores c's handler ran on A's core.
    CHECK(log["A"] == (cores == 0 ? 1000 : 1100) * us);
  }
}

TEST_CASE(
    "a simulated handler on a core without a job holds it: the next job there starts after it") {
  simulation world{settings_with(1, 100 * us, 0, 0)};
  clock_log log{world};
  {
    stream a{{device_type::cpu, 0}, world.backend()};
    stream b{{device_type::cpu, 1}, world.backend()};  // core 0 too
    {
      simulation::clock_hold hold{world};
      a.submit(
          [&] {
            log.note("A1");
            b.post([&] { log.note("handler on b"); });
          },
          {"A1 1000"});
      a.submit([&] { log.note("A2"); }, {"A2 1000"});
    }
    a.synchronize();
    b.drain_posted();
  }
  CHECK(log["A1"] == 1000 * us);
  CHECK(log["handler on b"] == 1000 * us);
  CHECK(log["A2"] == 2100 * us);
}

TEST_CASE("a simulated host turn takes a free core, else preempts the job of its waker's core") {
  struct expected {
    int cores;
    std::int64_t a_us;  // A on core 0 from 0
    bool second_job;    // b's B2 (1 ms) follows B1 on core 1
    std::int64_t a_end_us;
    std::int64_t b2_end_us;
  };
  // B1 (0.5 ms) wakes the host; its turn (0.2 ms) comes a hand-over (0.1 ms) later, at 0.6.
  for (const auto& want : {
           expected{0, 1000, true, 1000, 1500},  // a core each: the host's own
           expected{2, 1000, true, 1000, 1700},  // both cores compute: B2, the waker's, waits
           expected{2, 550, true, 550, 1500},    // A has ended: its core runs the host
           expected{2, 1000, false, 1000, -1},   // b's core is free
       }) {
    CAPTURE(want.cores);
    CAPTURE(want.a_us);
    CAPTURE(want.second_job);
    simulation world{settings_with(want.cores, 0, 200 * us, 100 * us)};
    clock_log log{world};
    const std::string a_label = "A " + std::to_string(want.a_us);
    {
      stream a{{device_type::cpu, 0}, world.backend()};
      stream b{{device_type::cpu, 1}, world.backend()};
      {
        simulation::clock_hold hold{world};
        a.submit([&] { log.note("A"); }, {a_label.c_str()});
        b.submit(
            [&] {
              log.note("B1");
              world.post_host([&] { log.note("host"); });
            },
            {"B1 500"});
        if (want.second_job)
          b.submit([&] { log.note("B2"); }, {"B2 1000"});
      }
      a.synchronize();
      b.synchronize();
    }
    CHECK(log["B1"] == 500 * us);
    CHECK(log["host"] == 600 * us);
    CHECK(log["A"] == want.a_end_us * us);
    if (want.second_job)
      CHECK(log["B2"] == want.b2_end_us * us);
  }
}

TEST_CASE("a simulated send to another node takes its bytes' time of the sender's core") {
  for (int cores : {0, 2}) {
    CAPTURE(cores);
    auto s = settings_with(cores, 0, 0, 0);
    s.network.ns_per_byte = 100;  // 1000 bytes: 100 us
    simulation world{s};
    clock_log log{world};
    {
      stream a{{device_type::cpu, 0}, world.backend()};
      stream b{{device_type::cpu, 1}, world.backend()};
      {
        simulation::clock_hold hold{world};
        a.submit(
            [&] {
              log.note("A");
              a.sent_to_network(1000);  // A's core is free now: the next job there waits
            },
            {"A 300"});
        a.submit([&] { log.note("A2"); }, {"A2 300"});
        b.submit(
            [&] {
              log.note("B");
              a.sent_to_network(1000);  // on a's core, while A2 runs there: A2 ends later
            },
            {"B 500"});
      }
      a.synchronize();
      b.synchronize();
    }
    CHECK(log["A"] == 300 * us);
    CHECK(log["B"] == 500 * us);
    CHECK(log["A2"] == (cores == 0 ? 600 : 800) * us);  // 400 to 700, and 100 more from 500
  }
}

TEST_CASE("a message to another node takes its route: shared memory's queue or CAF's link") {
  // Node 0's job sends to node 1's stream at 100 us: left in shared memory's queue it is
  // handled a hand-over later (10 us); through CAF, the link's latency later again (50
  // us), and it takes its bytes' and its own time of the sender's core.
  for (bool posted : {true, false}) {
    CAPTURE(posted);
    auto s = settings_with(2, 0, 0, 10 * us);
    s.network = {50 * us, 100, 20 * us};  // 1000 bytes: 100 us, and 20 us a message
    s.posted = {0, 10, 0};                // 1000 bytes: 10 us
    simulation world{s};
    clock_log log{world};
    {
      stream a{{device_type::cpu, 0, 0}, world.backend()};
      stream b{{device_type::cpu, 0, 1}, world.backend()};
      {
        simulation::clock_hold hold{world};
        a.submit(
            [&] {
              log.note("A");
              a.sent_to_network(1000, posted);
              const node_send_scope sending{posted ? node_send::posted : node_send::through_caf};
              b.post([&] { log.note("handled on b"); });
            },
            {"A 100"});
        a.submit([&] { log.note("A2"); }, {"A2 100"});
      }
      a.synchronize();
      b.synchronize();
    }
    CHECK(log["A"] == 100 * us);
    CHECK(log["handled on b"] == (posted ? 110 : 160) * us);
    CHECK(log["A2"] == (posted ? 210 : 320) * us);  // after the sender's core's share
  }
}
