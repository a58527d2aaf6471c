// batch_assembler_actor.hpp: a data loader's hands on another node.
//
// Over several nodes the data loader lives on one of them, and every node loaded the same
// data set (prepare_session). A replica whose first layer is on another node gets its
// micro-batches from this actor on that node: the loader picks the rows as it always does
// (shuffling, steps, credits, evaluations stay its own) and sends only their numbers
// (batch_rows_msg); the assembler gathers those rows of its copy of the data set into a
// tensor on the first layer's device, by a job on that device's stream, and hands it to
// the first layer as the loader's activation_msg, trace stamp included. The first layer
// releases its credit to the loader as before. So a step moves B / R row numbers across
// the network per replica instead of B / R x D floats, like DistributedSampler (each rank
// reads its own share) without a second source of truth for the order.
//
// One per node that needs one, spawned by the session (Note [joining a run] in
// cluster.cpp): not an actor of the topology, named "loader@nodeK" in the roster. It runs
// on the host thread, as the loader does. Not here: labels (small, the loader sends them
// itself), and loading or checking the data set (the session did).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/dataset.hpp"
#include "actors/base/batch_rows.hpp"
#include "troupe/device.hpp"
#include "troupe/device_actor.hpp"
#include "troupe/messages.hpp"

namespace troupe {

/// Rows `rows[0 .. count)` of `source` as one (count, D) f32 tensor on `on`, gathered by a
/// job on its stream labelled `label` (on a CPU device in its idle lane, which whoever reads
/// the batch hurries by arrive(): Note [a batch when the device is idle] in the .cpp); ready
/// when the job has run. A split with `workers` (an image folder) is gathered by that many
/// host threads instead, the device's job waiting for them. `epoch` is the training batch's
/// (rows that augment draw from it: dataset::gather), or -1 for an evaluation's.
/// The loader does the same for a first layer on its own node.
tensor gather_rows(const std::shared_ptr<const dataset_split>& data, const dataset& source,
                   std::vector<std::int64_t> rows, device& on, job_label label,
                   std::int64_t epoch);

/// The epoch a batch's rows are gathered for: its tag's, or -1 for an evaluation's.
inline std::int64_t gather_epoch(const micro_tag& tag) {
  return tag.stage == phase::eval ? -1 : tag.epoch;
}

class batch_assembler_actor : public device_actor {
 public:
  /// `devices` are this node's, `data` this node's copy of the run's data set.
  batch_assembler_actor(caf::actor_config& config, int node,
                        std::shared_ptr<const dataset_split> data, device_set* devices);

 protected:
  caf::message_handler handlers() override;
  std::string waiting_for() const override;

 private:
  void check(const batch_rows_msg& message) const;  // TROUPE_CHECKs that it can be gathered
  void assemble(batch_rows_msg& message);
  std::shared_ptr<const dataset_split> data_;
  device_set* devices_;
  /// By replica: the sequence of the next rows to gather, and those that came before it.
  struct in_order {
    std::uint64_t next = 0;
    std::map<std::uint64_t, batch_rows_msg> early;
  };
  std::map<std::int32_t, in_order> replicas_;
  std::size_t early_ = 0;  // held, of all replicas
};

}  // namespace troupe
