// lr_schedule.cpp: the learning-rate schedules of lr_schedule.hpp.
//
// Computed in double from the step number each time (no accumulated state), so step k
// has the same rate however the run got there.
#include "runtime/model/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

#include "troupe/error.hpp"

namespace troupe {
namespace {
constexpr double pi = 3.14159265358979323846;
}  // namespace

double lr_schedule::at(std::int64_t step) const {
  TROUPE_CHECK(step >= 0, "learning-rate schedule asked for step " << step);
  if (step < warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const std::int64_t after_warmup = step - std::max<std::int64_t>(warmup_steps, 0);
  switch (type) {
    case kind::constant:
      return base_lr;
    case kind::step: {
      TROUPE_CHECK(step_size > 0, "step schedule with step_size " << step_size);
      // Integer division is floor here: after_warmup >= 0.
      return base_lr * std::pow(gamma, static_cast<double>(after_warmup / step_size));
    }
    case kind::cosine: {
      const double span =
          static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup_steps));
      const double t = std::clamp(static_cast<double>(after_warmup) / span, 0.0, 1.0);
      return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(pi * t));
    }
  }
  TROUPE_CHECK(false, "unknown lr_schedule kind " << static_cast<int>(type));
  return base_lr;
}

}  // namespace troupe
