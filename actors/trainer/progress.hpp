// progress.hpp: the lines a run prints while it trains (stdout of `troupe run`).
//
// Two forms: on a terminal one line redrawn in place ("\r", a bar of the epoch, at most
// every 5 steps), elsewhere a plain line every `log_every` steps; both always show the
// last step, and an evaluation prints its own line. It only formats and writes to the
// stream it is given: the trainer actor decides when a step or an evaluation is done.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "actors/trainer/metrics_writer.hpp"       // metric_values
#include "actors/training/data_loader_actor.hpp"  // run_plan

namespace troupe {

/// "m:ss" below an hour, "h:mm:ss" from an hour on (any number of hours); "--:--" for a
/// negative, infinite or not-a-number duration.
std::string format_duration(double seconds);

struct progress_settings {
  run_plan plan;
  std::string title;            // the config's name, first on every line
  bool bar = false;             // a terminal: redraw one line
  bool quiet = false;           // print nothing at all
  std::int64_t log_every = 50;  // plain lines: every this many steps (and the last)
};

class progress {
 public:
  /// `out` must outlive this object.
  progress(progress_settings settings, std::ostream& out);

  /// Training step `step` (0-based) is done with this mean loss and the loss's metrics
  /// ("acc 0.912", "rmse 0.31 mae 0.22"); the smoothed throughput gives the ETA.
  void step(std::int64_t step, double loss, const metric_values& metrics,
            double samples_per_second);
  /// The evaluation after epoch `epoch` (0-based) is done.
  void evaluation(std::int64_t epoch, double loss, const metric_values& metrics,
                  std::int64_t samples);
  /// The run is over: ends a redrawn line.
  void end();

 private:
  progress_settings settings_;
  std::ostream& out_;
};

}  // namespace troupe
