// training_rate.hpp: samples per second over training time, for the progress lines, the
// metrics and the end of a run.
//
// Note [samples per second]
// Steps finish in the run's order (Note [finished in order] in run_control.hpp), so the
// steps a wiring computed while an evaluation ran are held back until it ends and then
// finish together, microseconds apart. A rate smoothed per step (what troupe had: each step's
// batch over its interval, averaged 0.9 / 0.1) read such a burst as a 10-20x faster run for
// the next hundred steps (722565 samples/s after an evaluation, against ~64k around it; a
// DP2 run showed 1.2 million without one). So the rate is measured over a window of training
// time instead: the samples of the steps finished in the last `window` seconds of it (and at
// least the last `min_steps` steps, so that slow steps are not measured one or two at a
// time), over those seconds. Training time is wall time less each gap that ended in an
// evaluation; the steps held back by it (the first after it, and those finishing in a burst
// behind it, each sooner than a quarter of the typical step) are charged the typical step
// time of the window instead of their microseconds, so an evaluation neither slows the rate
// down nor speeds it up, whether steps take a millisecond or a second. The whole run's rate
// is over its training time too.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>

namespace troupe {

class training_rate {
 public:
  using clock = std::chrono::steady_clock;

  explicit training_rate(double window_seconds = 2.0, std::size_t min_steps = 8)
      : window_(window_seconds), min_steps_(min_steps) {}

  /// The run starts (or resumes) at `now`.
  void start(clock::time_point now);
  /// An evaluation finished: the gap from the last step to the next one is not training.
  void evaluation_finished() { gap_is_evaluation_ = true; }
  /// A step of `samples` samples finished at `now`.
  void step(clock::time_point now, std::int64_t samples);

  /// Over the last window of training time (all of it while there is less); 0 before the
  /// first step.
  double samples_per_second() const;
  /// Over all the training time so far.
  double overall() const { return seconds_ > 0 ? samples_ / seconds_ : 0; }
  /// The training time so far, in seconds.
  double training_seconds() const { return seconds_; }

 private:
  struct mark {
    double seconds;  // training time at a step's end
    double samples;  // samples finished by then
  };
  /// The mean step time of the window (0 before two steps).
  double typical_step() const;

  double window_;
  std::size_t min_steps_;
  std::deque<mark> marks_;
  clock::time_point last_{};
  double seconds_ = 0;
  double samples_ = 0;
  bool gap_is_evaluation_ = false;
  bool held_back_ = false;  // steps are finishing in the burst behind an evaluation
};

}  // namespace troupe
