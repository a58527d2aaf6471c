// timeline.hpp: the schedule of a traced run as a picture (`troupe trace timeline`).
//
// One row per device stream (labelled with the device and, for pipelines, its stage), time
// along x (with an axis in ms from the start of the trace), one rectangle per job: forward
// blue, backward green (with the micro-batch number inside when there is room), the rest
// (loss, update, reduce, copy, ...) in greys; eval-phase jobs paler. Under a row, a red
// hatched band marks the intervals in which an activations wire leaving an actor on that
// device had all its credits in use (the sender could not send more): `credits A -> B`
// counters at the wire's capacity. Dashed lines mark the `step N` markers. A trace of
// several nodes (merged by node0, merge.hpp) groups each node's rows on a band named
// "nodeK", node0 first: the node boundaries are the bands' edges.
//
// Like the schedule figures of the GPipe and 1F1B papers, it shows a window of training
// steps: from the first job of step A to the last job of step B, and every job that
// overlaps that interval (clipped to it). Every job rectangle has class="<job name>"
// (class="<job name> eval" in the eval phase), data-step, data-microbatch, data-actor,
// and a <title> child: browsers show it on hover. The SVG is self-contained; the HTML page
// embeds it with a legend and a little CSS, and loads nothing from elsewhere.
// With critical_path, the jobs on each shown step's critical path (Note [critical path] in
// critical_path.hpp) get class "critical" (a thick red outline) and a red line joins each
// to the next one on the path, across devices.
// It does not summarise (that is trace_summary.hpp) and draws no flow arrows.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/trace_tools/trace_file.hpp"

namespace troupe {

struct timeline_options {
  std::int64_t first_step = -1;  // the window, both inclusive; -1: the default window,
  std::int64_t last_step = -1;   // steps 1 to 3 if the run has them, else everything
  double width = 1600;           // of the whole picture, px
  bool critical_path = false;    // outline the jobs on each step's critical path, joined
                                 // by lines (critical_path.hpp)
};

/// The time interval a timeline shows.
struct timeline_window {
  double start_us = 0;
  double end_us = 0;
  std::int64_t first_step = -1;  // -1 when the window is the whole trace
  std::int64_t last_step = -1;
};

/// Resolves options to a window. Throws user_error when the requested steps are not in
/// the trace (naming the steps it has).
timeline_window choose_window(const trace_file& trace, const timeline_options& options);

/// Parses "A:B" (or "A" for one step) for --steps. Throws user_error on anything else.
void parse_step_range(const std::string& text, timeline_options& options);

/// A standalone SVG document.
std::string render_timeline_svg(const trace_file& trace, const timeline_options& options);

/// An HTML page: title, legend, the SVG, hover details from the SVG <title>s.
std::string render_timeline_html(const trace_file& trace, const timeline_options& options);

}  // namespace troupe
