// training_rate.cpp: Note [samples per second] in training_rate.hpp.
#include "actors/trainer/training_rate.hpp"

namespace troupe {

void training_rate::start(clock::time_point now) {
  last_ = now;
  seconds_ = samples_ = 0;
  gap_is_evaluation_ = false;
  marks_.assign(1, mark{0, 0});
}

void training_rate::step(clock::time_point now, std::int64_t samples) {
  const double gap = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  if (!gap_is_evaluation_ && gap > 0)
    seconds_ += gap;
  gap_is_evaluation_ = false;
  samples_ += static_cast<double>(samples);
  marks_.push_back(mark{seconds_, samples_});
  // Keep the newest mark at least a window old as the front.
  while (marks_.size() > 2 && seconds_ - marks_[1].seconds >= window_)
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
