// run_control.cpp: counting reports into steps, evaluations and the end of a run.
#include "actors/run_control.hpp"

#include <algorithm>

namespace troupe {

namespace {

// How many of the steps first..total-1 run_plan::evaluates_after, counted rather than
// looped over: a run of 2^40 steps must not spend its start visiting each of them.
std::int64_t evaluations_in(const run_plan& plan) {
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

run_control::run_control(const run_plan& plan) : plan_(plan), steps_done_(plan.first_step) {
  // The session refuses plans whose counts could overflow (make_plan, limits::max_steps).
  items_left_ = plan_.total_steps - plan_.first_step + evaluations_in(plan_) * plan_.eval_batches;
}

report_effect run_control::on_report(const micro_tag& tag, double loss_sum, std::int64_t correct,
                                     std::int64_t samples, std::int32_t microbatches) {
  report_effect effect;
  if (items_left_ == 0)
    return effect;
  if (tag.stage == phase::eval) {
    eval_.loss_sum += loss_sum;
    eval_.correct += correct;
    eval_.samples += samples;
    effect.item_done = true;
    --items_left_;
    if (++evals_done_ % plan_.eval_batches == 0) {
      effect.epoch = tag.epoch;
      effect.totals = eval_;
      eval_ = report_totals{};
    }
  } else {
    auto& t = steps_[tag.step];
    t.loss_sum += loss_sum;
    t.correct += correct;
    t.samples += samples;
    t.reports += std::max<std::int32_t>(1, microbatches);
    if (t.reports >= plan_.replicas * plan_.microbatches) {
      effect.item_done = true;
      effect.step = tag.step;
      effect.totals = t;
      steps_.erase(tag.step);
      --items_left_;
      ++steps_done_;
    }
  }
  effect.run_done = items_left_ == 0;
  return effect;
}

}  // namespace troupe
