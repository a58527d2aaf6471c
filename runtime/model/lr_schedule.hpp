// lr_schedule.hpp: the learning rate at each optimizer step: constant, step decay or
// cosine, each with an optional linear warm-up.
//
// A pure function of the step number (no state), so every optimizer replica and a
// resumed run agree on the rate without talking. It does not parse configs (the
// [optimizer] loader parses the type, runtime/config/choices.hpp, and the session fills
// this in) and does not know about epochs: steps are optimizer
// steps.
//
//     lr_schedule s;                      // cosine from 0.1 to 0 over 1000 steps,
//     s.type = lr_schedule::kind::cosine; // after 100 warm-up steps
//     s.base_lr = 0.1;
//     s.warmup_steps = 100;
//     s.total_steps = 1000;
//     s.at(0);    // 0.001 (= 0.1 * 1 / 100)
//     s.at(99);   // 0.1
//     s.at(550);  // 0.05 (half-way through the cosine)
#pragma once

#include <cstdint>
#include <string>

#include "runtime/config/choices.hpp"

namespace troupe {

/// The learning rate at each optimizer step (0-based) of a run of total_steps steps.
struct lr_schedule {
  using kind = lr_schedule_type;  // runtime/config/choices.hpp: to_string, parse_enum
  kind type = kind::constant;
  double base_lr = 1e-3;
  std::int64_t warmup_steps = 0;   // linear warm-up: lr = base * (step + 1) / warmup for step < warmup
  std::int64_t step_size = 1000;   // step: base * gamma^floor((step - warmup) / step_size) after warm-up
  double gamma = 0.1;
  double min_lr = 0.0;             // cosine: min + (base - min) * 0.5 * (1 + cos(pi * t)),
  std::int64_t total_steps = 1;    //   t = (step - warmup) / max(1, total_steps - warmup), clamped to [0, 1]

  /// The rate for 0-based optimizer step `step` (>= 0). Steps past total_steps keep the
  /// last rate of the cosine (min_lr); step decay keeps decaying.
  double at(std::int64_t step) const;
};

}  // namespace troupe
