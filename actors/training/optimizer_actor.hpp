// optimizer_actor.hpp: owns one layer's parameters and optimizer state.
//
// At start it initialises the parameters from the seed (keyed by layer and parameter
// index, so every wiring starts from the same numbers) and sends version 0 on each of its
// params wires (every replica of its layer it serves). For each step it waits for one
// gradient message per incoming grads wire (an averager's sum, or the layer's own
// gradients; several are summed as they arrive, so the expander always puts an averager
// before an optimizer that serves replicas), applies SGD, Adam or AdamW on its device
// with the step's learning rate, and sends version step + 1. A version is a fresh
// tensor: a version once sent is never written again. The protocol around that (wiring,
// failures, status, finish, readiness, tracing) is device_actor's.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/base/collective_messages.hpp"
#include "actors/training/checkpoint_writer.hpp"
#include "runtime/config/config.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/model/layer.hpp"
#include "runtime/model/lr_schedule.hpp"
#include "troupe/device.hpp"
#include "troupe/device_actor.hpp"
#include "troupe/messages.hpp"
#include "troupe/ops.hpp"

namespace troupe {

struct optimizer_actor_settings {
  std::string name;                 // e.g. "optimizer_0"
  std::int32_t layer_index = 0;
  std::int32_t replica = -1;        // -1: serves every replica (central averaging)
  std::vector<param_spec> params;   // what to create
  optimizer_section optimizer;      // type and hyper-parameters
  lr_schedule schedule;
  std::uint64_t seed = 0;
  device* on = nullptr;
  /// Where it starts (a checkpoint, init_from): its layer's tensors by name ("weight",
  /// "weight.exp_avg"; Note [checkpoint names]); null or a missing name: from the seed
  /// (parameters) or zeros (state). Outlives the constructor only.
  const std::map<std::string, std::vector<float>>* start = nullptr;
  std::int64_t start_version = 0;  // the checkpoint's step
  checkpoint_plan checkpoints;     // when to send the writer a copy
  bool writes_checkpoints = false;  // Note [who writes a checkpoint]
  bool sharded = false;             // a ZeRO-1 optimizer: it owns spans, not whole tensors
  /// Which parameters, by index, its layers compute with in bf16: each version is sent
  /// with those rounded (Note [bf16 parameters] in layer_actor.cpp); empty: none.
  std::vector<bool> bf16_params;
  /// Local SGD (Note [local SGD] in actors/averaging/allreduce_averager_actor.cpp): this
  /// replica steps on its own gradients and has its averager average the parameters after
  /// every `sync_every`-th step, after the run's last step (`total_steps`) and at the end
  /// of every evaluated epoch (`epoch_steps`; 0: none). sync_every 0: synchronous.
  /// DiLoCo (Note [DiLoCo] in optimizer_actor.cpp): each sync is an outer SGD step on the
  /// replicas' mean parameter delta, with this rate and momentum.
  struct local_sgd_plan {
    std::int64_t sync_every = 0;
    std::int64_t total_steps = 0;
    std::int64_t epoch_steps = 0;
    bool diloco = false;
    bool outer_nesterov = true;
    double outer_lr = 1;
    double outer_momentum = 0;
  } local;
  /// averaging = "async" (Note [asynchronous server] in async_server.cpp): this optimizer
  /// serves every replica and applies each one's gradients as they arrive, at most
  /// `max_staleness` of its updates after the version they were computed on; every replica
  /// gets the same version at each barrier step: the run's last (`total_steps`), each
  /// evaluated epoch's end (`epoch_steps`; 0: none) and each checkpoint. -1: not a server.
  struct async_plan {
    std::int64_t max_staleness = -1;
    std::int64_t total_steps = 0;
    std::int64_t epoch_steps = 0;
  } async;
};

using staleness_atom = caf::atom_constant<caf::atom("staleness")>;
/// An async server's staleness counts: counts[s] updates were applied s updates after the
/// version their gradients were computed on (the reply to staleness_atom).
using staleness_counts = std::vector<std::int64_t>;

/// Whether the optimizer `plan` is sharded (ZeRO-1: its layer's ring averagers hand it
/// spans), and whether it writes a shard of each checkpoint (Note [who writes a
/// checkpoint] in optimizer_actor.cpp).
bool optimizer_is_sharded(const actor_plan& plan, const topology& graph, const run_config& config);
bool optimizer_writes_checkpoints(const actor_plan& plan, const topology& graph,
                                  const run_config& config);

class optimizer_actor : public device_actor {
 public:
  optimizer_actor(caf::actor_config& config, optimizer_actor_settings settings);

 protected:
  caf::message_handler handlers() override;
  void connect(const wiring_msg& wiring) override;
  void release_peers() override;
  std::string waiting_for() const override;

 private:
  /// The names of its optimizer state, in buffer order (Note [checkpoint names]).
  std::vector<std::string> state_names() const;
  void receive_grads(weight_grads_msg& message);
  void update(std::int64_t step);
  /// Sharded optimizer: updates the spans of `reduced` and hands them to the averager.
  void update_shard(shard_msg& reduced);
  /// Sharded optimizer: the all-gathered parameters become the next version.
  void take_gathered(shard_msg& gathered);
  /// The replica whose own copy of the state it keeps in a checkpoint: its replica under
  /// local SGD (Note [checkpoint names]), else 0 (the shared copy).
  std::int32_t own_copy_replica() const;
  /// Local SGD: whether the parameters of step `step` (version step + 1) are averaged.
  bool syncs_after(std::int64_t step) const;
  /// Local SGD: the replicas' mean of `averaged.step`'s parameters becomes the next version
  /// (DiLoCo: the outer step on their mean delta does).
  void take_average(shard_msg& averaged);
  bool diloco() const { return settings_.local.diloco && settings_.local.sync_every > 0; }
  /// DiLoCo: submits the outer step from `mean_delta`; the new outer parameters.
  tensor outer_step(std::int64_t step, const tensor& mean_delta);
  std::int64_t parameter_count() const;
  /// The buffers of state_names(), in its order: each (P) flat like the parameters.
  std::vector<tensor> state_buffers() const;
  /// A run of parameters one update job treats: `n` floats of each buffer.
  struct piece {
    const float* current;
    float* next;
    const float* grad;
    float* first;   // momentum / first moments (nullptr: SGD without momentum)
    float* second;  // Adam's second moments
    std::int64_t n;
  };
  /// Submits step `step`'s update of `pieces` to the device, the optimizer's `applied`-th
  /// (its first is 0: Adam's bias correction and SGD's first momentum count them), for
  /// `replica`'s gradients (-1: all of them; the job's label); `keep` holds their buffers
  /// until it has run. Returns the job's event.
  event submit_update(std::int64_t step, std::vector<piece> pieces, std::vector<tensor> keep,
                      std::int64_t applied, std::int32_t replica = -1);
  /// Submits the update of the current version by `grads` (step `step`, the `applied`-th)
  /// into new buffers (views of one (P) buffer put in `*flat` if `flat` is not null).
  std::vector<tensor> updated_params(std::int64_t step, std::int64_t applied,
                                     std::vector<tensor> grads, tensor* flat,
                                     std::int32_t replica = -1);
  // ---- the async server (async_server.cpp) ----
  bool serves_async() const { return settings_.async.max_staleness >= 0; }
  void connect_async(const wiring_msg& wiring);
  void receive_async(weight_grads_msg& message);
  /// Applies every held gradient the staleness bound lets through, oldest version first.
  void apply_async();
  /// Whether the replicas meet at version `version` (they all get the same parameters).
  bool async_barrier(std::int64_t version) const;
  std::string async_waiting_for() const;
  /// Views of `flat` shaped like the parameters, ready when it is.
  std::vector<tensor> unflatten(const tensor& flat) const;
  void set_version(std::int64_t version, std::vector<tensor> params);
  /// Answers the gets for versions up to version_ with the current parameters.
  void deliver_waiting();
  /// Sends the checkpoint writer a copy of version `version` and its state, taken in
  /// stream order (Note [who writes a checkpoint]).
  void checkpoint(std::int64_t version);
  void publish();

  optimizer_actor_settings settings_;
  std::vector<tensor> params_;      // the current version
  tensor params_flat_;              // params_ as one buffer, when they are views of one
  std::int64_t version_ = 0;
  std::vector<tensor> momentum_;    // sgd: momentum buffers; adam: first moments
  std::vector<tensor> second_;      // adam: second moments
  tensor momentum_flat_, second_flat_;  // the two above are views of these
  tensor outer_flat_;                   // DiLoCo: theta, the outer parameters (P)
  tensor outer_momentum_flat_;          // DiLoCo: the outer momentum (P), if any
  caf::actor averager_;             // the sender of our gradients (the sharded exchange)
  std::uint32_t averager_track_ = 0;
  std::int64_t requested_checkpoint_ = -1;  // an interrupted run's last version
  std::vector<std::int64_t> owned_spans_;   // sharded: (offset, size) pairs it updates
  std::vector<tensor> grad_sum_;    // the step's gradients, summed over grads wires
  bool averaging_ = false;          // local SGD: the next version is being averaged
  std::int32_t grads_received_ = 0;
  std::int32_t grads_expected_ = 1; // incoming grads wires
  /// The async server's books (Note [asynchronous server]).
  struct async_gradient {
    std::int32_t replica;
    std::int64_t step;
    std::vector<tensor> grads;
  };
  struct async_state {
    std::int64_t updates = 0;             // applied since the start (R per step)
    std::vector<std::int64_t> based_on;   // by replica: `updates` when its version was made
    std::vector<std::int64_t> next_step;  // by replica: the step it computes now
    std::vector<bool> at_barrier;         // by replica: waits for the others at a barrier
    std::vector<std::size_t> subscriber;  // by replica: its index in subscribers_
    std::vector<async_gradient> held;     // arrived, not yet applied
    staleness_counts staleness;           // counts by staleness
  } async_;
  std::vector<caf::actor> subscribers_;
  std::vector<std::uint32_t> subscriber_tracks_;
  std::string sources_;  // names of the grads wires' senders
  std::vector<std::pair<std::int64_t, caf::typed_response_promise<std::vector<tensor>>>>
      waiting_for_version_;
  kernels::ops::sgd_update::function sgd_ = nullptr;
  kernels::ops::adam_update::function adam_ = nullptr;
  kernels::ops::axpy::function axpy_ = nullptr;
  kernels::ops::scale::function scale_ = nullptr;
};

}  // namespace troupe
