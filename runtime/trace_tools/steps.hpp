// steps.hpp: what a training step's time is, defined once for every reader of a trace:
// `troupe trace summary` and `explain`, `troupe simulate` (a simulated run's trace) and
// bench/simulate_vs_measured.py (through them).
//
// Note [step time]
// A training step takes from the end of the step before it (the end of that step's last
// training job) to the end of its own last training job; the first step in a trace starts
// at its own first job. So consecutive steps tile the run without overlap or gap: their
// times add up to the run's training time, whatever overlaps inside a pipeline, and time a
// step spends before its first job (waiting for a batch, a host turn) is the step's. A step
// whose number follows a gap (steps missing from a trace that dropped events) spans the
// missing steps too; its period is its time over the steps it spans.
// The run's step time is the mean period of the steps after the first (pipelines fill and
// pools warm in the first), without the slowest and the fastest tenth: one slow step (a page
// fault storm, another process on the machine) does not move it, and steps that end in
// pairs, one at once after the other, still average to their period.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/trace_tools/trace_file.hpp"

namespace troupe {

/// One training step of a trace (Note [step time]).
struct step_window {
  std::int64_t step = 0;
  double start_us = 0;          // the end of the step before; the first's first job
  double end_us = 0;            // the end of its last training job
  double first_job_us = 0;      // the start of its first training job
  std::size_t last_job = 0;     // its last training job's index in trace.jobs
  std::int64_t spans_steps = 1; // 1, or more after a gap in the step numbers

  double time_us() const { return end_us - start_us; }
  double period_us() const { return time_us() / static_cast<double>(spans_steps); }
};

/// The training steps of `trace` in step order (evaluation jobs and jobs of no step are
/// not a step's).
std::vector<step_window> step_windows(const trace_file& trace);

/// The steps that make the run's step time: those after the first without the slowest and
/// the fastest tenth by period; indices into `steps`, in step order. Empty with < 2 steps.
std::vector<std::size_t> steady_steps(const std::vector<step_window>& steps);

/// The run's step time: the mean period of steady_steps(); 0 with < 2 steps.
double run_step_time_us(const std::vector<step_window>& steps);

}  // namespace troupe
