// link_model.cpp: links as text, and the link a run emulates (see the header).
#include "runtime/net/link_model.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>

#include "runtime/base/limits.hpp"
#include "runtime/base/text_format.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

struct unit {
  const char* name;
  double scale;  // to bytes per ns, or to ns
};
// Longest first where one name starts another ("Mbit/s" before "Mb/s" is not needed: they
// differ at the third letter; "ms" before "s" is).
const unit bandwidths[] = {{"GB/s", 1},    {"Gbit/s", 1.0 / 8},  {"Gb/s", 1.0 / 8},
                           {"MB/s", 1e-3}, {"Mbit/s", 1e-3 / 8}, {"Mb/s", 1e-3 / 8}};
const unit latencies[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};

class link_text {
 public:
  link_text(const std::string& whole, const std::string& what) : whole_(whole), what_(what) {}

  user_error bad(const std::string& expected) const {
    return user_error(what_ + " " + quote_user_text(whole_) + ": expected " + expected);
  }
  void skip(const char* characters) {
    while (at_ < text_.size() && std::string{characters}.find(text_[at_]) != std::string::npos)
      ++at_;
  }
  /// A number >= 0 and one of `units` after it, scaled.
  template <std::size_t N>
  double quantity(const unit (&units)[N], const char* expected) {
    skip(" ");
    const char* begin = text_.c_str() + at_;
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    if (end == begin || !std::isfinite(v) || v < 0)
      throw bad(expected);
    at_ += static_cast<std::size_t>(end - begin);
    skip(" ");
    for (const auto& u : units)
      if (text_.compare(at_, std::string{u.name}.size(), u.name) == 0) {
        at_ += std::string{u.name}.size();
        return v * u.scale;
      }
    throw bad(expected);
  }
  void set(std::string text) { text_ = std::move(text); }
  bool done() {
    skip(" ");
    return at_ == text_.size();
  }

 private:
  const std::string& whole_;
  const std::string& what_;
  std::string text_;
  std::size_t at_ = 0;
};

}  // namespace

link_cost parse_link(const std::string& whole, const std::string& what) {
  const char* expected =
      "a bandwidth and a one-way latency, e.g. \"25 GB/s, 5 us\" or \"100 Mbit/s, 20 ms\" "
      "(GB/s, Gb/s, Gbit/s, MB/s, Mb/s or Mbit/s; ns, us, ms or s)";
  link_text in{whole, what};
  if (whole.size() > 200)
    throw user_error(what + ": the text is longer than 200 characters");
  std::string text = whole;
  const auto colon = text.find(':');
  if (colon != std::string::npos) {
    const auto scope = text.substr(0, colon);
    const auto first = scope.find_first_not_of(' ');
    if (first != std::string::npos && scope.substr(first).rfind("node", 0) != 0)
      throw in.bad("a link between nodes (\"node: 25 GB/s, 5 us\"), the only kind there is");
    text = text.substr(colon + 1);
  }
  in.set(text);
  link_cost out;
  out.bytes_per_ns = in.quantity(bandwidths, expected);
  in.skip(" ,");
  out.latency_ns = in.quantity(latencies, expected);
  if (!in.done() || out.bytes_per_ns <= 0)
    throw in.bad(expected);
  // Within what a link can be, so that every price is a count of nanoseconds that fits.
  if (out.bytes_per_ns < 1e-3 || out.bytes_per_ns > 1e6 || out.latency_ns > 1e12)
    throw in.bad("a bandwidth from 1 MB/s to 1000000 GB/s and a latency of at most 1000 s");
  out.given = true;
  return out;
}

std::string describe_link(const link_cost& link) {
  return string_printf("%g MB/s, %g ms", link.bytes_per_ns * 1e3, link.latency_ns / 1e6);
}

// Note [an emulated link]
// [cluster] link = "100 Mbit/s, 20 ms" makes the processes of a run on one machine (or a
// fast network) behave as if a slower link joined them, to measure what a wiring does over
// one (issue 50's asynchronous modes) without one. Every message an actor sends to another
// node through device_actor::send_written (each that carries tensors: activations,
// gradients, the ring's chunks, parameters) is held by its sender until the link would
// have delivered it: the link to each other node is one queue, a message's bytes start
// crossing when the messages handed over before it have, take bytes / bandwidth, and the
// message arrives the latency after its last byte. A message is handed over as soon as it
// is written (and its sender's earlier messages to other nodes are), so the latencies of
// messages in flight overlap as on a real link; only their bytes queue. The sender holds it
// (device_actor's network queue, Note [nothing unwritten to the network]) and sends it then; the
// real transfer, shared memory or loopback TCP, is fast beside it. Not delayed: CAF's and troupe's
// small control messages sent without send_written (credits, loss reports, heartbeats, the
// coordinator's), and gloo's own TCP. It is an emulation, and said so: the run prints the link and
// its trace's metadata names it.
namespace net {
namespace {

struct emulated_link {
  std::mutex mutex;
  link_cost link;
  std::map<std::string, double> free_at_ns;  // by node: when its queue's last byte has crossed
  std::atomic<bool> active{false};           // link.given, read without the lock
};

emulated_link& the_link() {
  static emulated_link link;
  return link;
}

}  // namespace

void emulate_link(const link_cost& link) {
  auto& l = the_link();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.link = link;
  l.free_at_ns.clear();
  l.active = link.given;
}

// Asked for every message to another node: an atomic, not the lock.
bool link_emulated() { return the_link().active.load(std::memory_order_relaxed); }

std::int64_t emulated_arrival_ns(const std::string& to, std::int64_t bytes, std::int64_t now_ns) {
  auto& l = the_link();
  std::lock_guard<std::mutex> lock(l.mutex);
  if (!l.link.given)
    return now_ns;
  auto& free_at = l.free_at_ns[to];
  free_at = std::max(free_at, static_cast<double>(now_ns)) +
            static_cast<double>(std::max<std::int64_t>(bytes, 0)) / l.link.bytes_per_ns;
  return static_cast<std::int64_t>(free_at + l.link.latency_ns);
}

}  // namespace net
}  // namespace troupe
