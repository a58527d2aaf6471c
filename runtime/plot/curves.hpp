// curves.hpp: training curves from metrics files (`troupe plot`): training loss, test
// accuracy and test loss over steps or training seconds, for one or more runs on shared
// axes, as SVG or HTML.
//
// The input is the JSON-lines metrics file `troupe run` writes ([run] metrics): a line with
// "step" and "loss" is a training step, one with "step" and "test_accuracy" (and
// "test_loss") an evaluation; other lines ("event" records) are skipped. Any program that
// writes the same lines (bench/cnn_vs_pytorch.py --curves does, for PyTorch) can be
// plotted next to troupe's runs. Nothing here knows about actors or runs.
#pragma once

#include <string>
#include <vector>

namespace troupe {

struct curve_point {
  double step = 0;  // where on the x axis: the step, or the training seconds (curve_axis)
  double value = 0;
};

/// What the curves are drawn over: steps, or seconds of training (each line's "train_s",
/// an evaluation at the seconds of the step line before it).
enum class curve_axis { steps, seconds };

/// One run's curves.
struct run_curves {
  std::string label;                      // its name in the legend
  std::vector<curve_point> train_loss;    // per training step
  std::vector<curve_point> test_accuracy; // per evaluation, in [0, 1]
  std::vector<curve_point> test_loss;     // per evaluation
};

/// Reads a metrics file, its points over `axis`. Throws user_error naming the file and line
/// of a line that is not a JSON object or whose "step", "loss", "test_accuracy",
/// "test_loss" or "train_s" is not a number, for a file with no training or evaluation
/// lines at all, and over seconds for one whose step lines have no "train_s".
run_curves read_metrics(const std::string& path, const std::string& label,
                        curve_axis axis = curve_axis::steps);

/// The curves as one SVG picture `width` px wide: a panel per quantity some run has,
/// stacked, with shared step axes and a legend. Training loss is averaged over buckets
/// of steps so that a long run's curve stays readable (and the file small).
std::string render_curves_svg(const std::vector<run_curves>& runs, double width = 900,
                              curve_axis axis = curve_axis::steps);

/// The same picture in a self-contained HTML page.
std::string render_curves_html(const std::vector<run_curves>& runs, double width = 900,
                               curve_axis axis = curve_axis::steps);

}  // namespace troupe
