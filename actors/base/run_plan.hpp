// run_plan.hpp: how a run is cut into steps and evaluations, as the session planned it
// (prepare_session); read by the data loader, the trainer and the actor kinds' factories.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "troupe/loss.hpp"

namespace troupe {

/// How the run is cut into steps and evaluations; shared by the loader and the trainer.
struct run_plan {
  std::int64_t batch_size = 0;       // B
  std::int64_t replicas = 1;         // R
  std::int64_t microbatches = 1;     // M
  std::int64_t steps_per_epoch = 0;  // floor(N_train / B): the last partial batch is dropped
  std::int64_t total_steps = 0;
  std::int64_t first_step = 0;       // > 0: resumed; steps before it are in the checkpoint
  std::int64_t epochs = 0;           // ceil(total_steps / steps_per_epoch)
  bool evaluate = true;
  /// `troupe eval`: no training step; one evaluation of the parameters at first_step
  /// (total_steps == first_step), then the run ends.
  bool evaluate_only = false;
  /// The split evaluations run on: "test", "validation" ([data] validation) or "train".
  std::string evaluated = "test";
  std::int64_t eval_batch_size = 0;
  std::int64_t eval_batches = 0;     // per evaluation: ceil(N_test / eval_batch_size)
  std::int64_t positions = 1;        // labels a sample: > 1 for a language model's sequences
  /// What the [model] loss compares and reports (its targets, ignored label, metrics).
  loss_spec loss;
  /// Rows of each step for each replica: R entries summing to B, B / R each unless
  /// [parallel] balance says otherwise (Note [balanced replicas] in data_loader_actor.cpp).
  std::vector<std::int64_t> replica_rows;

  /// Whether every replica takes the same rows of a step.
  bool splits_evenly() const {
    return replica_rows.empty() ||
           std::equal(replica_rows.begin() + 1, replica_rows.end(), replica_rows.begin());
  }

  /// Evaluations run after step s (0-based) when this is true.
  bool evaluates_after(std::int64_t step) const {
    return evaluate && ((step + 1) % steps_per_epoch == 0 || step + 1 == total_steps);
  }
};

}  // namespace troupe
