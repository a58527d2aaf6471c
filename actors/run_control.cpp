// run_control.cpp: counting reports into steps, evaluations and the end of a run.
#include "actors/run_control.hpp"

namespace troupe {

run_control::run_control(const run_plan& plan) : plan_(plan), steps_done_(plan.first_step) {
  std::int64_t evaluations = 0;
  for (std::int64_t s = plan_.first_step; s < plan_.total_steps; ++s)
    if (plan_.evaluates_after(s))
      ++evaluations;
  items_left_ = plan_.total_steps - plan_.first_step + evaluations * plan_.eval_batches;
}

report_effect run_control::on_report(const micro_tag& tag, double loss_sum, std::int64_t correct,
                                     std::int64_t samples) {
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
    if (++t.reports == plan_.replicas * plan_.microbatches) {
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
