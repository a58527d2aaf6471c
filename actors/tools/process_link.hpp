// process_link.hpp: what a message between two troupe processes of this machine costs
// through CAF over loopback, for `troupe calibrate` (Note [between processes of one
// machine] in the .cpp).
#pragma once

#include <cstdint>
#include <vector>

namespace troupe {

struct process_link_timing {
  double latency_us = -1;      // a small message, send to handling: half a round trip
  double gb_per_s = -1;        // a tensor's bytes through the loopback TCP link
  double message_cpu_us = -1;  // CPU time a small message costs both processes' threads
};

/// Measures it with two actor systems of this process, connected over 127.0.0.1 as two
/// nodes are (`repeats` round trips of each kind, at least 20). -1 for what could not be
/// measured (no loopback), which simulate then takes from its defaults.
process_link_timing time_process_link(std::int64_t repeats);

/// The middle one of `times` (its upper middle for an even count), as calibrate takes its
/// timings. `times` must not be empty.
double median_of(std::vector<double> times);

}  // namespace troupe
