// The trace recorder as an object: what a thread records goes to the recorder bound to it
// and to no other, a frozen recorder takes nothing more, an unbound thread records
// nothing, and the message log is a recorder's own (Note [recorders and threads]).
#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tests/runtime/trace/test_events.hpp"
#include "troupe/error.hpp"
#include "troupe/trace.hpp"

using namespace troupe;

namespace {

std::shared_ptr<trace::recorder> make_recorder(bool record = true, bool log = false,
                                               const std::string& filter = "") {
  trace::recorder_settings settings;
  settings.record = record;
  settings.log_messages = log;
  settings.log_filter = filter;
  return std::make_shared<trace::recorder>(settings);
}

trace::event job_on(std::uint32_t track, std::int64_t step) {
  auto e = test::event_of(trace::event_type::job, "forward", track, 0, trace::now_ns());
  e.step = step;
  return e;
}

/// A frozen recorder keeping `capacity` events a thread, after this thread recorded
/// `count` jobs of steps 0, 1, ... into it.
std::shared_ptr<trace::recorder> recorded_jobs(std::size_t capacity, int count) {
  trace::recorder_settings settings;
  settings.record = true;
  settings.capacity = capacity;
  auto recorder = std::make_shared<trace::recorder>(settings);
  {
    trace::thread_binding bound{recorder};
    for (int i = 0; i < count; ++i)
      trace::record(job_on(1, i));
  }
  recorder->freeze();
  return recorder;
}

}  // namespace

TEST_CASE("a thread bound to no recorder records nothing, and that is no error") {
  auto recorder = make_recorder();
  REQUIRE(trace::this_thread_recorder() == nullptr);
  CHECK_FALSE(trace::enabled());
  CHECK_FALSE(trace::observing());
  CHECK(trace::next_flow() == 0);
  trace::record(job_on(1, 0));  // goes nowhere
  { trace::handler_span span(1, "forward", 0, 0, 0, 0, 0, 0, 0); }
  recorder->freeze();
  CHECK(recorder->collect().empty());
}

TEST_CASE("a thread binding records into its recorder and restores the one bound before") {
  auto outer = make_recorder();
  auto inner = make_recorder();
  {
    trace::thread_binding bind_outer{outer};
    CHECK(trace::enabled());
    trace::record(job_on(1, 0));
    {
      trace::thread_binding bind_inner{inner};
      CHECK(trace::this_thread_recorder() == inner.get());
      trace::record(job_on(2, 1));
      trace::record(job_on(2, 2));
    }
    CHECK(trace::this_thread_recorder() == outer.get());
    trace::record(job_on(1, 3));
  }
  CHECK(trace::this_thread_recorder() == nullptr);
  outer->freeze();
  inner->freeze();
  auto outer_events = outer->collect();
  auto inner_events = inner->collect();
  REQUIRE(outer_events.size() == 2);
  REQUIRE(inner_events.size() == 2);
  for (const auto& e : outer_events)
    CHECK(e.track == 1);
  for (const auto& e : inner_events)
    CHECK(e.track == 2);
}

TEST_CASE("two recorders on threads recording at once keep their events apart") {
  constexpr int events_per_thread = 20000;
  auto a = make_recorder();
  auto b = make_recorder();
  auto run = [](std::shared_ptr<trace::recorder> r, std::uint32_t track) {
    trace::thread_binding bound{r};
    for (int i = 0; i < events_per_thread; ++i) {
      auto e = job_on(track, i);
      e.flow = trace::next_flow();
      trace::record(e);
    }
  };
  // Two threads per recorder, so each recorder merges several buffers.
  std::vector<std::thread> threads;
  threads.emplace_back(run, a, 1);
  threads.emplace_back(run, b, 2);
  threads.emplace_back(run, a, 1);
  threads.emplace_back(run, b, 2);
  for (auto& t : threads)
    t.join();
  a->freeze();
  b->freeze();
  for (auto& [r, track] : {std::make_pair(a, 1u), std::make_pair(b, 2u)}) {
    auto events = r->collect();
    CHECK(events.size() == 2 * events_per_thread);
    CHECK(r->dropped() == 0);
    std::vector<bool> flows(2 * events_per_thread + 1, false);
    for (const auto& e : events) {
      CHECK(e.track == track);
      // Flow ids are the recorder's own: 1..N, each once.
      REQUIRE(e.flow >= 1);
      REQUIRE(e.flow <= 2 * events_per_thread);
      CHECK_FALSE(flows[e.flow]);
      flows[e.flow] = true;
    }
  }
}

TEST_CASE("a frozen recorder records nothing more, even from a thread still recording") {
  auto recorder = make_recorder();
  std::atomic<bool> stop{false};
  std::atomic<long> attempts{0};
  std::thread writer([&] {
    trace::thread_binding bound{recorder};
    while (!stop.load()) {
      trace::record(job_on(1, attempts.fetch_add(1)));
      { trace::handler_span span(1, "forward", 0, 0, 0, 0, 0, 0, 0); }
    }
  });
  while (attempts.load() < 1000)
    std::this_thread::yield();
  recorder->freeze();
  CHECK(recorder->frozen());
  auto frozen = recorder->collect().size();
  auto attempts_at_freeze = attempts.load();
  while (attempts.load() < attempts_at_freeze + 1000)
    std::this_thread::yield();
  stop = true;
  writer.join();
  CHECK(frozen > 0);
  CHECK(recorder->collect().size() == frozen);
  // And on this thread: bound, but frozen means off.
  trace::thread_binding bound{recorder};
  CHECK_FALSE(trace::enabled());
  trace::record(job_on(1, -1));
  CHECK(recorder->collect().size() == frozen);
}

TEST_CASE("collecting or writing a recorder that is not frozen is a programmer error") {
  auto recorder = make_recorder();
  CHECK_THROWS_AS(recorder->collect(), check_failure);
  CHECK_THROWS_AS(recorder->dropped(), check_failure);
  CHECK_THROWS_AS(recorder->write("unused.json", "{}"), check_failure);
  recorder->freeze();
  recorder->freeze();  // idempotent
  CHECK(recorder->collect().empty());
}

TEST_CASE("a recorder keeps at most its capacity per thread and counts the rest") {
  auto recorder = recorded_jobs(16, 20);
  CHECK(recorder->collect().size() == 16);
  CHECK(recorder->dropped() == 4);
}

TEST_CASE("a thread's events come back whole and in order across its buffer's chunks") {
  // Note [a buffer in chunks]: 4096 events a chunk; 10000 fill two and part of a third,
  // and a capacity of 9000 ends inside the third.
  auto recorder = recorded_jobs(9000, 10000);
  auto events = recorder->collect();
  REQUIRE(events.size() == 9000);
  for (std::size_t i = 0; i < events.size(); ++i)
    if (events[i].step != static_cast<std::int64_t>(i))
      FAIL("event " << i << " is step " << events[i].step);
  CHECK(recorder->dropped() == 1000);
}

TEST_CASE("the message log and its filter belong to one recorder") {
  auto logging = make_recorder(false, true, "kind=forward");
  auto silent = make_recorder(true, false);
  auto sender = logging->register_track({"layer_0", "layer", "cpu:0"});
  auto receiver = logging->register_track({"layer_1", "layer", "cpu:0"});
  bool other_thread_logs = true;
  std::thread other([&] {
    trace::thread_binding bound{silent};
    other_thread_logs = trace::logging();
  });
  other.join();
  CHECK_FALSE(other_thread_logs);
  {
    trace::thread_binding bound{logging};
    CHECK(trace::logging());
    CHECK_FALSE(trace::enabled());  // logging, not recording
  }
  CHECK_THROWS_AS(make_recorder(false, true, "colour=red"), user_error);
  // The log line, with names longer than any fixed buffer, whole.
  auto e = test::event_of(trace::event_type::handle, "forward", receiver, sender, 1234567);
  e.step = 3;
  e.microbatch = 1;
  e.replica = 0;
  e.bytes = 2048;
  CHECK(logging->describe(e) ==
        "[     1.235 ms] layer_0          -> layer_1          forward    step 3 mb 1 r0 (2.0 KiB)");
  std::string long_name(3000, 'x');
  auto long_track = logging->register_track({long_name + "_end", "layer", "cpu:0"});
  e.track = long_track;
  auto line = logging->describe(e);
  CHECK(line.find(long_name + "_end -> ") == std::string::npos);
  CHECK(line.find("-> " + long_name + "_end forward") != std::string::npos);
  CHECK(line.size() > 3000);
  logging->freeze();
  silent->freeze();
}
