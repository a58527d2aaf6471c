// training_rate.cpp: Note [samples per second] in training_rate.hpp.
#include "actors/trainer/training_rate.hpp"

#include <algorithm>

namespace troupe {

void training_rate::start(clock::time_point now) {
  last_ = now;
  seconds_ = samples_ = 0;
  gap_is_evaluation_ = held_back_ = false;
  marks_.assign(1, mark{0, 0});
}

double training_rate::typical_step() const {
  if (marks_.size() < 2)
    return 0;
  return (marks_.back().seconds - marks_.front().seconds) / static_cast<double>(marks_.size() - 1);
}

void training_rate::step(clock::time_point now, std::int64_t samples) {
  const double gap = std::max(0.0, std::chrono::duration<double>(now - last_).count());
  last_ = now;
  // Note [samples per second]: a step held back by an evaluation is charged a typical step.
  const double typical = typical_step();
  if (gap_is_evaluation_) {
    seconds_ += typical;
    held_back_ = true;
  } else if (held_back_ && gap < typical / 4) {
    seconds_ += typical;
  } else {
    seconds_ += gap;
    held_back_ = false;
  }
  gap_is_evaluation_ = false;
  samples_ += static_cast<double>(samples);
  marks_.push_back(mark{seconds_, samples_});
  // Keep as the front the newest mark at least a window old, and at least min_steps marks
  // behind the newest.
  while (marks_.size() > min_steps_ + 1 && seconds_ - marks_[1].seconds >= window_)
    marks_.pop_front();
}

double training_rate::samples_per_second() const {
  if (marks_.empty())
    return 0;
  const auto& from = marks_.front();
  const double seconds = seconds_ - from.seconds;
  return seconds > 0 ? (samples_ - from.samples) / seconds : 0;
}

}  // namespace troupe
