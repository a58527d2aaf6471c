// layer_actor.hpp: the actor that runs one layer of one replica on one device.
//
// It receives activations (forward) and gradients (backward) tagged with step and
// micro-batch, copies them to its device if they come from another one, submits the
// layer's math to its device's stream and sends the results on at once, without waiting
// for them to be computed (the results carry ready events). Per micro-batch it keeps what
// forward saved until that micro-batch's backward; per step it accumulates weight
// gradients over the micro-batches and, when the last one is done, sends them on its
// grads wire (to an averager or the optimizer). A forward of step k runs only with
// parameter version k; earlier arrivals wait in order. Its outgoing activations wire has
// a capacity in credits (credit_outbox.hpp); it returns the credit of its incoming wire
// with the gradient it sends back, or with a release_msg when it sends none.
//
// In a model beyond a chain (runtime/graph/model_graph.hpp) it has several ports: an
// `add` layer one activations wire in per input, whose micro-batches it sums; a layer
// that several layers read one wire out to each, whose gradients it sums before its
// backward (Note [ports] in layer_actor.cpp).
//
// It does not own parameters (the optimizer does) and knows nothing of data or loss. The
// protocol around its math (wiring, failures, status, finish, readiness, tracing) is
// device_actor's.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "actors/base/actor_kinds.hpp"
#include "actors/base/credit_outbox.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/model/fused_layer.hpp"
#include "runtime/model/interleaved_schedule.hpp"
#include "runtime/model/layer.hpp"
#include "troupe/device.hpp"
#include "troupe/device_actor.hpp"
#include "troupe/messages.hpp"
#include "troupe/ops.hpp"

namespace troupe {

struct layer_actor_settings {
  std::string name;               // e.g. "layer_2" or "r1.layer_2"
  std::int32_t layer_index = 0;   // position in the model
  std::int32_t replica = 0;
  std::int32_t microbatches = 1;  // M: backward passes per step before grads go out
  std::uint64_t seed = 0;         // [run] seed: the key of the layer's randomness
  shape_t input_shape;            // per sample
  device* on = nullptr;           // the device it runs on (outlives the actor)
  std::unique_ptr<layer> math;
  // ZB-H1 (Note [split backward] in layer_actor.cpp): a layer that splits its backward
  // sends dx on at once and leaves the weight gradient to the device's idle lane, holding
  // at most stash_limit micro-batches (forwarded, weight gradient not yet run; 0: no limit).
  bool split_backward = false;
  std::int64_t stash_limit = 0;
  // Interleaved 1F1B (Note [interleaved stages] in runtime/model/interleaved_schedule.hpp):
  // the turns of its device, shared with the other stages there; null otherwise. A
  // stage's first layer waits for its forwards' turns, its last layer for its backwards'.
  std::shared_ptr<stage_sequencer> sequencer;
  std::int64_t stage = 0;
  bool first_of_stage = false;
  bool last_of_stage = false;
  // [run] precision = "bf16" (or the layer's own): which parameters, by index, the layer
  // gets rounded to bf16 (Note [bf16 parameters] in layer_actor.cpp); empty: none.
  std::vector<bool> bf16_params;
  // Whether every layer reading this one's output takes it in bf16, so that a layer that
  // makes bf16 activations makes them (Note [bf16 activations] in layer_actor.cpp).
  bool readers_take_bf16 = false;
  // A fused group (Note [fused layers] in runtime/graph/fusion.hpp): `math` is this
  // fused_layer, whose members get their parameters from their own optimizers and send
  // their gradients to their own sinks (the grads wires, in member order); each member's
  // trace track, for its spans inside the fused jobs. Null / empty: one layer.
  const fused_layer* fused = nullptr;
  std::vector<std::uint32_t> member_tracks;
};

/// Which of `math`'s parameters it computes with in bf16 at `precision` (the run's, or the
/// layer's own setting), by index; empty when none.
std::vector<bool> bf16_parameter_mask(const layer& math, const shape_t& input_shape,
                                      numeric_precision precision);
/// The same for the layer `layer_config` in a run of `config`: at the layer's own precision
/// setting, else the run's. Its optimizer sends it each version so (Note [bf16 parameters]),
/// and calibrate times it so.
std::vector<bool> bf16_parameter_mask(const layer& math, const layer_config& layer_config,
                                      const shape_t& input_shape, const run_config& config);
/// For each layer actor of `graph` (a run of `config`) that sends activations: whether every
/// actor reading them is a layer that takes them in bf16 on its device (Note [bf16
/// activations] in layer_actor.cpp). The loss reads in f32. Empty where no layer computes
/// in bf16. `as`: the device type every layer is bound to instead of its own (calibrate times
/// a config's layers on a CPU thread, whatever devices it names).
bf16_readers bf16_readers_of(const topology& graph, const run_config& config,
                             std::optional<device_type> as = std::nullopt);

/// The dtypes of x (as the layer takes it) and y that a run of `config` gives each model
/// layer of `graph`, by index, on its first replica's device, or as if on a device of type
/// `as` (the rules of Note [bf16 activations]): what calibrate times each layer with.
struct activation_types {
  dtype x = dtype::f32;
  dtype y = dtype::f32;
};
std::vector<activation_types> activation_dtypes(const topology& graph, const run_config& config,
                                                std::optional<device_type> as = std::nullopt);

/// Spawns one actor that runs `members` (consecutive layer actors of one replica on one
/// device, in model order) fused, as `name` (Note [fused layers] in runtime/graph/fusion.hpp);
/// `member_tracks` are their trace tracks (0 when not tracing).
caf::actor spawn_fused_layers(const std::string& name, const std::vector<const actor_plan*>& members,
                              std::vector<std::uint32_t> member_tracks, spawn_context& context);

/// One sequencer per (device, replica) that holds layers of an interleaved pipeline
/// (topology.virtual_stages > 1); empty otherwise.
stage_sequencers make_stage_sequencers(const topology& t);

/// Asks an actor to try its parked passes again: their stage's turn may have come.
using turn_atom = caf::atom_constant<caf::atom("turn")>;

class layer_actor : public device_actor {
 public:
  layer_actor(caf::actor_config& config, std::shared_ptr<layer_actor_settings> settings);

 protected:
  caf::message_handler handlers() override;
  void connect(const wiring_msg& wiring) override;
  void release_peers() override;
  std::string role() const override;         // the layer's type
  std::string waiting_for() const override;  // what it waits for (the watchdog asks)

 private:
  using stash_key = std::tuple<std::int64_t, std::int32_t>;  // (step, micro-batch)
  using pass_key = std::tuple<phase, std::int64_t, std::int32_t>;  // (phase, step, micro-batch)

  // Note [ports]: the wires in (inputs, in the order the layer names them) and out
  // (readers, in model order), told apart by the actor at the other end.
  struct in_port {
    caf::actor peer;
    std::string name;
    std::uint32_t track = 0;
    bool wants_dx = false;  // false for the data loader, which takes only the credit
  };
  struct out_port {
    credit_outbox wire;
    std::string name;
    std::uint32_t track = 0;
  };
  // The parts of one micro-batch's pass arriving on several ports.
  struct gathering {
    std::vector<tensor> parts;  // by port
    std::size_t count = 0;
  };

  struct stash_entry {
    std::shared_ptr<std::vector<tensor>> saved;  // written by the forward job
    std::vector<tensor> params;                  // the version forward used
    shape_t input_shape;                         // (b, input...)
    dtype input_type = dtype::f32;               // x as the layer took it: dx's dtype
    dtype output_type = dtype::f32;              // y's: the dtype dy is given in
  };

  // A forward or a backward waiting for this actor's previous job to run. With several
  // ports, `more` holds the other ports' inputs (forward) or gradients (backward).
  struct pass {
    activation_msg activation;
    gradient_msg gradient;
    bool backward = false;
    std::vector<tensor> more;
  };

  /// Which port the message being handled came in on (by its sender); `ends` are the
  /// ports' peers. A message that came back once ready (sent by no one) keeps `carried`.
  template <class Ports>
  std::int32_t port_of(const Ports& ports, std::int32_t carried);
  void arrive_forward(activation_msg& message, std::int32_t port);
  void arrive_backward(gradient_msg& message, std::int32_t port);
  /// Files `part` under its port; true (and the parts in `out`) once every port has one.
  bool gathered(std::map<pass_key, gathering>& by_key, const pass_key& key, std::size_t ports,
                std::int32_t port, tensor part, std::vector<tensor>& out);
  /// `parts` summed in order on this device (one job), or parts[0] alone.
  tensor summed(std::vector<tensor> parts, const micro_tag& tag, const char* job);
  void send_release(const micro_tag& tag);
  /// Passes of one direction in micro-batch order within each step (Note [passes in
  /// order]): the next micro-batch of each step, and the passes that came ahead of it.
  struct in_order {
    std::map<std::int64_t, std::int32_t> next;  // by step: the micro-batch that goes next
    std::int64_t done_through = -1;             // the last step all of whose passes went
    std::map<stash_key, pass> early;
  };
  void offer_in_order(in_order& gate, pass work);
  /// A pass in its turn: a forward waits for its parameter version, then offer().
  void proceed(pass work);
  void offer(pass work);
  void take_turns();
  void admit(pass work);
  void drain();
  void make_room();
  std::int64_t held();
  void forward(pass& work);
  /// What every forward ends with: stash (training) or release (evaluation), then y to
  /// every reader.
  void finish_forward(const micro_tag& tag, const shape_t& input_shape, dtype input_type,
                      std::shared_ptr<std::vector<tensor>> saved, tensor y);
  void backward(pass& work);
  void install(params_msg& message);
  /// `params` (of version `version`; the layer's from index `first` on) in the precision
  /// this layer computes each with (Note [bf16 parameters]).
  std::vector<tensor> in_precision(const std::vector<tensor>& params, std::size_t first,
                                   std::int64_t version);
  /// Sends the step's weight gradients (ready at `done`) to the sink(s).
  void send_grads(const micro_tag& tag, const event& done);
  /// The context a pass of `tag` over a micro-batch of `batch` samples runs with: its
  /// randomness keyed by (seed, step, layer, the micro-batch's first sample in the step),
  /// the sample order the data loader uses (replica-major, then micro-batch).
  layer_context context_for(device& on, const micro_tag& tag, std::int64_t batch,
                            bool training) const;
  /// Where a fused job traces its members' spans (Note [fused layers]).
  fused_layer::part_trace parts_of(const job_label& label) const;
  /// "layer_2 (linear) forward of step 3, micro-batch 1, replica 0": for errors only. With
  /// `member`, the member of a fused group that failed: "layer_2 (linear) forward of ...,
  /// replica 0 (fused in layer_0..layer_5)".
  static std::string describe(const layer_actor_settings& settings, const char* pass,
                              const micro_tag& tag, std::size_t member = SIZE_MAX);

  std::shared_ptr<layer_actor_settings> settings_;
  shape_t output_shape_;
  bool has_params_ = false;
  bool split_ = false;  // backward runs as backward_input now, backward_weight when idle
  bool merges_ = false;  // an `add` of several inputs: sums them, sends dy back to each
  kernels::ops::add::function add_ = nullptr;  // for sums over ports
  kernels::ops::axpy::function axpy_ = nullptr;
  // Wires.
  std::vector<in_port> ins_;    // activations in; gradients / releases go back
  std::vector<out_port> outs_;  // activations out
  caf::actor grad_sink_;
  std::uint32_t grad_sink_track_ = 0;
  // A fused group's: each member with parameters, in order, its sink and its version.
  struct member_port {
    const fused_layer::member* member = nullptr;
    caf::actor sink;
    std::uint32_t sink_track = 0;
    std::int64_t version = -1;
  };
  std::vector<member_port> members_;
  // State.
  std::vector<tensor> params_;
  std::int64_t version_ = -1;
  std::deque<pass> waiting_;            // forwards that arrived before their version
  std::map<pass_key, gathering> inputs_in_;     // forwards with some ports still to come
  std::map<pass_key, gathering> gradients_in_;  // backwards with some ports still to come
  in_order forwards_;                   // training forwards (Note [passes in order])
  in_order backwards_;                  // backwards of a layer with parameters
  std::map<stash_key, stash_entry> stash_;
  std::vector<tensor> grads_;           // being accumulated for grads_step_
  std::int64_t grads_step_ = -1;
  std::int32_t backwards_done_ = 0;     // micro-batches of grads_step_ done
  std::deque<pass> parked_;             // passes waiting for their turn (take_turns)
  std::deque<pass> queued_;             // Note [one job at a time] in layer_actor.cpp
  event last_job_;                      // this actor's last main-lane job in its stream
  std::deque<event> weight_jobs_;       // its idle-lane jobs, oldest first (some may have run)
  /// Micro-batches held (held() as its weight-gradient jobs run), for the device's idle
  /// lane deciding on another thread whether a forward on its way has room (arrive_forward).
  std::shared_ptr<std::atomic<std::int64_t>> holding_ =
      std::make_shared<std::atomic<std::int64_t>>(0);
  std::deque<weight_grads_msg> unwritten_;  // sent once their weight gradients have run
  bool resume_requested_ = false;
};

}  // namespace troupe
