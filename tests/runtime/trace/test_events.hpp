// test_events.hpp: trace events as the recorder's tests and the trace tools' tests make them
// by hand (tests/runtime/trace/recorder_test.cpp, tests/runtime/trace_tools/trace_tools_test.cpp).
//
// Header-only and test-only. It sets what every event has (type, name, where, when); each
// test sets the rest of the fields it checks.
#pragma once

#include <cstdint>

#include "troupe/trace.hpp"

namespace troupe::test {

/// An event of `type` named `name` on `track`, with `peer`, at `start_ns`.
inline trace::event event_of(trace::event_type type, const char* name, std::uint32_t track,
                             std::uint32_t peer, std::int64_t start_ns) {
  trace::event e;
  e.type = type;
  e.name = name;
  e.track = track;
  e.peer = peer;
  e.start_ns = start_ns;
  return e;
}

}  // namespace troupe::test
