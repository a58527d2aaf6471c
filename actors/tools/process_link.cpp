// process_link.cpp: a message between two processes of this machine (see the header).
#include "actors/tools/process_link.hpp"

#include <sys/resource.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "actors/session/cluster.hpp"
#include "runtime/net/secret.hpp"
#include "troupe/messages.hpp"

namespace troupe {

// Note [between processes of one machine]
// `troupe launch` runs a config's nodes as processes of this machine. Their messages take
// one of two ways (Note [messages through shared memory] in runtime/net/shared_memory.cpp):
// those left in the reader's shared-memory queue are seen by its stream threads between
// jobs, as a message between two threads of one process is (calibrate's hand-over); every
// other one goes through CAF: serialised, written to the loopback socket by the sender's
// network thread, read and deserialised by the receiver's, its tensors' bytes staged in
// shared memory (or inline, without it). What that second way costs is measured here as
// it happens, by two actor systems of this process connected over 127.0.0.1 exactly as two
// nodes connect (configure_cluster_system; CAF gives each system of a process its own node
// id): the latency is half the median round trip of a one-float tensor and its answer; the
// CPU time is the process's (both systems' threads, user and system) over a burst of such
// tensors and their answers, all on their way at once, a message's share of it (measured
// over the round trips instead, it would be mostly CAF's workers polling for work while
// they wait: as much CPU as the trips' time); the bandwidth is a 4 MiB tensor's bytes over its round
// trip's time, through the socket (a run without shared memory, or a tensor the inbox cannot
// hold). `troupe simulate` prices a message between nodes of one machine with them
// (actors/tools/simulate.cpp).

namespace {

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

caf::behavior answering(caf::event_based_actor*) {
  return {[](const tensor& t) { return static_cast<std::int64_t>(t.bytes()); }};
}

}  // namespace

process_link_timing time_process_link(std::int64_t repeats) {
  process_link_timing out;
  const auto trips = std::max<std::int64_t>(20, repeats);
  caf::actor_system_config there_config;
  configure_cluster_system(there_config, cluster_node{});
  add_message_types(there_config);
  caf::actor_system there{there_config};
  auto answer = there.spawn(answering);
  // Through a front door of its own, with a secret of the moment, as a run's nodes meet
  // (Note [the front door] in runtime/net/front_door.cpp): the port is open to this
  // machine's other users while it measures.
  net::door_settings settings;
  settings.secret = net::random_nonce(32);
  std::optional<net::front_door> door;
  try {
    door.emplace(settings, [&there, &answer, &door](unique_fd socket, const std::string&) {
      admit_to_network(there, std::move(socket), static_cast<std::uint16_t>(door->port()), answer);
    });
  } catch (const user_error&) {
    caf::anon_send_exit(answer, caf::exit_reason::user_shutdown);
    return out;
  }
  {
    caf::actor_system_config here_config;
    configure_cluster_system(here_config, cluster_node{});
    add_message_types(here_config);
    caf::actor_system here{here_config};
    caf::expected<caf::actor> remote{caf::sec::cannot_connect_to_node};
    auto knocked = net::knock("127.0.0.1", door->port(), settings.secret,
                              std::chrono::steady_clock::now() + std::chrono::seconds(10));
    if (knocked.socket.get() >= 0)
      remote =
          connect_through_door(here, std::move(knocked.socket),
                               static_cast<std::uint16_t>(door->port()), std::chrono::seconds(10));
    if (remote) {
      caf::scoped_actor self{here};
      bool failed = false;
      auto trip_us = [&](const tensor& t) {
        const auto start = std::chrono::steady_clock::now();
        self->request(*remote, std::chrono::seconds(10), t)
            .receive([](std::int64_t) {}, [&failed](caf::error&) { failed = true; });
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                         start)
            .count();
      };
      const auto small = tensor::zeros({1});
      for (int i = 0; i < 5; ++i)  // the connection's buffers, the pools
        trip_us(small);
      std::vector<double> times;
      for (std::int64_t i = 0; i < trips; ++i)
        times.push_back(trip_us(small));
      // Many messages on their way at once keep every thread busy, so none of the CPU
      // time is a thread polling for work (CAF's workers spin a while before they sleep).
      const std::int64_t burst = 8 * trips;
      const double cpu_before = cpu_seconds();
      for (std::int64_t i = 0; i < burst; ++i)
        self->send(*remote, small);
      std::int64_t answered = 0;
      self->receive_for(answered, burst)(
          [](std::int64_t) {}, [&failed](caf::error&) { failed = true; },
          caf::after(std::chrono::seconds(10)) >> [&failed] { failed = true; });
      const double cpu = cpu_seconds() - cpu_before;
      const auto large = tensor::zeros({std::int64_t{1} << 20});  // 4 MiB
      trip_us(large);
      std::vector<double> large_times;
      for (std::int64_t i = 0; i < std::min<std::int64_t>(trips, 20); ++i)
        large_times.push_back(trip_us(large));
      if (!failed) {
        out.latency_us = median_of(times) / 2;
        out.message_cpu_us = cpu * 1e6 / static_cast<double>(2 * burst);
        // The answer is 8 bytes: a round trip is the tensor's way and a small message's.
        const double large_us = std::max(1.0, median_of(large_times) - out.latency_us);
        out.gb_per_s = static_cast<double>(large.bytes()) / (large_us * 1000);
      }
    }
  }
  caf::anon_send_exit(answer, caf::exit_reason::user_shutdown);
  return out;
}

double median_of(std::vector<double> times) {
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2),
                   times.end());
  return times[times.size() / 2];
}

}  // namespace troupe
