// Run control (actors/trainer/run_control.hpp), without actors: reports add up into steps and
// evaluations, each completed item returns one credit, and the run ends after the last.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "actors/trainer/run_control.hpp"

using namespace troupe;

namespace {

run_plan plan_of(std::int64_t steps, std::int64_t steps_per_epoch, bool evaluate) {
  run_plan p;
  p.batch_size = 8;
  p.replicas = 2;
  p.microbatches = 2;
  p.steps_per_epoch = steps_per_epoch;
  p.total_steps = steps;
  p.epochs = (steps + steps_per_epoch - 1) / steps_per_epoch;
  p.evaluate = evaluate;
  p.eval_batch_size = 4;
  p.eval_batches = 3;
  return p;
}

micro_tag train(std::int64_t step) {
  micro_tag t;
  t.step = step;
  return t;
}

/// A classifier's report: `correct` of `samples` rows, the loss summed over them.
loss_report_msg report(const micro_tag& tag, double loss_sum, std::int64_t correct,
                       std::int64_t samples, std::int32_t microbatches = 1) {
  loss_report_msg r;
  r.tag = tag;
  r.loss_sum = loss_sum;
  r.terms = static_cast<double>(samples);
  r.metric_sums[0] = static_cast<double>(correct);
  r.samples = samples;
  r.microbatches = microbatches;
  return r;
}

/// The accuracy of a classifier's totals.
double accuracy(const report_totals& totals) {
  loss_spec spec;
  spec.metrics = {{"accuracy", false, true}};
  return totals.metrics(spec).at(0).second;
}

micro_tag eval(std::int64_t epoch) {
  micro_tag t;
  t.stage = phase::eval;
  t.epoch = epoch;
  return t;
}

}  // namespace

TEST_CASE("a step is complete after R x M reports, in any order of steps") {
  run_control control{plan_of(3, 10, false)};
  CHECK(control.items_left() == 3);
  // Step 1's reports may arrive before step 0 is complete.
  for (int i = 0; i < 3; ++i) {
    auto e = control.on_report(report(train(i < 2 ? 0 : 1), 1.0, 1, 2));
    CHECK_FALSE(e.item_done);
  }
  auto done_0 = control.on_report(report(train(0), 3.0, 2, 2));
  CHECK_FALSE(done_0.item_done);  // step 0 has 3 of 4
  done_0 = control.on_report(report(train(0), 4.0, 2, 2));
  REQUIRE(done_0.item_done);
  REQUIRE(done_0.finished.size() == 1);
  const auto& step_0 = done_0.finished[0];
  REQUIRE(step_0.step);
  CHECK(*step_0.step == 0);
  CHECK_FALSE(step_0.epoch);
  CHECK(step_0.totals.samples == 8);
  CHECK(step_0.totals.mean_loss() == doctest::Approx(9.0 / 8));
  CHECK(accuracy(step_0.totals) == doctest::Approx(6.0 / 8));
  CHECK(control.steps_done() == 1);
  CHECK(control.items_left() == 2);
  CHECK_FALSE(done_0.run_done);
}

TEST_CASE("a replica's report of its M micro-batches counts M: a step is R such reports") {
  run_control control{plan_of(2, 10, false)};  // R = 2, M = 2
  auto e = control.on_report(report(train(0), 3.0, 2, 4, 2));
  CHECK_FALSE(e.item_done);  // one replica's step
  e = control.on_report(report(train(1), 1.0, 1, 4, 2));
  CHECK_FALSE(e.item_done);
  e = control.on_report(report(train(0), 5.0, 3, 4, 2));
  REQUIRE(e.finished.size() == 1);
  REQUIRE(e.finished[0].step);
  CHECK(*e.finished[0].step == 0);
  const auto& totals = e.finished[0].totals;
  CHECK(totals.samples == 8);
  CHECK(totals.reports == 4);
  CHECK(totals.mean_loss() == doctest::Approx(8.0 / 8));
  CHECK(accuracy(totals) == doctest::Approx(5.0 / 8));
  e = control.on_report(report(train(1), 1.0, 1, 4, 2));
  CHECK(e.run_done);
}

TEST_CASE("evaluation batches are items, and the evaluation completes after the last batch") {
  // 2 epochs of 2 steps, an evaluation of 3 batches after each: 2 x (2 + 3) items.
  run_control control{plan_of(4, 2, true)};
  CHECK(control.items_left() == 10);
  std::int64_t credits = 0;
  std::vector<std::int64_t> evaluations;
  bool ended = false;
  for (std::int64_t step = 0; step < 4; ++step) {
    for (int r = 0; r < 4; ++r) {
      auto e = control.on_report(report(train(step), 1, 1, 2));
      credits += e.item_done;
      ended = e.run_done;
    }
    if ((step + 1) % 2 == 0)
      for (int b = 0; b < 3; ++b) {
        auto e = control.on_report(report(eval(step / 2), 1, b, 4));
        credits += e.item_done;
        ended = e.run_done;
        for (const auto& item : e.finished) {
          REQUIRE(item.epoch);
          evaluations.push_back(*item.epoch);
          CHECK(item.totals.samples == 12);
          CHECK(item.totals.metric_sums[0] == 0 + 1 + 2);
        }
      }
  }
  CHECK(credits == 10);
  CHECK(evaluations == std::vector<std::int64_t>{0, 1});
  CHECK(ended);
  CHECK(control.done());
  // Reports after the end change nothing.
  auto late = control.on_report(report(train(4), 1, 1, 2));
  CHECK_FALSE(late.item_done);
  CHECK_FALSE(late.run_done);
}

TEST_CASE("steps and evaluations finish in the run's order, however their reports come") {
  // Note [finished in order]: a report through CAF can come after later ones through
  // shared memory. 5 steps of 2 epochs (evaluations after steps 1 and 3, and the last,
  // 4), R = 4 reports a step, 3 batches an evaluation; items complete in a scrambled
  // order, each credited at once, and finish in the run's.
  run_control control{plan_of(5, 2, true)};
  std::vector<std::string> finished;
  std::int64_t credits = 0;
  auto report_times = [&](const micro_tag& tag, int times) {
    for (int i = 0; i < times; ++i) {
      auto e = control.on_report(report(tag, 1, 1, 2));
      credits += e.item_done;
      for (const auto& item : e.finished)
        finished.push_back(item.step ? "step " + std::to_string(*item.step)
                                     : "eval " + std::to_string(*item.epoch));
    }
  };
  report_times(train(1), 4);  // complete, but step 0 is not
  CHECK(finished.empty());
  CHECK(credits == 1);
  CHECK(control.steps_done() == 0);
  report_times(eval(0), 3);  // the evaluation after step 1
  report_times(train(2), 4);
  CHECK(finished.empty());
  report_times(train(0), 4);  // releases steps 1, the evaluation and 2
  CHECK(finished == std::vector<std::string>{"step 0", "step 1", "eval 0", "step 2"});
  CHECK(control.steps_done() == 3);
  report_times(train(4), 4);
  report_times(eval(2), 3);
  report_times(train(3), 3);
  CHECK(finished.size() == 4);
  report_times(eval(1), 3);  // the evaluation after step 3 waits for step 3
  CHECK(finished.size() == 4);
  CHECK_FALSE(control.done());
  report_times(train(3), 1);
  CHECK(finished == std::vector<std::string>{"step 0", "step 1", "eval 0", "step 2", "step 3",
                                             "eval 1", "step 4", "eval 2"});
  CHECK(credits == 5 + 3 * 3);
  CHECK(control.steps_done() == 5);
  CHECK(control.done());
}

TEST_CASE("a run of no items is done before it starts") {
  run_control control{plan_of(0, 2, false)};
  CHECK(control.done());
}

TEST_CASE("the items of a run are counted without visiting its steps, as a loop over them would") {
  // Against the loop the count replaces, over small plans of every shape.
  for (std::int64_t total = 1; total <= 12; ++total)
    for (std::int64_t per_epoch = 1; per_epoch <= 5; ++per_epoch)
      for (std::int64_t first = 0; first < total; ++first)
        for (bool evaluate : {false, true}) {
          auto plan = plan_of(total, per_epoch, evaluate);
          plan.first_step = first;
          std::int64_t evaluations = 0;
          for (std::int64_t s = first; s < total; ++s)
            evaluations += plan.evaluates_after(s) ? 1 : 0;
          run_control control{plan};
          INFO(total, " steps, ", per_epoch, " per epoch, from ", first, ", evaluate ", evaluate);
          CHECK(control.items_left() == total - first + evaluations * plan.eval_batches);
        }
  // 2^40 steps: counted at once (the loop took hours before a run printed anything).
  auto huge = plan_of(std::int64_t{1} << 40, 7, true);
  run_control control{huge};
  const auto evaluations = ((std::int64_t{1} << 40) + 6) / 7;
  CHECK(control.items_left() == (std::int64_t{1} << 40) + evaluations * huge.eval_batches);
}
