// The loss actor, driven with real messages from a scoped actor that plays the last layer
// (logits in, dlogits back), the data loader (labels) and the trainer (loss reports):
// labels and logits pair in either order, the loss and dlogits match a double-precision
// softmax cross-entropy, and the GPipe flush holds every backward of a step until all M
// forwards are in.
//
// Tolerances: the loss kernel computes in float. A probability exp(z - max) / sum over C = 5
// classes carries a relative error of at most ~(C + 4) float roundings (2^-24 each), about
// 6e-7, so a dlogits entry (global-batch scale times p - onehot, |.| <= 1) is within 1e-6 of
// the double value; a row's loss log(sum) + max - z[label] (|.| < 6 here) is within ~4e-6,
// and a sum of 4 rows within 2e-5. Wrong scaling, a wrong label or a swapped row moves these
// values by 1e-2 or more. The two arrival orders run the same kernel on the same inputs and
// are compared bit for bit.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "actors/training/loss_actor.hpp"
#include "runtime/model/loss.hpp"
#include "tests/actors/actor_test_support.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

constexpr std::int64_t loss_classes = 5;
constexpr std::int64_t rows = 4;          // per micro-batch
constexpr std::int64_t global_batch = 8;  // a power of two: the scale 1/8 is exact

std::vector<float> logits_values(int seed) {
  std::vector<float> out(rows * loss_classes);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = 0.25f * static_cast<float>((static_cast<int>(i) * 7 + seed * 5) % 17 - 8);
  return out;
}

std::vector<std::int32_t> label_values(int seed) {
  std::vector<std::int32_t> out(rows);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::int32_t>((static_cast<int>(i) * 3 + seed) % loss_classes);
  return out;
}

/// What the loss must compute for one micro-batch, in double.
struct expected_loss {
  double loss_sum = 0;
  std::int64_t correct = 0;
  std::vector<double> dlogits;
};

expected_loss reference(const std::vector<float>& z, const std::vector<std::int32_t>& y) {
  expected_loss out;
  out.dlogits.resize(z.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = z.data() + r * loss_classes;
    std::int64_t argmax = 0;
    for (std::int64_t c = 1; c < loss_classes; ++c)
      if (row[c] > row[argmax])
        argmax = c;  // the first maximum on ties, as torch.argmax
    double sum = 0;
    for (std::int64_t c = 0; c < loss_classes; ++c)
      sum += std::exp(static_cast<double>(row[c]) - row[argmax]);
    const auto label = y[static_cast<std::size_t>(r)];
    out.loss_sum += std::log(sum) + row[argmax] - row[label];
    out.correct += argmax == label ? 1 : 0;
    for (std::int64_t c = 0; c < loss_classes; ++c) {
      const double p = std::exp(static_cast<double>(row[c]) - row[argmax]) / sum;
      out.dlogits[static_cast<std::size_t>(r * loss_classes + c)] =
          (p - (c == label ? 1.0 : 0.0)) / static_cast<double>(global_batch);
    }
  }
  return out;
}

/// The tag of a micro-batch whose parameters are those of its own step.
micro_tag tag_of(std::int64_t step, std::int32_t microbatch, phase stage = phase::train) {
  return test::tag_of(step, microbatch, step, stage);
}

activation_msg logits_of(const micro_tag& tag, const std::vector<float>& z) {
  activation_msg m;
  m.tag = tag;
  m.x = tensor::from(z, {rows, loss_classes}, {device_type::cpu, 0});
  return m;
}

labels_msg labels_of(const micro_tag& tag, const std::vector<std::int32_t>& y) {
  labels_msg m;
  m.tag = tag;
  m.labels = tensor::empty({rows}, dtype::i32, {device_type::cpu, 0});
  std::copy(y.begin(), y.end(), m.labels.i32());
  m.global_batch = global_batch;
  m.global_terms = global_batch;
  return m;
}

void check_report(const loss_report_msg& got, const expected_loss& want) {
  CHECK(got.samples == rows);
  CHECK(got.microbatches == 1);
  CHECK(got.terms == rows);
  CHECK(got.metric_sums[0] == static_cast<double>(want.correct));
  CHECK(std::abs(got.loss_sum - want.loss_sum) <= 2e-5);
}

/// One report for a step's M micro-batches: the sums of theirs (Note [one report a step]).
void check_step_report(const loss_report_msg& got, const std::vector<expected_loss>& want) {
  double loss_sum = 0;
  std::int64_t correct = 0;
  for (const auto& w : want) {
    loss_sum += w.loss_sum;
    correct += w.correct;
  }
  CHECK(got.microbatches == static_cast<std::int32_t>(want.size()));
  CHECK(got.samples == rows * static_cast<std::int64_t>(want.size()));
  CHECK(got.terms == static_cast<double>(got.samples));
  CHECK(got.metric_sums[0] == static_cast<double>(correct));
  CHECK(std::abs(got.loss_sum - loss_sum) <= 2e-5 * static_cast<double>(want.size()));
}

void check_dlogits(const tensor& got, const expected_loss& want) {
  CHECK(got.shape() == shape_t{rows, loss_classes});
  auto v = values(got);
  REQUIRE(v.size() == want.dlogits.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    INFO("dlogits[" << i << "]: got " << v[i] << ", want " << want.dlogits[i]);
    CHECK(std::abs(v[i] - want.dlogits[i]) <= 1e-6);
  }
}

/// A loss actor on cpu:0 after the scoped actor (its last layer), reporting to it.
struct loss_fixture : actor_fixture {
  caf::actor spawn(std::int32_t microbatches, bool flush, const std::string& loss = "softmax_xent",
                   std::int64_t width = loss_classes) {
    loss_actor_settings s;
    s.name = "loss";
    model_section model;
    model.loss = loss;
    s.loss = create_loss(model, device_type::cpu);
    s.width = width;
    s.microbatches = microbatches;
    s.flush = flush;
    s.on = &cpu(0);
    auto actor = system.spawn<loss_actor>(std::move(s));
    place(actor, cpu(0));
    self->send(actor, wiring({}, {wire("activations", me(), "layer")}));
    return actor;
  }
};

}  // namespace

TEST_CASE_FIXTURE(loss_fixture,
                  "labels first or logits first, the loss actor reports the same loss and sends "
                  "the same dlogits") {
  auto actor = spawn(1, false);
  const auto z = logits_values(1);
  const auto y = label_values(2);
  const auto want = reference(z, y);
  // Step 0: labels, then logits. Step 1: the same numbers the other way round.
  self->send(actor, labels_of(tag_of(0, 0), y));
  self->send(actor, logits_of(tag_of(0, 0), z));
  auto report0 = next<loss_report_msg>("the report of labels-first");
  auto back0 = next<gradient_msg>("dlogits of labels-first");
  self->send(actor, logits_of(tag_of(1, 0), z));
  self->send(actor, labels_of(tag_of(1, 0), y));
  auto report1 = next<loss_report_msg>("the report of logits-first");
  auto back1 = next<gradient_msg>("dlogits of logits-first");

  CHECK(report0.tag.step == 0);
  CHECK(report1.tag.step == 1);
  CHECK(back0.tag.step == 0);
  CHECK(back1.tag.step == 1);
  check_report(report0, want);
  check_dlogits(back0.dx, want);
  CHECK(report1.loss_sum == report0.loss_sum);
  CHECK(report1.metric_sums == report0.metric_sums);
  CHECK(values(back1.dx) == values(back0.dx));
  // Some rows right and some wrong, so the accuracy check above has teeth.
  CHECK(want.correct > 0);
  CHECK(want.correct < rows);
  finish(actor);
}

TEST_CASE_FIXTURE(loss_fixture,
                  "an evaluation batch gets a loss report and a release, never dlogits") {
  auto actor = spawn(1, false);
  const auto z = logits_values(3);
  const auto y = label_values(4);
  self->send(actor, logits_of(tag_of(5, 0, phase::eval), z));
  self->send(actor, labels_of(tag_of(5, 0, phase::eval), y));
  auto release = next<release_msg>("the release of the evaluation batch");
  CHECK(release.tag.stage == phase::eval);
  CHECK(release.tag.step == 5);
  check_report(next<loss_report_msg>("the evaluation report"), reference(z, y));
  expect_quiet("no dlogits for an evaluation batch");
  finish(actor);
}

TEST_CASE_FIXTURE(loss_fixture,
                  "with the GPipe flush the loss actor releases no backward before all M "
                  "forwards of the step are in") {
  const std::int32_t M = 3;
  std::vector<expected_loss> want;
  auto send_pair = [&](caf::actor& actor, std::int32_t m) {
    const auto z = logits_values(10 + m);
    const auto y = label_values(20 + m);
    want.push_back(reference(z, y));
    // Alternate the arrival order too.
    if (m % 2 == 0) {
      self->send(actor, logits_of(tag_of(3, m), z));
      self->send(actor, labels_of(tag_of(3, m), y));
    } else {
      self->send(actor, labels_of(tag_of(3, m), y));
      self->send(actor, logits_of(tag_of(3, m), z));
    }
  };

  SUBCASE("flush: all dlogits after the last forward, in micro-batch order") {
    auto actor = spawn(M, true);
    for (std::int32_t m = 0; m + 1 < M; ++m) {
      send_pair(actor, m);
      expect_quiet("dlogits are held and the report waits until the step's last micro-batch");
    }
    send_pair(actor, M - 1);
    for (std::int32_t m = 0; m < M; ++m) {
      CAPTURE(m);
      auto back = next<gradient_msg>("held dlogits");
      CHECK(back.tag.step == 3);
      CHECK(back.tag.microbatch == m);
      check_dlogits(back.dx, want[static_cast<std::size_t>(m)]);
    }
    check_step_report(next<loss_report_msg>("the step's report"), want);
    expect_quiet("one report a step");
    finish(actor);
  }
  SUBCASE("no flush (1F1B): each micro-batch's dlogits go back at once; one report a step") {
    auto actor = spawn(M, false);
    for (std::int32_t m = 0; m < M; ++m) {
      send_pair(actor, m);
      auto back = next<gradient_msg>("dlogits");
      CHECK(back.tag.microbatch == m);
      check_dlogits(back.dx, want.back());
      if (m + 1 < M)
        expect_quiet("no report before the step's last micro-batch");
    }
    check_step_report(next<loss_report_msg>("the step's report"), want);
    // The next step starts its own sums.
    const auto z = logits_values(40);
    const auto y = label_values(41);
    std::vector<expected_loss> next_step;
    for (std::int32_t m = 0; m < M; ++m) {
      next_step.push_back(reference(z, y));
      self->send(actor, logits_of(tag_of(4, m), z));
      self->send(actor, labels_of(tag_of(4, m), y));
      next<gradient_msg>("dlogits");
    }
    check_step_report(next<loss_report_msg>("the next step's report"), next_step);
    finish(actor);
  }
}

TEST_CASE_FIXTURE(loss_fixture,
                  "with mse the loss actor compares float targets, scales by the global terms "
                  "and reports the squared and absolute errors") {
  auto actor = spawn(1, false, "mse", 2);
  const std::vector<float> x{1.0f, 2.0f, -1.0f, 0.5f};  // (2, 2) predictions
  const std::vector<float> y{0.5f, 2.0f, 1.0f, 0.0f};   // d = 0.5, 0, -2, 0.5
  activation_msg output;
  output.tag = tag_of(0, 0);
  output.x = tensor::from(x, {2, 2}, {device_type::cpu, 0});
  labels_msg targets;
  targets.tag = tag_of(0, 0);
  targets.labels = tensor::from(y, {2, 2}, {device_type::cpu, 0});
  targets.global_batch = 4;
  targets.global_terms = 8;  // 4 samples of 2 targets in the global batch
  self->send(actor, targets);
  self->send(actor, output);
  auto report = next<loss_report_msg>("the report");
  auto back = next<gradient_msg>("the gradient");
  CHECK(report.terms == 4);
  CHECK(report.loss_sum == 0.25 + 0 + 4 + 0.25);
  CHECK(report.metric_sums[0] == 0.25 + 0 + 4 + 0.25);  // for the RMSE
  CHECK(report.metric_sums[1] == 0.5 + 0 + 2 + 0.5);    // for the MAE
  // 2 d / 8, exact in float.
  CHECK(values(back.dx) == std::vector<float>{0.125f, 0.0f, -0.5f, 0.125f});
  finish(actor);
}
