// run_control.hpp: what the trainer counts to know where a run is and when it is over.
//
// A run is a list of items: every training step, and after each evaluation point every
// evaluation batch. Loss reports arrive per replica and step (the sums of its M
// micro-batches: R a step) and per evaluation batch; run_control adds them up and says,
// for each report, whether it completed an item (the trainer returns a credit to the data
// loader), a step, an evaluation, or the whole run. It is plain bookkeeping: it sends nothing,
// prints nothing and keeps no time (the trainer actor composes it with progress, metrics and
// watchdog).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/trainer/metrics_writer.hpp"       // metric_values
#include "actors/training/data_loader_actor.hpp"  // run_plan
#include "troupe/messages.hpp"

namespace troupe {

/// Sums of the loss reports of one step or one evaluation.
struct report_totals {
  double loss_sum = 0;
  double terms = 0;
  std::array<double, 2> metric_sums{};
  std::int64_t samples = 0;
  std::int64_t reports = 0;  // micro-batches reported

  void add(const loss_report_msg& report);
  double mean_loss() const { return loss_sum / terms; }
  /// Each metric of `spec`: its sum over the terms (the square root of that for RMSE).
  metric_values metrics(const loss_spec& spec) const;
};

/// A training step or an evaluation, complete, with its sums.
struct finished_item {
  std::optional<std::int64_t> step;   // this training step...
  std::optional<std::int64_t> epoch;  // ...or the evaluation after this epoch (0-based)
  report_totals totals;
};

/// What one loss report completed.
struct report_effect {
  bool item_done = false;  // a step or an evaluation batch: one credit back to the loader
  /// Steps and evaluations finished now, in the run's order (Note [finished in order] in
  /// the .cpp): what this report completed, unless one before it is not complete yet, and
  /// then those held behind it.
  std::vector<finished_item> finished;
  bool run_done = false;  // that was the last item of the run
};

class run_control {
 public:
  explicit run_control(const run_plan& plan);

  /// Counts a report (of its micro-batches' sums); reports after the end (or for nothing)
  /// change nothing.
  report_effect on_report(const loss_report_msg& report);

  /// Items (steps and evaluation batches) still to come.
  std::int64_t items_left() const { return items_left_; }
  /// Training steps completed so far (a resumed run counts those of its checkpoint).
  std::int64_t steps_done() const { return steps_done_; }
  bool done() const { return items_left_ == 0; }

 private:
  run_plan plan_;
  std::map<std::int64_t, report_totals> steps_;  // training steps in progress
  report_totals eval_;                           // the evaluation in progress
  std::int64_t evals_done_ = 0;                  // evaluation batches reported so far
  std::int64_t steps_done_ = 0;
  std::int64_t items_left_ = 0;
  // Finished items by their place in the run (step s at 2 s, the evaluation after it at
  // 2 s + 1) until those before them are; the place of the next one to finish.
  std::map<std::int64_t, finished_item> held_;
  std::int64_t next_place_ = 0;
  void finish(std::int64_t place, finished_item item, report_effect& effect);
};

}  // namespace troupe
