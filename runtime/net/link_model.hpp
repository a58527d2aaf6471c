// link_model.hpp: a network link between nodes as a bandwidth and a latency ("100 Mbit/s,
// 20 ms"): what `troupe simulate --link` prices messages between nodes with, and what
// [cluster] link makes a run's own messages to other nodes wait for on this machine
// (Note [an emulated link] in link_model.cpp).
//
// Not here: the messages themselves (device_actor::send_written holds them), the simulator's
// prices (actors/tools/simulate.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace troupe {

/// A link: "25 GB/s, 5 us", "100 Mbit/s, 20 ms" (bandwidth in GB/s, Gb/s, Gbit/s, MB/s,
/// Mb/s or Mbit/s; one-way latency in ns, us, ms or s), optionally with "node: " in front.
struct link_cost {
  double bytes_per_ns = 0;  // GB/s
  double latency_ns = 0;
  bool given = false;
};

/// The link `text` says; throws user_error naming it as `what` says ("--link",
/// "[cluster] link") for anything else.
link_cost parse_link(const std::string& text, const std::string& what = "--link");

/// "12.5 MB/s, 20 ms": the link as parse_link reads it back.
std::string describe_link(const link_cost& link);

namespace net {

/// Makes every later message through emulated_arrival_ns wait for `link` (given = false:
/// for nothing). A process of a run installs [cluster] link once, before its actors start.
void emulate_link(const link_cost& link);
/// Whether a link is emulated in this process.
bool link_emulated();
/// When a message of `bytes` bytes handed over at `now_ns` (steady clock) to node `to`
/// reaches it: after the messages handed over before it to that node have crossed, its
/// own bytes at the link's bandwidth, then the latency. Thread-safe; `now_ns` when no link
/// is emulated.
std::int64_t emulated_arrival_ns(const std::string& to, std::int64_t bytes, std::int64_t now_ns);

}  // namespace net
}  // namespace troupe
