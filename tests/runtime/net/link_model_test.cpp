// The emulated link (Note [an emulated link] in runtime/net/link_model.cpp): its text, and
// when it delivers what is handed to it.
#include <doctest/doctest.h>

#include "runtime/net/link_model.hpp"
#include "troupe/error.hpp"

using namespace troupe;

TEST_CASE("a link reads in bits or bytes a second and any time unit, and describes itself back") {
  auto link = parse_link("100 Mbit/s, 20 ms", "[cluster] link");
  CHECK(link.given);
  CHECK(link.bytes_per_ns == doctest::Approx(100e6 / 8 / 1e9));
  CHECK(link.latency_ns == doctest::Approx(20e6));
  CHECK(parse_link("1 Gbit/s, 1 s").latency_ns == doctest::Approx(1e9));
  CHECK(parse_link("8 Mb/s,5us").bytes_per_ns == doctest::Approx(1e-3));
  CHECK(describe_link(link) == "12.5 MB/s, 20 ms");
  const auto again = parse_link(describe_link(link));
  CHECK(again.bytes_per_ns == doctest::Approx(link.bytes_per_ns));
  CHECK(again.latency_ns == doctest::Approx(link.latency_ns));
  try {
    parse_link("100 Mbps, 20 ms", "[cluster] link");
    FAIL("no error");
  } catch (const user_error& e) {
    CHECK(std::string{e.what()}.find("[cluster] link '100 Mbps, 20 ms': expected a bandwidth") ==
          0);
  }
  // Oversized: refused by its length before anything reads it.
  CHECK_THROWS_WITH_AS(parse_link(std::string(100000, '9') + " Mbit/s, 20 ms", "[cluster] link"),
                       doctest::Contains("longer than 200 characters"), user_error);
  for (const char* bad :
       {"100 Mbit/s", "100 Mbit/s, 20", "100 Mbit/s, 20 min", "0.5 Mbit/s, 1 ms",
        "100 Mbit/s, 20 ms, 1 ms", "node: node: 1 GB/s, 1 ms", "\x01\xff, 1 ms"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_link(bad, "[cluster] link"), user_error);
  }
}

TEST_CASE("an emulated link queues each node's messages: bytes at its rate, then its latency") {
  // 1 MB/s = 1e-3 bytes a ns, 5 ms: 1000 bytes take 1 ms to cross.
  net::emulate_link(parse_link("1 MB/s, 5 ms"));
  CHECK(net::link_emulated());
  CHECK(net::emulated_arrival_ns("node1", 1000, 0) == 6'000'000);
  // Handed over while the first still crosses: its bytes wait for the first's.
  CHECK(net::emulated_arrival_ns("node1", 1000, 500'000) == 7'000'000);
  // Another node's link is its own queue.
  CHECK(net::emulated_arrival_ns("node2", 0, 500'000) == 5'500'000);
  // Handed over once the link is idle: from then on.
  CHECK(net::emulated_arrival_ns("node1", 0, 10'000'000) == 15'000'000);
  net::emulate_link(link_cost{});
  CHECK_FALSE(net::link_emulated());
  CHECK(net::emulated_arrival_ns("node1", 1000, 42) == 42);
}
