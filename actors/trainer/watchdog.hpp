// watchdog.hpp: noticing a run that has stopped moving, and asking its actors why.
//
// Note [watchdog]
// Progress is any job a device finishes or any loss report. When there has been none for
// [run] watchdog seconds, the run is stuck (a miswired config, a capacity that can never
// be met, a lost message): every actor is idle and still answers, so the trainer asks each
// what it is waiting for (status_atom), and ends the run with exit_code::watchdog and the
// answers instead of hanging.
//
// `watchdog` is the clock half, a plain class fed with a progress count and the time;
// ask_actors() is the asking half. Neither ends the run: the trainer actor does.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace troupe {

class watchdog {
 public:
  using clock = std::chrono::steady_clock;

  /// `seconds` without progress means stuck; 0 turns the watchdog off.
  explicit watchdog(double seconds) : seconds_(seconds) {}

  bool enabled() const { return seconds_ > 0; }
  /// How often to look: a quarter of the limit, between 10 ms and 1 s.
  std::chrono::milliseconds interval() const;

  /// Starts watching at `now`.
  void start(clock::time_point now);
  /// Looks at the progress count at `now`; returns the seconds without progress.
  double observe(std::uint64_t progress, clock::time_point now);
  /// True once `observe` has seen no progress for the limit.
  bool stuck(double quiet_seconds) const { return enabled() && quiet_seconds >= seconds_; }

 private:
  double seconds_;
  std::uint64_t last_progress_ = 0;
  clock::time_point last_progress_time_;
};

/// The message a stuck run ends with: how long nothing moved, then one answer per line.
std::string watchdog_report(double quiet_seconds, const std::vector<std::string>& answers);

/// Asks every actor what it is waiting for (2 s each) and calls `done` with the answers,
/// in the order of `actors` ("NAME: did not answer (busy or dead)" for those that did
/// not), once all are in. Calls `done` at once when `actors` is empty.
void ask_actors(caf::event_based_actor* self,
                const std::vector<std::pair<std::string, caf::actor>>& actors,
                std::function<void(const std::vector<std::string>&)> done);

}  // namespace troupe
