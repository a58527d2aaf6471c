// run_control.cpp: counting reports into steps, evaluations and the end of a run.
#include "actors/trainer/run_control.hpp"

#include <algorithm>
#include <cmath>

namespace troupe {

namespace {

// How many of the steps first..total-1 run_plan::evaluates_after, counted rather than
// looped over: a run of 2^40 steps must not spend its start visiting each of them.
std::int64_t evaluations_in(const run_plan& plan) {
  if (plan.evaluate_only)
    return 1;
  if (!plan.evaluate || plan.first_step >= plan.total_steps)
    return 0;
  // Steps s with (s + 1) % steps_per_epoch == 0, i.e. s + 1 in (first, total] a multiple.
  const auto per_epoch = plan.steps_per_epoch;
  std::int64_t count = plan.total_steps / per_epoch - plan.first_step / per_epoch;
  if (plan.total_steps % per_epoch != 0)
    ++count;  // the last step, which ends no epoch
  return count;
}

}  // namespace

run_control::run_control(const run_plan& plan)
    : plan_(plan), steps_done_(plan.first_step), next_place_(2 * plan.first_step) {
  // The session refuses plans whose counts could overflow (make_plan, limits::max_steps).
  items_left_ = plan_.total_steps - plan_.first_step + evaluations_in(plan_) * plan_.eval_batches;
}

void report_totals::add(const loss_report_msg& report) {
  loss_sum += report.loss_sum;
  terms += report.terms;
  for (std::size_t m = 0; m < metric_sums.size(); ++m)
    metric_sums[m] += report.metric_sums[m];
  samples += report.samples;
}

metric_values report_totals::metrics(const loss_spec& spec) const {
  metric_values out;
  for (std::size_t m = 0; m < spec.metrics.size() && m < metric_sums.size(); ++m) {
    const double mean = metric_sums[m] / terms;
    out.emplace_back(spec.metrics[m].name, spec.metrics[m].root ? std::sqrt(mean) : mean);
  }
  return out;
}

report_effect run_control::on_report(const loss_report_msg& report) {
  report_effect effect;
  if (items_left_ == 0)
    return effect;
  const auto& tag = report.tag;
  if (tag.stage == phase::eval) {
    eval_.add(report);
    effect.item_done = true;
    --items_left_;
    if (++evals_done_ % plan_.eval_batches == 0) {
      // After the epoch's last step, or the run's.
      const auto after = std::min((tag.epoch + 1) * plan_.steps_per_epoch, plan_.total_steps) - 1;
      finish(2 * after + 1, finished_item{std::nullopt, tag.epoch, eval_}, effect);
      eval_ = report_totals{};
    }
  } else {
    auto& t = steps_[tag.step];
    t.add(report);
    t.reports += std::max<std::int32_t>(1, report.microbatches);
    if (t.reports >= plan_.replicas * plan_.microbatches) {
      effect.item_done = true;
      const auto totals = t;
      steps_.erase(tag.step);
      --items_left_;
      finish(2 * tag.step, finished_item{tag.step, std::nullopt, totals}, effect);
    }
  }
  effect.run_done = items_left_ == 0;
  return effect;
}

// Note [finished in order]
// Reports come in the order their senders sent them through CAF, so a replica's report
// of step s came before its report of step s + 1, and steps completed in order. Between
// processes of one machine reports may also come through shared memory (Note [messages
// through shared memory] in runtime/net/shared_memory.cpp), and one sent through CAF
// before the link was made can come after a later one left there: step s + 1, or an
// evaluation, could complete before step s. What the trainer does with a finished item
// (metrics lines, step markers, checkpoints due, the steps done) follows the run's order,
// so an item that completes early is held here until those before it have finished. Its
// credit goes back to the loader at once, as before.
void run_control::finish(std::int64_t place, finished_item item, report_effect& effect) {
  held_.emplace(place, std::move(item));
  // (One placed before the next, which no run's reports make, is not held either.)
  for (auto it = held_.begin(); it != held_.end() && it->first <= next_place_;
       it = held_.erase(it)) {
    const auto& step = it->second.step;
    if (step)
      ++steps_done_;
    if (it->first == next_place_)
      next_place_ =
          !step || !plan_.evaluates_after(*step) ? 2 * (it->first / 2 + 1) : it->first + 1;
    effect.finished.push_back(std::move(it->second));
  }
}

}  // namespace troupe
