// step_markers.hpp: the "step N" and "epoch N" markers a trace shows between steps.
//
// Recorded by the trainer when a training step is complete (the summaries and the
// timeline cut the trace into steps at these), into the recorder bound to its thread.
// Nothing when that thread's recorder is not recording.
#pragma once

#include <cstdint>

#include "troupe/trace.hpp"

namespace troupe {

/// Marks the end of training step `step` (0-based), and of its epoch if it was the last.
inline void mark_step_done(std::int64_t step, std::int64_t steps_per_epoch) {
  if (!trace::enabled())
    return;
  trace::event marker;
  marker.type = trace::event_type::marker;
  marker.start_ns = trace::now_ns();
  marker.name = "step";
  marker.step = step;
  marker.value = step / steps_per_epoch;
  trace::record(marker);
  if ((step + 1) % steps_per_epoch == 0) {
    marker.name = "epoch";
    marker.step = step / steps_per_epoch;
    trace::record(marker);
  }
}

}  // namespace troupe
