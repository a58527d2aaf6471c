// checkpoint_plan.hpp: when the optimizers take a checkpoint, and the writer they send
// their copies to (actors/training/checkpoint_writer.hpp); read by the actor kinds'
// factories and the trainer.
#pragma once

#include <caf/actor.hpp>

#include <cstdint>

namespace troupe {

/// When the optimizers take a checkpoint: after every `every` steps (0: never on a count),
/// at the end of the run, and, for keeping the best, after each evaluation.
struct checkpoint_plan {
  caf::actor writer;  // none: no checkpoints
  std::int64_t every = 0;
  bool at_evaluations = false;
  std::int64_t total_steps = 0;
  std::int64_t steps_per_epoch = 1;
  bool evaluate = false;

  bool enabled() const { return static_cast<bool>(writer); }
  /// True when the parameters after `steps` steps are checkpointed.
  bool due(std::int64_t steps) const {
    if (!enabled() || steps <= 0)
      return false;
    return steps == total_steps || (every > 0 && steps % every == 0) ||
           (at_evaluations && evaluate && steps % steps_per_epoch == 0);
  }
};
}  // namespace troupe
