// data_loader_actor.hpp: turns a data set into tagged micro-batches, a bounded few ahead.
//
// The run is a sequence of items: each training step (a global batch of B samples,
// split into R replicas x M micro-batches of B / (R M) samples (or by [parallel] balance's
// weights: run_plan::replica_rows), sent to each replica's first layer with the labels
// to its loss), and after each epoch the evaluation batches
// of the test set (replica 0, forward only). Shuffling is a permutation per epoch keyed
// by (seed, epoch), so every wiring sees the same samples in the same steps. Two bounds:
// the loader prepares an item only while it holds one of `prefetch` item credits (the
// trainer returns one when an item has been fully computed), so the next batches are
// ready while the current one trains; and each replica's activations wire has its own
// credits (credit_outbox.hpp), returned by the first layer when it releases a micro-batch.
// A batch is assembled (its rows gathered) by a job on the stream of the device it goes
// to: each replica's device gathers its own share, when it has nothing else to run or at
// the latest when the forward that reads it is submitted, and the loader's thread only
// picks the rows; a replica on another node
// gets the row numbers, and its node's batch assembler gathers them there
// (actors/training/batch_assembler_actor.hpp). It runs on the host, not on
// a device, but speaks the same protocol as the device actors (device_actor: wiring,
// failures, status, finish, tracing).
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "actors/training/batch_assembler_actor.hpp"
#include "actors/base/credit_outbox.hpp"
#include "actors/base/run_plan.hpp"
#include "runtime/data/dataset.hpp"
#include "troupe/device.hpp"
#include "troupe/device_actor.hpp"
#include "troupe/messages.hpp"

namespace troupe {

/// (stop_atom) -> steps sent: the trainer's request to send nothing more (an interrupted
/// run); the answer says how many training steps are under way or done.
using stop_atom = caf::atom_constant<caf::atom("stop")>;

struct data_loader_settings {
  std::shared_ptr<const dataset_split> data;
  run_plan plan;
  bool shuffle = true;
  std::uint64_t seed = 0;
  std::int64_t prefetch = 2;
  device_id on;                      // its own device (batches go to each replica's)
  device_set* devices = nullptr;     // whose streams assemble the batches
};

/// `total` rows split in proportion to `weights` (each > 0): the whole rows of each share,
/// then one more row each for the largest remainders (ties to the lower index). Equal
/// weights give equal parts when they divide.
std::vector<std::int64_t> apportion_rows(std::int64_t total, const std::vector<double>& weights);

/// The sample indices of epoch `epoch`: a permutation keyed by (seed, epoch), or the
/// identity without shuffling.
std::vector<std::int64_t> epoch_order(std::int64_t count, std::uint64_t seed, std::int64_t epoch,
                                      bool shuffle);

/// The B sample indices of training step `step` of a data set that draws its samples
/// (dataset::draws_per_epoch): uniform in [0, count) with replacement, keyed by (seed, step),
/// so a resumed run and every wiring draw the same.
std::vector<std::int64_t> step_draws(std::int64_t count, std::uint64_t seed, std::int64_t step,
                                     std::int64_t batch);

class data_loader_actor : public device_actor {
 public:
  data_loader_actor(caf::actor_config& config, data_loader_settings settings);

  /// A first layer of another process's replica leaves its credits in shared memory.
  bool takes_posted_releases() const override { return true; }

 protected:
  caf::message_handler handlers() override;
  void connect(const wiring_msg& wiring) override;
  void release_peers() override;
  std::string status() const override;

 private:
  /// Sends the next item; false when there is none left.
  bool send_next();
  void send_batch(const dataset& source, const std::int64_t* rows, std::int64_t count,
                  const micro_tag& tag, std::int64_t global_batch, std::int64_t global_terms);
  /// The loss's terms in these rows: one a row or position (less ignored labels), or K
  /// a row for float targets; `epoch`: a training batch's (-1: an evaluation's).
  std::int64_t terms_of(const dataset& source, const std::int64_t* rows, std::int64_t count,
                        std::int64_t epoch = -1) const;
  /// Takes back a credit of replica `replica`'s first wire; how many are in flight after.
  std::int64_t release_credit(std::size_t replica);

  data_loader_settings settings_;
  std::vector<credit_outbox> first_layers_;  // per replica
  // Per replica: its first layer's node's assembler, with the credits of the wire, when
  // that node is not the loader's (else unconnected).
  std::vector<basic_credit_outbox<batch_rows_msg>> relayed_;
  std::vector<std::uint64_t> rows_sent_;     // by replica: rows messages sent to its assembler
  std::vector<device_id> replica_devices_;   // where each replica's batches are placed
  std::vector<caf::actor> losses_;           // per replica
  std::vector<std::uint32_t> first_layer_tracks_;  // trace tracks, per replica
  std::vector<std::string> first_layer_names_;
  std::vector<std::string> first_layer_devices_;  // as the wiring names them
  std::vector<std::uint32_t> loss_tracks_;
  std::int64_t next_step_ = 0;
  std::int64_t next_eval_ = -1;        // >= 0 while an evaluation is being sent
  std::int64_t eval_counter_ = 0;      // eval batches sent so far (their tag.step)
  std::int64_t order_epoch_ = -1;
  bool stopped_ = false;  // an interrupted run: nothing more is sent
  std::vector<std::int64_t> order_;
};

}  // namespace troupe
