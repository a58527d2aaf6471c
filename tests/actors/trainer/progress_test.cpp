// The progress lines of a run (actors/trainer/progress.hpp), without actors: their exact text, when
// each form prints, and durations of any length.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "actors/trainer/progress.hpp"

using namespace troupe;

namespace {

progress_settings settings_for(bool bar) {
  progress_settings s;
  s.plan.batch_size = 32;
  s.plan.steps_per_epoch = 10;
  s.plan.total_steps = 20;
  s.plan.epochs = 2;
  s.title = "mlp";
  s.bar = bar;
  s.log_every = 5;
  return s;
}

}  // namespace

TEST_CASE("durations format as m:ss or h:mm:ss, for any number of hours") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(59.4) == "0:59");
  CHECK(format_duration(59.6) == "1:00");
  CHECK(format_duration(3599) == "59:59");
  CHECK(format_duration(3600) == "1:00:00");
  CHECK(format_duration(3723) == "1:02:03");
  // > 100000 hours: every digit, nothing cut.
  CHECK(format_duration(123456.0 * 3600 + 7 * 60 + 8) == "123456:07:08");
  CHECK(format_duration(1e15) == "277777777777:46:40");
  CHECK(format_duration(-1) == "--:--");
  CHECK(format_duration(std::nan("")) == "--:--");
  CHECK(format_duration(std::numeric_limits<double>::infinity()) == "--:--");
  CHECK(format_duration(1e300) == "--:--");
}

TEST_CASE("plain progress lines come every log_every steps and at the last step") {
  std::ostringstream out;
  progress p{settings_for(false), out};
  p.step(0, 1.5, {{"accuracy", 0.25}}, 0);  // not a multiple of 5: nothing
  CHECK(out.str().empty());
  p.step(4, 1.23456, {{"accuracy", 0.5}}, 640);  // done = 5; ETA: 15 steps x 32 samples / 640 per s = 0:00.75
  CHECK(out.str() == "mlp epoch 1/2 step 5/20 loss 1.2346 acc 0.500 640 samples/s ETA 0:01\n");
  out.str("");
  p.step(19, 0.1, {{"accuracy", 0.975}}, 1000.4);
  CHECK(out.str() == "mlp epoch 2/2 step 20/20 loss 0.1000 acc 0.975 1000 samples/s ETA 0:00\n");
  out.str("");
  p.evaluation(1, 0.3, {{"accuracy", 0.8812}}, 1000);
  CHECK(out.str() == "epoch 2: test loss 0.3000, test accuracy 88.12% (1000 samples)\n");
  out.str("");
  p.end();
  CHECK(out.str().empty());
}

TEST_CASE("the progress bar redraws one line every 5 steps and ends it") {
  std::ostringstream out;
  progress p{settings_for(true), out};
  p.step(3, 1.0, {{"accuracy", 0.5}}, 100);
  CHECK(out.str().empty());
  p.step(4, 1.0, {{"accuracy", 0.5}}, 0);  // no throughput yet: no ETA
  CHECK(out.str() ==
        "\rmlp epoch 1/2 [============            ] step 5/20 loss 1.0000 acc 0.500 "
        "0 samples/s ETA --:-- ");
  out.str("");
  p.step(9, 1.0, {{"accuracy", 0.5}}, 1e-9);  // an ETA of centuries is shown as unknown
  CHECK(out.str().find("ETA --:-- ") != std::string::npos);
  out.str("");
  p.evaluation(0, 0.5, {{"accuracy", 0.5}}, 10);
  CHECK(out.str() == "\nepoch 1: test loss 0.5000, test accuracy 50.00% (10 samples)\n");
  out.str("");
  p.end();
  CHECK(out.str() == "\n");
}

TEST_CASE("a long title is printed whole") {
  auto s = settings_for(false);
  s.title = std::string(4000, 't');
  std::ostringstream out;
  progress p{s, out};
  p.step(19, 1, {{"accuracy", 1}}, 1);
  CHECK(out.str().rfind(s.title + " epoch 2/2 step 20/20", 0) == 0);
}

TEST_CASE("quiet progress prints nothing") {
  auto s = settings_for(true);
  s.quiet = true;
  std::ostringstream out;
  progress p{s, out};
  p.step(19, 1, {{"accuracy", 1}}, 1);
  p.evaluation(1, 1, {{"accuracy", 1}}, 1);
  p.end();
  CHECK(out.str().empty());
}
